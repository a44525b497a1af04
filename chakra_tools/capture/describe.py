"""What each torch.distributed call did, read off its arguments: one description per API, from
the bound arguments to (op, process group, fields), for the annotation `comm.py` puts around it.

Why a module of its own: the table of APIs and the rules for reading their sizes, roots and peers
follow PyTorch's signatures (parameter names), while the wrapping around them (`comm.py`) does
not. A description only reads its arguments: it neither records nor counts, and may raise (the
caller skips the annotation then). Group members are not looked up here: `comm.group_fields`
caches them.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d


# --- groups and ranks -----------------------------------------------------------------------


def resolve_group(group: Any) -> Any:
    """The ProcessGroup object of a c10d `group=` argument (None is the default group)."""
    return group if group is not None else c10d._get_default_group()


def resolve_funcol_group(group: Any, tag: str = "") -> Any:
    """The ProcessGroup of a functional collective's group (PG, rank list, mesh, name...)."""
    from torch.distributed import _functional_collectives as funcol

    resolved = funcol._resolve_group(group, tag) if hasattr(funcol, "_resolve_group") else group
    if isinstance(resolved, str):
        return c10d._resolve_process_group(resolved)
    if not isinstance(resolved, dist.ProcessGroup):
        return c10d._resolve_process_group(funcol._resolve_group_name(group, tag))
    return resolved


def global_rank(pg: Any, global_r: int | None, group_r: int | None) -> int | None:
    """The global rank named by a `dst=`/`src=` (global) or `group_dst=`/`group_src=` argument."""
    if group_r is not None and group_r >= 0:
        return dist.get_global_rank(pg, group_r)
    return global_r


# --- sizes ------------------------------------------------------------------------------------


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def numel(tensors: Any) -> int:
    """Elements of a tensor or a (nested) list of tensors; 0 for None."""
    if tensors is None:
        return 0
    if isinstance(tensors, torch.Tensor):
        return tensors.numel()
    return sum(numel(t) for t in tensors)


def first_tensor(*candidates: Any) -> torch.Tensor | None:
    for c in candidates:
        if isinstance(c, torch.Tensor):
            return c
        if isinstance(c, (list, tuple)) and c:
            t = first_tensor(*c)
            if t is not None:
                return t
    return None


