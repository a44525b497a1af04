"""What a communication call is, and its fields read off the op that made it: what it did, to
whom, how many bytes.

Sources, most exact first (comms.py finds which ops make up a call; an op nested inside a
recognised call belongs to that call):

1. our capture annotations (`chakra_tools.comm:{...}`, see core/annotations.py): op, group and
   its global ranks, peer, tag, dtype, element counts, split sizes, root;
2. `record_param_comms` (NCCL; from schema 1.1.0 with `collective_name`, `pg_name`,
   `in_msg_nelems`... attributes; before that the name is a string input and the tensors give the
   sizes);
3. `c10d::<op>` ops (gloo on CPU records only these and `gloo:<op>`), sized from their tensors;
4. a lone backend op `nccl:<op>` / `gloo:<op>` (device-only traces);
5. collective ops outside c10d (PyTorch symmetric memory `symm_mem::*`, vLLM's custom
   all-reduce `_C_custom_ar::all_reduce`; devcomm.py), sized from their input tensor, on the
   group they name.

Device-only traces carry `record_param_comms`' metadata in the event's `args` (`Collective name`,
`In msg nelems`, `dtype`, `Process Group Name`, `Process Group Ranks`...): rank.py hands it over
as the attributes a host trace has (`comm_attrs_from_kineto`), so it is read the same way.

`comm_size` convention (bytes, what ASTRA-sim's collective models take, see docs/reference/trace-convert.md):
all_reduce, reduce, broadcast: the buffer; all_gather, gather: this rank's contribution (input);
reduce_scatter: the whole input; all_to_all: everything this rank sends (sum of its input splits);
scatter: this rank's chunk (output); barrier: 0; send/recv: the message.
"""

from __future__ import annotations

from __future__ import annotations

import re
from dataclasses import dataclass, field

from chakra_tools.core.annotations import parse_annotation, parse_wait, PREFIX as ANNOTATION_PREFIX
from chakra_tools.core.model import CommType

from .devcomm import LIBRARIES, LIBRARY_PREFIXES, group_name, input_index, kernel_kind, library_kind
from .hostet import HostOp
from .schema import KINETO_COMM_ARGS
from .hotloops import tensor_bytes
from .tensors import dtype_name, elem_bytes_of, is_tensor, iter_tensors, shapes_bytes

COMM_TYPES = {
    "all_reduce": CommType.ALL_REDUCE, "reduce": CommType.REDUCE,
    "all_gather": CommType.ALL_GATHER, "gather": CommType.GATHER, "scatter": CommType.SCATTER,
    "broadcast": CommType.BROADCAST, "all_to_all": CommType.ALL_TO_ALL,
    "reduce_scatter": CommType.REDUCE_SCATTER, "barrier": CommType.BARRIER,
}
P2P = ("send", "recv")

#: normalised name (lower case, no underscores, no _base/_coalesced/_into_tensor) -> op
_KEYS = {
    "allreduce": "all_reduce", "reduce": "reduce", "allgather": "all_gather", "gather": "gather",
    "scatter": "scatter", "broadcast": "broadcast", "alltoall": "all_to_all",
    "alltoallv": "all_to_all", "reducescatter": "reduce_scatter", "barrier": "barrier",
    "monitoredbarrier": "barrier", "send": "send", "recv": "recv", "recvanysource": "recv",
    "sendrecv": "all_to_all",
}
_STRIP = re.compile(r"(_base|_coalesced|_into_tensor|_tensor)")

#: c10d op -> argument positions: (input, output, root, peer, tag, in_split, out_split, async)
C10D_ARGS = {
    "all_reduce": (0, 0, None, None, None, None, None, -2),
    "broadcast": (0, 0, 2, None, None, None, None, -2),
    "reduce": (0, 0, 3, None, None, None, None, -2),
    "all_gather": (1, 0, None, None, None, None, None, -2),
    "gather": (1, 0, 3, None, None, None, None, -2),
    "scatter": (1, 0, 3, None, None, None, None, -2),
    "reduce_scatter": (1, 0, None, None, None, None, None, -2),
    "all_to_all": (1, 0, None, None, None, 4, 3, -2),
    "barrier": (None, None, None, None, None, None, None, -2),
    "send": (0, None, None, 2, 3, None, None, None),
    "recv": (None, 0, None, 2, 3, None, None, None),
}


def op_kind(name: str) -> str | None:
    """The communication op a name stands for, or None.

    >>> op_kind("c10d::_allgather_base_"), op_kind("nccl:all_to_allv"), op_kind("gloo:recv")
    ('all_gather', 'all_to_all', 'recv')
    >>> op_kind("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*)"), op_kind("aten::mm")
    ('reduce_scatter', None)
    """
    if name.startswith(("c10d::", "nccl:", "gloo:")):
        base = name.split(":")[-1]
    elif name.startswith(("ncclKernel_", "ncclDevKernel_")):
        base = name.split("_", 1)[1].split("_")[0].split("(")[0]
    else:
        base = name
    key = _STRIP.sub("", base.lower()).replace("_", "")
    return _KEYS.get(key)


