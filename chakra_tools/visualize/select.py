"""Filters that cut a rank set down to what a person wants to look at.

A `Selection` is a set of optional criteria, all of which a node must meet: ranks, an id range,
training steps, node kinds, a name pattern, and the neighbourhood (within `radius` dependency
hops, either direction) of one node. `select(rankset, selection)` returns, per rank, a `Graph`
holding only the kept nodes; edges among them are kept, edges to dropped nodes vanish.

Steps: a node's step is its `step` attribute when it has one; otherwise the step of the
`ProfilerStep#<n>` node that encloses it in time (converted traces) or that it descends from
through control dependencies (host ETs record the caller as the control dependency).

>>> from chakra_tools.core.model import Node, NodeType as T
>>> from chakra_tools.core.graph import Graph, RankSet
>>> g = Graph([Node(i, f"op{i}", T.COMP_NODE, (i - 1,) if i else ()) for i in range(6)], rank=0)
>>> kept = select(RankSet({0: g}), Selection(around=(None, 3), radius=1))
>>> sorted(kept[0].nodes)
[2, 3, 4]
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Iterable

from chakra_tools.core.errors import InputError
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import Node, NodeType

STEP_NAME = re.compile(r"ProfilerStep#(\d+)")

#: names a user may give for node kinds, beside the full enum names
KIND_ALIASES = {
    "comp": NodeType.COMP_NODE, "compute": NodeType.COMP_NODE,
    "coll": NodeType.COMM_COLL_NODE, "comm_coll": NodeType.COMM_COLL_NODE, "collective": NodeType.COMM_COLL_NODE,
    "send": NodeType.COMM_SEND_NODE, "comm_send": NodeType.COMM_SEND_NODE,
    "recv": NodeType.COMM_RECV_NODE, "comm_recv": NodeType.COMM_RECV_NODE,
    "mem_load": NodeType.MEM_LOAD_NODE, "load": NodeType.MEM_LOAD_NODE,
    "mem_store": NodeType.MEM_STORE_NODE, "store": NodeType.MEM_STORE_NODE,
    "metadata": NodeType.METADATA_NODE, "invalid": NodeType.INVALID_NODE,
}


@dataclass(frozen=True)
class Selection:
    """What to keep; None means "no constraint". `around` is (rank or None, node id)."""

    ranks: tuple[int, ...] | None = None
    id_range: tuple[int, int] | None = None  # inclusive
    steps: tuple[int, ...] | None = None
    kinds: tuple[NodeType, ...] | None = None
    name: str | None = None  # regular expression, searched
    around: tuple[int | None, int] | None = None
    radius: int = 1

    @property
    def empty(self) -> bool:
        return all(v is None for v in (self.ranks, self.id_range, self.steps, self.kinds, self.name, self.around))

    def describe(self) -> str:
        parts = []
        for label, v in (("ranks", self.ranks), ("ids", self.id_range), ("steps", self.steps),
                         ("kinds", self.kinds and [k.name for k in self.kinds]), ("name", self.name)):
            if v is not None:
                parts.append(f"{label}={v}")
        if self.around is not None:
            parts.append(f"around={self.around[1]} radius={self.radius}")
        return ", ".join(parts) or "everything"


def select(rs: RankSet, sel: Selection) -> dict[int, Graph]:
    """rank -> the sub-graph of kept nodes (file order kept)."""
    pattern = _compile(sel.name)
    out: dict[int, Graph] = {}
    for r in _ranks(rs, sel):
        g = rs[r]
        keep = [n for n in g if _matches(n, sel, pattern)]
        if sel.steps is not None:
            steps = node_steps(g)
            keep = [n for n in keep if steps.get(n.id) in sel.steps]
        if sel.around is not None:
            near = neighbourhood(g, sel.around[1], sel.radius)
            keep = [n for n in keep if n.id in near]
        out[r] = Graph(keep, rank=g.rank, metadata=g.metadata, source=g.source)
    return out


def _compile(name: str | None):
    if name is None:
        return None
    try:
        return re.compile(name)
    except re.error as e:
        raise InputError(f"--name {name!r}: not a regular expression: {e}") from None


def _ranks(rs: RankSet, sel: Selection) -> list[int]:
    wanted = list(rs.ranks)
    if sel.ranks is not None:
        missing = sorted(set(sel.ranks) - set(wanted))
        if missing:
            raise InputError(f"rank(s) {missing} not in the trace (it has ranks {_span(wanted)})")
        wanted = [r for r in wanted if r in sel.ranks]
    if sel.around is not None:
        rank = sel.around[0] if sel.around[0] is not None else (wanted[0] if len(wanted) == 1 else None)
        if rank is None:
            raise InputError("--around needs a rank when the trace has several: RANK:NODE, e.g. 0:42")
        if rank not in rs.graphs:
            raise InputError(f"--around: rank {rank} not in the trace (it has ranks {_span(wanted)})")
        if sel.around[1] not in rs[rank]:
            raise InputError(f"--around: rank {rank} has no node {sel.around[1]} ({rs[rank].source})")
        wanted = [rank]
    return wanted


def _span(ranks: list[int]) -> str:
    return f"{ranks[0]}..{ranks[-1]}" if ranks else "none"


def _matches(n: Node, sel: Selection, pattern) -> bool:
    if sel.id_range is not None and not sel.id_range[0] <= n.id <= sel.id_range[1]:
        return False
    if sel.kinds is not None and n.type not in sel.kinds:
        return False
    return pattern is None or pattern.search(n.name) is not None


def neighbourhood(g: Graph, center: int, radius: int) -> set[int]:
    """Node ids within `radius` dependency hops of `center`, following edges both ways."""
    seen = {center}
    frontier = deque([(center, 0)])
    while frontier:
        nid, d = frontier.popleft()
        if d == radius:
            continue
        for m in (*g.predecessors(nid), *g.successors(nid)):
            if m not in seen:
                seen.add(m)
                frontier.append((m, d + 1))
    return seen


def node_steps(g: Graph) -> dict[int, int]:
    """node id -> training step, from `step` attributes, ProfilerStep windows or ancestry."""
    steps = {n.id: int(n.attr("step")) for n in g if isinstance(n.attr("step"), int)}
    markers = [(int(m.group(1)), n) for n in g if (m := STEP_NAME.search(n.name))]
    for s, marker in markers:
        steps[marker.id] = s
    timed = [(s, m) for s, m in markers if m.duration_micros]
    for n in g:
        if n.id not in steps:
            step = _enclosing(n, timed) if timed else None
            if step is not None:
                steps[n.id] = step
    if markers:
        _inherit_through_ctrl(g, steps)
    return steps


def _enclosing(n: Node, timed: list[tuple[int, Node]]) -> int | None:
    if not n.start_time_micros:
        return None
    for s, m in timed:
        if m.start_time_micros <= n.start_time_micros < m.start_time_micros + m.duration_micros:
            return s
    return None


def _inherit_through_ctrl(g: Graph, steps: dict[int, int]) -> None:
    """A node without a step takes its control parent's (repeat until nothing changes)."""
    changed = True
    while changed:
        changed = False
        for n in g:
            if n.id in steps:
                continue
            for p in n.ctrl_deps:
                if p in steps:
                    steps[n.id] = steps[p]
                    changed = True
                    break