def row_splits(splits: list[int] | None, t: torch.Tensor, n: int) -> list[int]:
    """all_to_all_single split sizes (dim-0 rows, or None for equal parts) as elements per peer."""
    row = t.numel() // t.shape[0] if t.dim() > 0 and t.shape[0] else 1
    if splits is None or len(splits) == 0:
        return [t.numel() // n] * n
    return [int(s) * row for s in splits]


def sizes(t: torch.Tensor | None, in_n: int, out_n: int) -> dict[str, Any]:
    """dtype, elem_bytes and element/byte counts in and out."""
    if t is None:
        return {"in_nelems": in_n, "out_nelems": out_n, "in_bytes": 0, "out_bytes": 0}
    eb = t.element_size()
    return {"dtype": dtype_name(t), "elem_bytes": eb, "in_nelems": in_n, "out_nelems": out_n,
            "in_bytes": in_n * eb, "out_bytes": out_n * eb}


# --- one description per API: bound arguments -> (op, group, fields) --------------------------
# Each returns (op, process group, extra fields). `a` has every parameter, defaults applied.

Desc = Callable[[dict[str, Any]], tuple[str, Any, dict[str, Any]]]


def _in_place(op: str, key: str = "tensor") -> Desc:
    def describe(a):
        t = a[key]
        n = numel(t)
        return op, resolve_group(a["group"]), sizes(first_tensor(t), n, n)
    return describe


def _rooted(op: str, root_key: str) -> Desc:
    def describe(a):
        pg = resolve_group(a["group"])
        n = numel(a["tensor"])
        f = sizes(a["tensor"], n, n)
        f["root"] = global_rank(pg, a[root_key], a[f"group_{root_key}"])
        return op, pg, f
    return describe


def _out_in(op: str, out_key: str, in_key: str) -> Desc:
    def describe(a):
        t = first_tensor(a[in_key], a[out_key])
        return op, resolve_group(a["group"]), sizes(t, numel(a[in_key]), numel(a[out_key]))
    return describe


def _gather(a):
    pg = resolve_group(a["group"])
    f = sizes(a["tensor"], numel(a["tensor"]), numel(a["gather_list"]))
    f["root"] = global_rank(pg, a["dst"], a["group_dst"])
    return "gather", pg, f


def _scatter(a):
    pg = resolve_group(a["group"])
    f = sizes(a["tensor"], numel(a["scatter_list"]), numel(a["tensor"]))
    f["root"] = global_rank(pg, a["src"], a["group_src"])
    return "scatter", pg, f


def _all_to_all(a):
    outs, ins = a["output_tensor_list"], a["input_tensor_list"]
    f = sizes(first_tensor(ins, outs), numel(ins), numel(outs))
    f["in_split"] = [t.numel() for t in ins]
    f["out_split"] = [t.numel() for t in outs]
    return "all_to_all", resolve_group(a["group"]), f


def _all_to_all_single(a):
    pg = resolve_group(a["group"])
    out, inp = a["output"], a["input"]
    f = sizes(inp, inp.numel(), out.numel())
    f["in_split"] = row_splits(a["input_split_sizes"], inp, pg.size())
    f["out_split"] = row_splits(a["output_split_sizes"], out, pg.size())
    return "all_to_all", pg, f


def _barrier(a):
    return "barrier", resolve_group(a["group"]), sizes(None, 0, 0)


def _p2p(op: str, peer_key: str) -> Desc:
    def describe(a):
        pg = resolve_group(a["group"])
        n = a["tensor"].numel()
        f = sizes(a["tensor"], n, n)
        peer = global_rank(pg, a[peer_key], a[f"group_{peer_key}"])
        if peer is not None:
            f["peer"] = peer
        f["tag"] = int(a["tag"] or 0)
        return op, pg, f
    return describe


C10D: dict[str, Desc] = {
    "all_reduce": _in_place("all_reduce"),
    "all_reduce_coalesced": _in_place("all_reduce", "tensors"),
    "reduce": _rooted("reduce", "dst"),
    "broadcast": _rooted("broadcast", "src"),
    "all_gather": _out_in("all_gather", "tensor_list", "tensor"),
    "all_gather_coalesced": _out_in("all_gather", "output_tensor_lists", "input_tensor_list"),
    "all_gather_single": _out_in("all_gather", "output_tensor", "input_tensor"),
    "all_gather_into_tensor": _out_in("all_gather", "output_tensor", "input_tensor"),
    "_all_gather_base": _out_in("all_gather", "output_tensor", "input_tensor"),
    "gather": _gather,
    "scatter": _scatter,
    "reduce_scatter": _out_in("reduce_scatter", "output", "input_list"),
    "reduce_scatter_single": _out_in("reduce_scatter", "output", "input"),
    "reduce_scatter_tensor": _out_in("reduce_scatter", "output", "input"),
    "_reduce_scatter_base": _out_in("reduce_scatter", "output", "input"),
    "all_to_all": _all_to_all,
    "all_to_all_single": _all_to_all_single,
    "barrier": _barrier,
    "monitored_barrier": _barrier,
    "send": _p2p("send", "dst"),
    "isend": _p2p("send", "dst"),
    "recv": _p2p("recv", "src"),
    "irecv": _p2p("recv", "src"),
}
ASYNC_APIS = {"isend", "irecv"}


# --- functional collectives (always asynchronous: they return a tensor to wait on) ------------


def _f_in_place(a):
    t = a["self"]
    n = numel(t)
    return "all_reduce", resolve_funcol_group(a["group"], a["tag"]), sizes(first_tensor(t), n, n)


def _f_gather(a):
    pg = resolve_funcol_group(a["group"], a["tag"])
    t = a["self"]
    n = numel(t)
    return "all_gather", pg, sizes(first_tensor(t), n, n * pg.size())


def _f_scatter(key: str) -> Desc:
    def describe(a):
        pg = resolve_funcol_group(a["group"], a["tag"])
        n = numel(a[key])
        return "reduce_scatter", pg, sizes(first_tensor(a[key]), n, n // pg.size())
    return describe


def _f_all_to_all(a):
    pg = resolve_funcol_group(a["group"], a["tag"])
    t = a["self"]
    f = {"in_split": row_splits(a["input_split_sizes"], t, pg.size())}
    out_split = a["output_split_sizes"]
    f["out_split"] = (row_splits(out_split, t, pg.size()) if out_split is not None
                      else list(f["in_split"]))
    f.update(sizes(t, t.numel(), sum(f["out_split"])))
    return "all_to_all", pg, f


def _f_broadcast(a):
    pg = resolve_funcol_group(a["group"], a["tag"])
    n = a["self"].numel()
    f = sizes(a["self"], n, n)
    f["root"] = dist.get_global_rank(pg, a["src"])
    return "broadcast", pg, f


FUNCOL: dict[str, Desc] = {
    "all_reduce": _f_in_place,
    "all_reduce_coalesced": _f_in_place,
    "all_gather_tensor": _f_gather,
    "all_gather_single": _f_gather,
    "all_gather_tensor_autograd": _f_gather,
    "all_gather_single_autograd": _f_gather,
    "all_gather_into_tensor_coalesced": _f_gather,
    "all_gather_single_coalesced": _f_gather,
    "reduce_scatter_tensor": _f_scatter("self"),
    "reduce_scatter_single": _f_scatter("self"),
    "reduce_scatter_tensor_autograd": _f_scatter("self"),
    "reduce_scatter_single_autograd": _f_scatter("self"),
    "reduce_scatter_tensor_coalesced": _f_scatter("inputs"),
    "reduce_scatter_single_coalesced": _f_scatter("inputs"),
    "all_to_all_single": _f_all_to_all,
    "all_to_all_single_autograd": _f_all_to_all,
    "broadcast": _f_broadcast,
}