def is_backend_op(name: str) -> bool:
    return name.startswith(("nccl:", "gloo:")) and op_kind(name) is not None




@dataclass
class CommCall:
    """One communication call of a rank, with what the trace tells about it."""

    root: int                      # host op id of the outermost op of the call
    op: str                        # all_reduce ... barrier, send, recv
    name: str                      # the name the output node gets
    source: str                    # annotation | record_param_comms | c10d | backend
    in_bytes: int = 0
    out_bytes: int = 0
    dtype: str = ""
    elem_bytes: int = 0
    in_nelems: int | None = None
    out_nelems: int | None = None
    in_split: tuple[int, ...] = ()
    out_split: tuple[int, ...] = ()
    pg: str | None = None          # torch's name of the process group, None = default (world)
    pg_ranks: tuple[int, ...] | None = None
    pg_desc: str = ""
    group_size: int | None = None
    peer: int | None = None        # point-to-point: the other side's global rank
    tag: int | None = None
    root_rank: int | None = None
    is_async: bool | None = None
    seq: int | None = None         # record_param_comms sequence number (matched by `wait`)
    backend: int | None = None     # host op id of the nccl:/gloo: op
    backend_kind: str | None = None  # its op (gloo runs some kinds as others)
    members: set[int] = field(default_factory=set)  # host op ids inside the call
    c10d_collectives: int = 0  # c10d collective ops among the members

    @property
    def comm_type(self) -> CommType | None:
        return COMM_TYPES.get(self.op)

    @property
    def comm_size(self) -> int:
        """Bytes by the convention in the module docstring."""
        if self.op in ("barrier",):
            return 0
        if self.op in ("scatter", "recv"):
            return self.out_bytes or self.in_bytes
        return self.in_bytes or self.out_bytes


@dataclass
class WaitMark:
    """A host op that waits for earlier collectives (`record_param_comms` 'wait' by sequence
    number, `c10d::wait`...)."""

    op_id: int
    seq: int | None
    pg: str | None = None  # with `seq`: the group's sequence (a trace-capture wait annotation)


def attach_backend(call: CommCall, op: HostOp) -> None:
    """Attach the nccl:/gloo: op; its tensors size the call when the call's own did not."""
    call.backend = op.id
    call.backend_kind = op_kind(op.name)
    if not call.in_bytes and call.op != "barrier":
        inner = _from_tensors(op, call.op, "backend")
        call.in_bytes, call.out_bytes = inner.in_bytes, call.out_bytes or inner.out_bytes
        call.dtype = call.dtype or inner.dtype
        call.elem_bytes = call.elem_bytes or inner.elem_bytes


def merge_record(call: CommCall, op: HostOp) -> None:
    """Add what a nested `record_param_comms` knows (sequence number, group; sizes where the
    call's own tensors gave none, as in device-only traces) to a c10d call."""
    inner, _ = _from_record_param_comms(op)
    if inner is None or inner.op != call.op:
        return
    if not (call.in_bytes or call.out_bytes):
        call.in_bytes, call.out_bytes = inner.in_bytes, inner.out_bytes
        call.dtype, call.elem_bytes = call.dtype or inner.dtype, call.elem_bytes or inner.elem_bytes
    call.seq = inner.seq
    call.pg = call.pg if inner.pg is None else inner.pg
    call.pg_desc = call.pg_desc or inner.pg_desc
    call.pg_ranks = call.pg_ranks or inner.pg_ranks
    call.group_size = call.group_size or inner.group_size
    call.in_split = call.in_split or inner.in_split
    call.out_split = call.out_split or inner.out_split
    call.in_nelems, call.out_nelems = inner.in_nelems, inner.out_nelems


def recognise(op: HostOp) -> tuple[CommCall | None, WaitMark | None]:
    name = op.name
    if name.startswith(ANNOTATION_PREFIX):
        fields = parse_annotation(name)
        if fields:
            return _from_annotation(op, fields), None
        wait = parse_wait(name)  # Work.wait() on an annotated asynchronous call
        if wait and type(wait.get("seq")) is int:
            return None, WaitMark(op.id, wait["seq"], None if wait.get("pg") is None else str(wait["pg"]))
        return None, None
    if name == "record_param_comms":
        return _from_record_param_comms(op)
    if name.startswith("c10d::"):
        if name in ("c10d::wait", "c10d::wait_"):
            return None, WaitMark(op.id, None)
        kind = op_kind(name)
        return (_from_c10d(op, kind) if kind else None), None
    if is_backend_op(name):
        return _from_tensors(op, op_kind(name), "backend"), None
    if name.startswith(LIBRARY_PREFIXES):
        kind = library_kind(name)
        return (_from_library(op, kind) if kind else None), None
    if name.endswith("::wait_tensor"):
        return None, WaitMark(op.id, None)
    return None, None


