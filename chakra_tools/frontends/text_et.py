"""ASTRA-sim 1.0 text workload -> Chakra ET rank set, with ASTRA-sim 1.0's own semantics.

What each policy means was learnt from ASTRA-sim 1.0's workload layer (`Workload.cc`,
`iterate_*` and `decode_involved_dimensions`), not from Chakra's text converter, which gets
three things wrong: compute cycles are stored as microseconds (1000x too long at 1 GHz), `NONE`
becomes a zero-byte all-reduce, and every collective goes to the world group. Here:

* Time: compute columns are cycles; at `frequency_ghz` (default 1.0) a cycle is 1/f ns. The ET's
  `duration_micros` holds whole microseconds (rounded half up); the exact value is kept in a
  `duration_ns` attribute.
* Groups: a collective spans a set of *network dimensions* (innermost first, `dims`, default one
  dimension of all NPUs); the members are the NPUs that differ only in those dimensions:

  | policy | forward / input-grad comm | weight-grad comm |
  | --- | --- | --- |
  | DATA, MICRO | none (columns ignored) | all dims |
  | MODEL | all dims | none |
  | HYBRID_DATA_MODEL | dim 0 (model) | dims 1.. (data) |
  | HYBRID_MODEL_DATA | dims 1.. (model) | dim 0 (data) |
  | HYBRID_TRANSFORMER | the innermost `model_parallel_NPU_group` NPUs | the other dims |
  | HYBRID_DLRM | layer 0: all dims; others: none | all dims |
  | HYBRID_CUSTOMIZED | per layer, by its 13th column | per layer |

  A collective whose group holds one NPU is no communication (ASTRA-sim skips it too).
* Loop order (one pass = forward over the layers, then backward in reverse):
  DATA: wg compute, wg comm (non-blocking), ig compute (not for layer 0).
  MODEL / HYBRID_*: fwd compute, fwd comm (blocking); ig compute, ig comm (non-blocking, not
  for layer 0), wg compute, wg comm (non-blocking); the next layer waits for the ig comm.
  HYBRID_TRANSFORMER: as HYBRID_* but the ig comm is blocking and layer 0 has one too.
  HYBRID_DLRM: the embedding all-to-all (layer 0) overlaps the bottom MLP; the first top layer
  waits for it; the backward all-to-all is issued after the first top layer's ig compute.
  DISTRIBUTED_INFERENCE: forward only, each collective blocking.
  Layer i of the next pass waits for layer i's wg comm plus its update delay.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Callable

from chakra_tools.core.errors import Diagnostic, InputError
from chakra_tools.core.graph import RankSet

from .builder import GraphBuilder
from .groups import GroupTable, group_over, split_dims
from .textwl import COMM_TOKENS, Phase, TextWorkload

Span = tuple[bool, ...]
#: the longest duration a node holds, in ns (its `duration_ns` attribute is an int64)
MAX_NS = 2**63 - 1
Spans = dict[str, Span]  # "fwd" | "ig" | "wg" -> dimensions spanned


@dataclass(frozen=True)
class TextOptions:
    """How to read a text workload. `dims`: NPUs per network dimension, innermost first (their
    product is the NPU count); `frequency_ghz`: the NPU clock the compute cycles count;
    `passes`: training iterations to unroll."""

    npus: int
    dims: tuple[int, ...] | None = None
    frequency_ghz: float = 1.0
    passes: int = 1


def policy_spans(policy: str, ndims: int, model_boundary: int) -> Spans:
    """Dimensions each phase's collective spans (ASTRA-sim 1.0's `decode_involved_dimensions`).

    >>> policy_spans("HYBRID_DATA_MODEL", 2, -1)
    {'fwd': (True, False), 'ig': (True, False), 'wg': (False, True)}
    """
    every, none = (True,) * ndims, (False,) * ndims
    first = tuple(i == 0 for i in range(ndims))
    inner = tuple(i <= model_boundary for i in range(ndims))
    if policy in ("DATA", "MICRO", "HYBRID_DLRM", "HYBRID_DLRM_ENHANCED"):
        return {"fwd": none, "ig": none, "wg": every}
    if policy in ("MODEL", "DISTRIBUTED_INFERENCE"):
        return {"fwd": every, "ig": every, "wg": none}
    if policy == "HYBRID_DATA_MODEL":
        rest = tuple(not f for f in first)
        return {"fwd": first, "ig": first, "wg": rest}
    if policy == "HYBRID_MODEL_DATA":
        rest = tuple(not f for f in first)
        return {"fwd": rest, "ig": rest, "wg": first}
    if policy.startswith("HYBRID_TRANSFORMER"):
        outer = tuple(not f for f in inner)
        return {"fwd": inner, "ig": inner, "wg": outer}
    if policy == "ALL":
        return {"fwd": every, "ig": every, "wg": every}
    raise InputError(f"no dimension mapping for layer parallelism {policy!r}")


def logical_dims(wl: TextWorkload, opts: TextOptions) -> tuple[tuple[int, ...], int]:
    """The network dimensions to use and the last model-parallel one (HYBRID_TRANSFORMER)."""
    dims = tuple(opts.dims) if opts.dims else (opts.npus,)
    if prod(dims) != opts.npus:
        raise InputError(f"--dims {','.join(map(str, dims))} hold {prod(dims)} NPUs, not {opts.npus}")
    mp = wl.model_parallel_group
    if mp is None:
        return dims, -1
    if opts.npus % mp:
        raise InputError(f"{wl.source}: model_parallel_NPU_group {mp} does not divide {opts.npus} NPUs")
    try:
        return split_dims(dims, mp)
    except ValueError as e:
        raise InputError(f"{wl.source}: {e}") from None


def layer_spans(wl: TextWorkload, ndims: int, boundary: int) -> list[Spans]:
    """Each layer's spans: the policy's, a HYBRID_CUSTOMIZED layer's own, and all dimensions for
    a DLRM's embedding (layer 0), as ASTRA-sim 1.0 does."""
    out = []
    for i, ly in enumerate(wl.layers):
        if ly.policy:
            out.append(policy_spans(ly.policy, ndims, boundary))
        elif wl.policy.startswith("HYBRID_DLRM") and i == 0:
            out.append(policy_spans("ALL", ndims, boundary))
        else:
            out.append(policy_spans(wl.policy, ndims, boundary))
    return out


