"""The conversion's compiled loops (`_hotloops.c`) or their Python twins, picked once, here.

The readers (hostet.py, kineto.py, readers.py), the builder (build.py) and the node maker
(graphcheck.py) call the functions below and read as one algorithm; whether C or Python answers
is decided at import (the Python twins where the extension is not built or CHAKRA_TOOLS_PURE_PYTHON
is set: `core.native`) or, for a block of code, by `python_twins()`, which the tests that compare
the two paths use. Python is the reference: each compiled function does the common case and
hands the rest back (an attribute list it does not scan, events whose times are not plain
floats, a tensor value nested too deeply...), and that hand-over happens here too, so a caller
never sees it. The stage's own objects (HostOp, Event, Rec, Node and their makers) are passed
in: the compiled loops fill them through their slots, the twins call them.

    >>> with python_twins():
    ...     twin = tensor_bytes([[1, 1, 0, 8, 4, "cpu"], [[2, 2, 0, 2, 2, "cuda:0"]]])
    >>> twin, tensor_bytes([[1, 1, 0, 8, 4, "cpu"], [[2, 2, 0, 2, 2, "cuda:0"]]]) == twin
    (36, True)
"""

from __future__ import annotations

import bisect
from contextlib import contextmanager
from itertools import accumulate
from typing import Any, Callable, Iterator

from chakra_tools.core import native

from . import tensors

#: the compiled module, or None (not built, or not wanted)
COMPILED = native.load("chakra_tools.convert._hotloops")
_c = COMPILED  # what the functions below call: None inside `python_twins()`


@contextmanager
def python_twins() -> Iterator[None]:
    """Run the Python twins inside the block, whatever was picked at import (to compare them)."""
    global _c
    saved, _c = _c, None
    try:
        yield
    finally:
        _c = saved


# -- reading host traces (hostet.py) -----------------------------------------------------------

def host_ops(nodes: list, needs_args: Callable[[str], int], typed_op: Callable, op_type: type,
             no_attrs: dict, io_decode: Callable) -> list:
    """One op per typed node, `typed_op(node, needs_args(node.name))` (asked once per name).

    Compiled, the ops whose attributes are not kept are made here (an `op_type` whose
    attributes are `no_attrs`, inputs and outputs decoded by `io_decode` where asked for);
    the rest still by `typed_op`."""
    if _c is not None:
        return _c.host_ops(nodes, needs_args, typed_op, op_type, no_attrs, io_decode)
    wanted: dict[str, int] = {}
    ops = []
    append = ops.append
    for n in nodes:
        name = n.name
        want = wanted.get(name)
        if want is None:
            want = wanted[name] = needs_args(name)
        append(typed_op(n, want))
    return ops


# -- reading device traces (kineto.py) ---------------------------------------------------------

def device_events(events: list, lanes: dict, event_type: type, key_args: tuple,
                  whole_args: Callable[[str], bool]) -> list[int]:
    """Each complete event of a known category (`lanes`: cat -> (its lane, which `key_args`
    it keeps, whether it keeps its whole args)) as an `event_type` in its lane. Returns the
    positions of the events whose whole args are to be decoded (`whole_args(name)`, or all of
    their lane's): their `args` holds that position until then. The compiled loop has the
    `key_args` of each lane and the `whole_args` rule built in."""
    if _c is not None:
        return _c.device_events(events, lanes, event_type)
    new = event_type.__new__
    positions: list[int] = []
    for pos, e in enumerate(events):
        if e.ph != "X":
            continue
        lane = lanes.get(e.cat)
        if lane is None:
            continue
        out, keys, whole = lane
        ev = new(event_type)
        ev.idx, ev.name, ev.cat, ev.tid = len(out), e.name, e.cat, e.tid
        ev.ts, ev.dur = e.ts, e.dur or 0.0
        ev.parent, ev.child_us = -1, 0.0
        if whole or whole_args(e.name):
            ev.args = pos
            positions.append(pos)
        else:
            ev.args = key_args[keys](e.args)
        out.append(ev)
    return positions


def nest(host: list, runtime: list, runtime_parent: dict, event_type: type, eps: float) -> None:
    """Each host event's parent (the innermost host event enclosing it on its thread, `eps`
    microseconds of tolerance) and its children's summed time, and each runtime call's host
    event (`runtime_parent`). An event that starts inside another and ends after it (the
    profiler's step closed from a hook inside the user's `optimizer` range) is not its child, but
    the part of it inside counts in the other's children's time: left in its exclusive time, a
    step node carried the optimizer's time a second time. The compiled loop declines, changing
    nothing, where an event's times are not plain floats."""
    if _c is not None and _c.nest(host, runtime, runtime_parent, event_type, eps):
        return
    by_tid: dict[Any, list[tuple[float, float, int, int]]] = {}
    for e in host:
        by_tid.setdefault(e.tid, []).append((e.ts, -e.dur, 0, e.idx))
    for e in runtime:
        by_tid.setdefault(e.tid, []).append((e.ts, -e.dur, 1, e.idx))
    for items in by_tid.values():
        items.sort()
        stack: list = []
        ends: list[float] = []  # stack[i]'s end plus the tolerance
        for ts, neg_dur, kind, idx in items:
            end = ts - neg_dur
            while ends and end > ends[-1]:
                left = stack.pop()
                ends.pop()
                if kind == 0 and ts < left.ts + left.dur:
                    left.child_us += left.ts + left.dur - ts
            if kind == 1:
                if stack:
                    runtime_parent[idx] = stack[-1].idx
                continue
            ev = host[idx]
            if stack:
                top = stack[-1]
                ev.parent = top.idx
                top.child_us += ev.dur
            stack.append(ev)
            ends.append(end + eps)