def _from_annotation(op: HostOp, f: dict) -> CommCall:
    ranks = f.get("pg_ranks")
    return CommCall(
        root=op.id, op=f["op"], name=f"{f['op']}", source="annotation",
        in_bytes=int(f.get("in_bytes") or 0), out_bytes=int(f.get("out_bytes") or 0),
        dtype=f.get("dtype", ""), elem_bytes=int(f.get("elem_bytes") or 0),
        in_nelems=f.get("in_nelems"), out_nelems=f.get("out_nelems"),
        in_split=tuple(f.get("in_split") or ()), out_split=tuple(f.get("out_split") or ()),
        pg=None if f.get("pg") is None else str(f["pg"]),
        pg_ranks=tuple(ranks) if ranks else None, pg_desc=f.get("pg_desc", "") or "",
        group_size=len(ranks) if ranks else None, peer=f.get("peer"), tag=f.get("tag"),
        root_rank=f.get("root"), is_async=f.get("async"), seq=f.get("seq"))


def _rpc_name(op: HostOp) -> str | None:
    n = op.attrs.get("collective_name")
    if isinstance(n, str) and n:
        return n
    for v in op.in_values[3:6]:
        if isinstance(v, str) and v and not v.startswith("<"):
            return v
    return None


def _from_record_param_comms(op: HostOp) -> tuple[CommCall | None, WaitMark | None]:
    cname = _rpc_name(op)
    if cname is None:
        return None, None
    if cname == "wait":
        seq = op.in_values[0] if op.in_values and type(op.in_values[0]) is int else op.attrs.get("seq")
        return None, WaitMark(op.id, seq)
    kind = op_kind(cname)
    if kind is None:
        return None, None
    a = op.attrs
    vals = op.in_values
    call = CommCall(root=op.id, op=kind, name=f"nccl:{kind}", source="record_param_comms")
    call.in_bytes = tensor_bytes(vals[0]) if vals else 0
    call.out_bytes = tensor_bytes(op.out_values[0]) if op.out_values else 0
    types = op.in_types
    call.dtype = str(a.get("dtype") or (dtype_name(types[0]) if types else ""))
    call.elem_bytes = next((t[4] for t in iter_tensors(vals[:1])), 0) or elem_bytes_of(call.dtype)
    call.in_nelems = a.get("in_msg_nelems")
    call.out_nelems = a.get("out_msg_nelems")
    if call.in_nelems is not None and call.elem_bytes and not call.in_bytes:
        call.in_bytes = call.in_nelems * call.elem_bytes
    if call.out_nelems is not None and call.elem_bytes and not call.out_bytes:
        call.out_bytes = call.out_nelems * call.elem_bytes
    call.in_split = _ints(a.get("in_split_size", vals[5] if len(vals) > 5 else ()))
    call.out_split = _ints(a.get("out_split_size", vals[6] if len(vals) > 6 else ()))
    call.seq = vals[1] if len(vals) > 1 and type(vals[1]) is int else a.get("seq")
    _rpc_group(call, a, vals)
    return call, None


def _rpc_group(call: CommCall, a: dict, vals: list) -> None:
    """The group of a `record_param_comms` call: from its attributes (schema >= 1.1.0), else
    from its inputs, which end with the group size (8 inputs: Megatron's schema 1.0.1) or with
    global rank start, stride and group size (10 inputs: schema 1.0.3)."""
    if a.get("pg_name") is not None:
        call.pg = str(a["pg_name"])
        call.pg_desc = str(a.get("pg_desc") or "")
    size = a.get("pg_size")
    start, stride = a.get("global_rank_start"), a.get("global_rank_stride")
    if size is None and len(vals) >= 10 and all(type(v) is int for v in vals[7:10]):
        start, stride, size = vals[7:10]
    elif size is None and len(vals) > 7 and type(vals[7]) is int:
        size = vals[7]
    call.group_size = size
    listed = _ints(a.get("pg_ranks", ()))  # Kineto's `Process Group Ranks`: the exact list
    if listed and (not size or len(listed) == size):
        call.pg_ranks = listed
    elif size and start is not None and start >= 0 and stride:
        call.pg_ranks = tuple(start + stride * i for i in range(size))


def comm_attrs_from_kineto(args: dict) -> dict:
    """A Kineto event's collective metadata as host-trace attributes (empty if it has none).

    >>> comm_attrs_from_kineto({"Collective name": "allreduce", "In msg nelems": 8, "stream": 7})
    {'collective_name': 'allreduce', 'in_msg_nelems': 8}
    """
    return {KINETO_COMM_ARGS[k]: v for k, v in args.items() if k in KINETO_COMM_ARGS}