class _Rank:
    """Builds one rank's passes; knows the rank's group for every span."""

    def __init__(self, rank: int, wl: TextWorkload, dims: tuple[int, ...], boundary: int,
                 table: GroupTable, opts: TextOptions):
        self.b = GraphBuilder(rank)
        self.rank, self.wl, self.dims, self.table, self.opts = rank, wl, dims, table, opts
        self.spans = layer_spans(wl, len(dims), boundary)
        self.wg_done: dict[int, list[int | None]] = {}

    def ns(self, cycles: int, i: int, what: str) -> int:
        """`cycles` of layer i at the NPU clock, in ns; an InputError naming the layer's line
        where that is past the trace's int64 (a slow clock stretches any column past it)."""
        ns = cycles / self.opts.frequency_ghz
        if not ns < MAX_NS:  # a float: 2**63 - 1 rounds up to 2**63, the first that does not fit
            ly = self.wl.layers[i]
            raise InputError(f"{self.wl.source}: line {ly.line}: {ly.name!r}: {what} of {cycles} cycles "
                             f"at {self.opts.frequency_ghz} GHz is {ns:.3g} ns, more than a trace "
                             "holds (2**63 - 1)")
        return round(ns)

    def compute(self, i: int, phase: str, deps) -> int:
        ly = self.wl.layers[i]
        cycles = getattr(ly, phase).compute
        return self.b.comp(f"{ly.name}:{phase}", deps, self.ns(cycles, i, f"{phase} compute"))

    def comm(self, i: int, phase: str, deps) -> int | None:
        """The phase's collectives (none if NONE, size 0, or a one-NPU group); returns the last."""
        ly = self.wl.layers[i]
        ph: Phase = getattr(ly, phase)
        span = self.spans[i][phase]
        if not ph.communicates or not any(span):
            return None
        kinds = COMM_TOKENS[ph.comm]
        spans = [span] if len(kinds) == 1 else _split_span(span)
        last = None
        for kind, sp in zip(kinds, spans):
            members = group_over(self.rank, self.dims, sp)
            if len(members) < 2:
                continue
            last = self.b.coll(f"{ly.name}:{phase}:{ph.comm}", [*deps, last], kind, ph.size,
                               self.table.id_of(members))
        return last

    def weight_done(self, i: int, wg_comm: int | None, last_pass: bool) -> None:
        """What layer i's next forward waits for: its wg comm, plus the update delay."""
        ly = self.wl.layers[i]
        if wg_comm is not None and ly.update and not last_pass:
            wg_comm = self.b.comp(f"{ly.name}:update", [wg_comm], self.ns(ly.update, i, "update delay"))
        self.wg_done[i] = [wg_comm]


