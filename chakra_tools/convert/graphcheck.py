"""Turning node records into core Nodes: clean dependencies, no cycles, integer microseconds.

Durations are whole microseconds in the format. A measured duration rounds to the nearest
microsecond but never below 1: a 0.4 us kernel becomes 1 us rather than vanishing (ASTRA-sim
would replay 0 as 1 ns), and its exact length is kept in the `duration_ns` attribute.
"""

from __future__ import annotations

from chakra_tools.core.cycles import find_cycle as core_find_cycle
from chakra_tools.core.errors import Diagnostic, Diagnostics
from chakra_tools.core.model import Attr, Node, make_attrs

from . import hotloops


def micros(us: float) -> int:
    """Whole microseconds, at least 1 for any positive duration.

    >>> micros(0.0), micros(0.3), micros(2.5), micros(7.49)
    (0, 1, 3, 7)
    """
    if us <= 0:
        return 0
    return max(1, int(us + 0.5))


def clean_deps(recs: list) -> bool:
    """Each dependency once, none on itself or on an absent node, ascending. Returns whether
    some dependency points forward (to a later record): only then can there be a cycle."""
    n = len(recs)
    forward = False
    for r in recs:
        deps = r.deps
        if deps:
            rid = r.id
            if len(deps) == 1:
                d = deps[0]
                if not 0 < d <= n or d == rid:
                    r.deps = []
                    continue
            else:
                r.deps = deps = sorted({d for d in deps if 0 < d <= n and d != rid})
                if not deps:
                    continue
            forward = forward or deps[-1] > rid
    return forward


def break_cycles(recs: list, diags: Diagnostics, *, source: str | None = None,
                 rank: int | None = None, forward: bool = True) -> int:
    """Remove edges until the graph is acyclic; each removal is a warning naming both nodes.
    Returns the number of edges removed. `forward=False` (from `clean_deps`: every dependency
    points to an earlier record) means there is nothing to search."""
    removed = 0
    while forward:
        cycle = find_cycle(recs)
        if cycle is None:
            return removed
        dep, node = _edge_to_cut(cycle)
        recs[node - 1].deps.remove(dep)
        removed += 1
        names = _cycle_text(cycle, recs)
        diags.add(Diagnostic("warning", "cycle-broken",
                             f"the input implies a dependency cycle {names}; dropped the "
                             f"dependency of node {node} on node {dep}",
                             file=source, rank=rank, node_id=node, node_name=recs[node - 1].name))
    return removed


def _cycle_text(cycle: list[int], recs: list) -> str:
    shown = cycle if len(cycle) <= 8 else cycle[:4] + [None] + cycle[-3:]
    text = " -> ".join("..." if c is None else f"%{c} ({recs[c - 1].name!r})" for c in shown)
    return text + (f" ({len(cycle) - 1} nodes)" if len(cycle) > 8 else "")


def _edge_to_cut(cycle: list[int]) -> tuple[int, int]:
    """The edge of the cycle that points backwards in emission order (dep id > node id)."""
    edges = list(zip(cycle, cycle[1:]))
    back = [(d, n) for d, n in edges if d > n]
    return max(back or edges, key=lambda e: e[0] - e[1])


def find_cycle(recs: list) -> list[int] | None:
    """A cycle in dependency order (first == last), or None (records are numbered 1..n)."""
    return core_find_cycle([r.deps for r in recs], first=1)


#: kinds of the attributes compute nodes carry (contract kinds; `stream`, `duration_ns` int64)
_KINDS = {"is_cpu_op": "bool_val", "num_ops": "int64_val", "tensor_size": "uint64_val",
          "stream": "int64_val", "tid": "int64_val", "duration_ns": "int64_val", "blocked_ns": "int64_val",
          "thread_wait_ns": "int64_val", "collective_wait_ns": "int64_val", "wait_mark": "bool_val"}
_CPU = {True: Attr("bool_val", True), False: Attr("bool_val", False)}


def to_nodes(recs: list, *, with_durations: bool) -> list[Node]:
    """Frozen core Nodes from the records: the hot loop of a conversion, one pass per node
    (compute records in `_hotloops.c` where it is built, the others by `_to_node`)."""
    return hotloops.to_nodes(recs, with_durations, Node, Attr, _KINDS, _CPU, _to_node)


def _to_node(r, with_durations: bool) -> Node:
    """One record's Node. A compute node's few attributes are built directly, a communication
    node's through make_attrs; tuples are built without the named tuples' Python constructors."""
    attrs = r.attrs
    dur = r.dur_us
    if with_durations and dur > 0 and dur != int(dur):
        attrs["duration_ns"] = int(round(dur * 1000))
    if r.call is None and attrs.keys() <= _KINDS.keys():
        new = tuple.__new__
        built = {k: (_CPU[v] if k == "is_cpu_op" else new(Attr, (_KINDS[k], v, "")))
                 for k, v in attrs.items()}
    else:
        built = make_attrs(attrs)
    ts = r.ts
    return tuple.__new__(Node, (r.id, r.name, r.type, tuple(r.deps), (), int(ts) if ts > 0 else 0,
                                micros(dur), built, None, None))