# --------------------------------------------------------------------------------------------
# parsing what the user typed
# --------------------------------------------------------------------------------------------

def parse_ints(text: str, what: str) -> tuple[int, ...]:
    """"0,2,4-6" -> (0, 2, 4, 5, 6)."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = part.split("-", 1)
                out.extend(range(int(lo), int(hi) + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise InputError(f"{what} {text!r}: expected numbers like 0,2,4-6") from None
    return tuple(out)


def parse_range(text: str) -> tuple[int, int]:
    """"100:200" -> (100, 200), inclusive; "100:" and ":200" leave one end open."""
    lo, sep, hi = text.partition(":")
    try:
        if not sep:
            return int(lo), int(lo)
        return int(lo) if lo else 0, int(hi) if hi else 2**64
    except ValueError:
        raise InputError(f"--ids {text!r}: expected FIRST:LAST, e.g. 100:200") from None


def parse_kinds(texts: Iterable[str]) -> tuple[NodeType, ...]:
    out = []
    for t in texts:
        for word in t.split(","):
            key = word.strip().lower()
            kind = KIND_ALIASES.get(key) or KIND_ALIASES.get(key.removesuffix("_node"))
            if kind is None:
                names = ", ".join(sorted(KIND_ALIASES))
                raise InputError(f"--kind {word!r}: unknown node kind (one of {names})")
            out.append(kind)
    return tuple(out)


def parse_around(text: str) -> tuple[int | None, int]:
    """"42" -> (None, 42); "3:42" -> (3, 42)."""
    rank, sep, node = text.rpartition(":")
    try:
        return (int(rank) if sep and rank else None), int(node)
    except ValueError:
        raise InputError(f"--around {text!r}: expected NODE or RANK:NODE, e.g. 0:42") from None