def _split_span(span: Span) -> list[Span]:
    """ALLREDUCEALLTOALL: all-reduce over the first spanned dimension, all-to-all over the rest."""
    first = span.index(True)
    return [tuple(j == first for j in range(len(span))),
            tuple(s and j != first for j, s in enumerate(span))]


def _data_pass(r: _Rank, prev: list, last_pass: bool) -> list:
    n = len(r.wl.layers)
    for i in range(n):
        prev = [r.compute(i, "fwd", [*prev, *r.wg_done.get(i, [])])]
    for i in reversed(range(n)):
        wg = r.compute(i, "wg", prev)
        r.weight_done(i, r.comm(i, "wg", [wg]), last_pass)
        prev = [r.compute(i, "ig", [wg])] if i > 0 else [wg]
    return prev


def _hybrid_pass(r: _Rank, prev: list, last_pass: bool) -> list:
    n = len(r.wl.layers)
    blocking_ig = r.wl.policy.startswith("HYBRID_TRANSFORMER")
    for i in range(n):
        f = r.compute(i, "fwd", [*prev, *r.wg_done.get(i, [])])
        prev = [r.comm(i, "fwd", [f]) or f]
    for i in reversed(range(n)):
        ig = r.compute(i, "ig", prev)
        igc = r.comm(i, "ig", [ig]) if (i > 0 or blocking_ig) else None
        wg = r.compute(i, "wg", [igc or ig] if blocking_ig else [ig])
        r.weight_done(i, r.comm(i, "wg", [wg]), last_pass)
        prev = [wg, igc]
    return prev


def _dlrm_pass(r: _Rank, prev: list, last_pass: bool) -> list:
    n, last_bottom = len(r.wl.layers), r.wl.last_bottom_layer
    a2a = None
    for i in range(n):
        f = r.compute(i, "fwd", [*prev, *r.wg_done.get(i, [])])
        fc = r.comm(i, "fwd", [f]) if r.wl.layers[i].fwd.comm == "ALLTOALL" else None
        a2a = fc if i == 0 else a2a
        prev = [f, a2a] if i == last_bottom else [f]
    ig0 = None
    for i in reversed(range(n)):
        wg = r.compute(i, "wg", prev)
        r.weight_done(i, r.comm(i, "wg", [wg]), last_pass)
        if i == 0:
            return [wg, ig0] if r.wl.policy == "HYBRID_DLRM" else [wg]
        ig = r.compute(i, "ig", [wg])
        if i == last_bottom + 1:
            ig0 = r.comm(0, "ig", [ig])
        prev = [ig]
    return prev


def _inference_pass(r: _Rank, prev: list, last_pass: bool) -> list:
    """DISTRIBUTED_INFERENCE: forward only, each layer's collective blocking."""
    for i in range(len(r.wl.layers)):
        f = r.compute(i, "fwd", prev)
        prev = [r.comm(i, "fwd", [f]) or f]
    return prev


def _micro_pass(r: _Rank, prev: list, last_pass: bool) -> list:
    """ASTRA-sim's MICRO policy issues layer 0's weight-gradient collective, nothing else."""
    return [r.comm(0, "wg", [])]


LOOPS: dict[str, Callable] = {
    "MICRO": _micro_pass, "DATA": _data_pass, "HYBRID_DLRM": _dlrm_pass,
    "HYBRID_DLRM_ENHANCED": _dlrm_pass, "DISTRIBUTED_INFERENCE": _inference_pass,
}