def _ints(v) -> tuple[int, ...]:
    if isinstance(v, str):
        v = [int(x) for x in re.findall(r"-?\d+", v)]
    return tuple(int(x) for x in v if type(x) is int) if isinstance(v, (list, tuple)) else ()


def _from_c10d(op: HostOp, kind: str) -> CommCall:
    i_in, i_out, i_root, i_peer, i_tag, i_isp, i_osp, i_async = C10D_ARGS[kind]
    vals, shapes, types = op.in_values, op.in_shapes, op.in_types
    call = CommCall(root=op.id, op=kind, name=op.name, source="c10d")
    if i_in is not None:
        call.in_bytes = arg_bytes(vals, shapes, types, i_in)
    if i_out is not None:
        call.out_bytes = arg_bytes(vals, shapes, types, i_out)
    call.root_rank = _int_at(vals, i_root)
    call.peer = _int_at(vals, i_peer)
    call.tag = _int_at(vals, i_tag)
    if i_isp is not None:
        call.in_split = _ints(vals[i_isp]) if i_isp < len(vals) else ()
        call.out_split = _ints(vals[i_osp]) if i_osp < len(vals) else ()
    if i_async is not None and len(vals) >= -i_async and type(vals[i_async]) is bool:
        call.is_async = vals[i_async]
    _set_dtype(call, vals, types)
    return call


def _from_tensors(op: HostOp, kind: str, source: str) -> CommCall:
    vals, shapes, types = op.in_values, op.in_shapes, op.in_types
    call = CommCall(root=op.id, op=kind, name=op.name, source=source)
    call.in_bytes = sum(arg_bytes(vals, shapes, types, i) for i in range(max(len(vals), len(shapes))))
    call.out_bytes = call.in_bytes
    _set_dtype(call, vals, types)
    return call


def _from_library(op: HostOp, kind: str) -> CommCall:
    """A symmetric-memory or custom all-reduce op: its input tensor's bytes, on the group it
    names (symmetric memory takes torch's group name; vLLM's custom all-reduce names none: the
    world group)."""
    vals, shapes, types = op.in_values, op.in_shapes, op.in_types
    lib = LIBRARIES[op.name[:op.name.index("::") + 2]]
    call = CommCall(root=op.id, op=kind, name=f"{lib}:{kind}", source="library")
    call.in_bytes = arg_bytes(vals, shapes, types, input_index(op.name))
    call.pg = group_name(vals) if op.name.startswith("symm_mem::") else None
    _set_dtype(call, vals, types)
    return call


def kernel_call(root: int, name: str, args: dict) -> CommCall:
    """A collective known only by its kernel (launched outside any recognised call): kind,
    size and group from the kernel's own metadata where Kineto recorded it (PyTorch >= 2.1 puts
    `record_param_comms`' fields on NCCL kernels), else the kind its name says."""
    kind = kernel_kind(name) or "all_reduce"  # GENERIC without metadata: assumed (build.py says so)
    call = recorded_call(root, args, kind)
    if call is not None:
        call.source = "kernel"
        return call
    return CommCall(root=root, op=kind, name=f"nccl:{kind}", source="kernel")


def recorded_call(op_id: int, args: dict, kind: str | None = None) -> CommCall | None:
    """The call a Kineto event's `record_param_comms` metadata describes (`kind` where it names
    none), as op `op_id`; None where the event carries none."""
    meta = comm_attrs_from_kineto(args)
    if not meta:
        return None
    if kind is not None:
        meta.setdefault("collective_name", kind)
    return _from_record_param_comms(HostOp(op_id, "record_param_comms", 0, 0, None, ([], [], []), ([], [], []),
                                          meta))[0]


def _set_dtype(call: CommCall, vals: list, types: list) -> None:
    for i, t in enumerate(types):
        if isinstance(t, str) and ("Tensor(" in t or elem_bytes_of(t)):
            call.dtype = dtype_name(t)
            call.elem_bytes = next((x[4] for x in iter_tensors(vals[i:i + 1])), 0) or elem_bytes_of(t)
            return


def _int_at(vals: list, i: int | None) -> int | None:
    if i is None or i >= len(vals):
        return None
    v = vals[i]
    if type(v) is int:
        return v
    if isinstance(v, str) and v.lstrip("-").isdigit():
        return int(v)
    return None


def arg_bytes(values: list, shapes: list, types: list, index: int) -> int:
    """Bytes of argument `index`: from its values when recorded, else from shape and type."""
    if index < len(values):
        b = tensor_bytes(values[index])
        if b or is_tensor(values[index]):
            return b
    if index < len(shapes) and index < len(types):
        return shapes_bytes(shapes[index], types[index])
    return 0