# -- finding the readers of a collective's output (readers.py) ---------------------------------

def inputs_search(raws: list, wanted: set[tuple[int, int]]) -> "_IndexSearch | _TextSearch":
    """A search of the ops' raw inputs (JSON text) for `[tid,sid,` of the `wanted` tensors:
    `.ops_mentioning(keys, start, end)`. Compiled: one pass over every op's inputs finds where
    each wanted tensor is mentioned. Python: the inputs joined into one text, searched with
    bytes.find for each call's tensors within its window."""
    index = _c.mentions(raws, wanted) if _c is not None else None
    return _IndexSearch(index) if index is not None else _TextSearch(raws)


class _IndexSearch:
    def __init__(self, index: dict):
        self.index = index  # (tid, sid) -> ascending indices of the ops mentioning it

    def ops_mentioning(self, keys: set[tuple[int, int]], start: int, end: int) -> list[int]:
        """Indices in [start, end) of the ops whose inputs hold `[tid,sid,` of a key, ascending."""
        found: set[int] = set()
        for key in keys if start < end else ():
            at = self.index.get(key, ())
            found.update(at[bisect.bisect_left(at, start):bisect.bisect_left(at, end)])
        return sorted(found)


class _TextSearch:
    def __init__(self, raws: list):
        self.data = b"\n".join(raws)
        self.starts = list(accumulate((len(r) + 1 for r in raws[:-1]), initial=0))

    def ops_mentioning(self, keys: set[tuple[int, int]], start: int, end: int) -> list[int]:
        """Indices in [start, end) of the ops whose inputs hold `[tid,sid,` of a key, ascending."""
        if start >= end:
            return []
        found: set[int] = set()
        data, starts = self.data, self.starts
        lo = starts[start]
        hi = starts[end] if end < len(starts) else len(data)
        for tid, sid in keys:
            for pattern in (b"[%d,%d," % (tid, sid), b"[%d, %d," % (tid, sid)):  # compact or not
                pos = data.find(pattern, lo, hi)
                while pos >= 0:
                    found.add(bisect.bisect_right(starts, pos) - 1)
                    pos = data.find(pattern, pos + len(pattern), hi)
        return sorted(found)


# -- sizes (tensors.py) ------------------------------------------------------------------------

def tensor_bytes(v: Any) -> int:
    """Total bytes of the tensors in a value (numel x itemsize each). It runs for every costed
    op; the compiled one declines a product that is not of two ints, an overflow, or nesting
    deeper than 64."""
    if _c is not None:
        total = _c.tensor_bytes(v)
        if total is not None:
            return total
    return _tensor_bytes(v)


def _tensor_bytes(v: Any) -> int:
    """A plain recursion (generators, as in `tensors.iter_tensors`, cost microseconds each)."""
    if type(v) is not list:
        return 0
    if tensors.is_tensor(v):
        return v[3] * v[4]
    total = 0
    for x in v:
        if type(x) is list:
            total += _tensor_bytes(x)
    return total


# -- building nodes (build.py, graphcheck.py) --------------------------------------------------

def emit_plain_ops(builder: Any, i: int) -> int:
    """Emit, from `builder.host.ops[i]` on, each host op that launched nothing and is no call's
    member (`builder.special`): its CPU node (a `builder.REC` of type `builder.COMP`, timed by
    `builder.op_event`, costed by `builder.costs`) appended to `builder.recs`, chained on its
    thread (`builder.chain`) and filed in `builder.op_node`. Returns the index of the first op
    left to the Builder's own loop: `i` itself for the twin, which leaves them all."""
    if _c is None:
        return i
    b = builder
    return _c.emit_host_ops(b.host.ops, i, b.special, b.kernels, b.op_event, b.costs, b.chain,
                            b.op_node, b.recs, b.REC, b.COMP)


def to_nodes(recs: list, with_durations: bool, node_type: type, attr_type: type, kinds: dict,
             cpu: dict, to_node: Callable) -> list:
    """`to_node(rec, with_durations)` for each record. Compiled, compute records are made here
    (a `node_type` with `attr_type` attributes of `kinds`, `cpu` the two is_cpu_op values)."""
    if _c is not None:
        return _c.to_nodes(recs, with_durations, node_type, attr_type, kinds, cpu, to_node)
    return [to_node(r, with_durations) for r in recs]