def text_to_rankset(wl: TextWorkload, opts: TextOptions) -> tuple[RankSet, list[Diagnostic]]:
    """Convert a parsed workload; returns the rank set and notes about what was assumed.

    >>> from chakra_tools.frontends.textwl import parse_text_workload
    >>> wl = parse_text_workload("DATA\\n2\\na -1 1000 NONE 0 2000 NONE 0 3000 ALLREDUCE 64 0\\n"
    ...                          "b -1 1000 NONE 0 2000 NONE 0 3000 ALLREDUCE 64 0\\n")
    >>> rs, notes = text_to_rankset(wl, TextOptions(npus=4))
    >>> for n in rs[0]: print(n)
    %0 COMP 'a:fwd' 1us
    %1 COMP 'b:fwd' 1us deps=[%0]
    %2 COMP 'b:wg' 3us deps=[%1]
    %3 COMM_COLL 'b:wg:ALLREDUCE' ALL_REDUCE 64B pg=1 deps=[%2]
    %4 COMP 'b:ig' 2us deps=[%2]
    %5 COMP 'a:wg' 3us deps=[%4]
    %6 COMM_COLL 'a:wg:ALLREDUCE' ALL_REDUCE 64B pg=1 deps=[%5,%3]
    """
    if opts.npus < 1:
        raise InputError(f"--npus must be at least 1, got {opts.npus}")
    if not 0 < opts.frequency_ghz < float("inf"):  # NaN fails too
        raise InputError(f"--frequency must be a positive number of GHz, got {opts.frequency_ghz}")
    dims, boundary = logical_dims(wl, opts)
    table = GroupTable()
    table.id_of(tuple(range(opts.npus)))  # the world group is always "1"
    loop = LOOPS.get(wl.policy, _hybrid_pass)
    graphs = {}
    for rank in range(opts.npus):
        r = _Rank(rank, wl, dims, boundary, table, opts)
        prev: list = []
        for p in range(opts.passes):
            prev = loop(r, prev, p == opts.passes - 1)
        graphs[rank] = r.b.graph(source=wl.source, policy=wl.policy,
                                 frequency_ghz=float(opts.frequency_ghz))
    return RankSet(graphs, dict(table.groups), prefix="workload"), _notes(wl, opts, dims, boundary)


def _notes(wl: TextWorkload, opts: TextOptions, dims, boundary) -> list[Diagnostic]:
    notes = []

    def note(code: str, msg: str) -> None:
        notes.append(Diagnostic("warning", code, msg, file=wl.source))

    if wl.policy == "HYBRID_TRANSFORMER_FWD_IN_BCKWD":
        note("no-recompute", "checkpoint recomputation (fwd in bckwd) is not unrolled: "
             "converted as HYBRID_TRANSFORMER")
    if wl.policy == "MICRO" and len(wl.layers) > 1:
        note("micro-first-layer", f"MICRO uses layer 0 only; {len(wl.layers) - 1} more ignored")
    spans = layer_spans(wl, len(dims), boundary)
    wider = layer_spans(wl, len(dims) + 1, boundary)  # with one more dimension, would it span any?
    dropped: dict[tuple[str, str], list[str]] = {}
    for ly, sp, wide in zip(wl.layers, spans, wider):
        for phase in ("fwd", "ig", "wg"):
            span = sp[phase]
            if not getattr(ly, phase).communicates:
                continue
            if not any(span) and not any(wide[phase]):
                why = f"{wl.policy} does not communicate in this phase"
            elif not any(span):
                why = (f"{wl.policy} puts them on network dimensions that dims {list(dims)} do not "
                       "have (pass --dims to split NPUs)")
            elif prod(d for d, s in zip(dims, span) if s) < 2:
                why = f"their group holds one NPU with dims {list(dims)} (pass --dims to split NPUs)"
            else:
                continue
            dropped.setdefault((phase, why), []).append(ly.name)
    for (phase, why), names in dropped.items():
        note("comm-dropped", f"{len(names)} {phase} collectives ({', '.join(names[:3])}"
             f"{', ...' if len(names) > 3 else ''}) are no communication: {why}")
    return notes
