"""The per-rank structure checks of validation (duplicate ids, dependencies on absent nodes,
self-dependencies, cycles) on compact arrays: what `validate.scan_rank` streams every node
through, in memory independent of the node count where ids are consecutive (what converters and
generators write).
"""

from __future__ import annotations

from array import array

from .cycles import find_cycle
from .model import Node



class IdIndex:
    """Node id -> position in the file. While ids arrive as first, first+1, ... (what converters
    and generators write) this is two integers instead of a dict of a million entries; the first
    id out of that run turns it into a dict."""

    __slots__ = ("first", "count", "table")

    def __init__(self):
        self.first: int | None = None
        self.count = 0
        self.table: dict[int, int] | None = None

    def get(self, nid: int, default=None):
        if self.table is not None:
            return self.table.get(nid, default)
        k = nid - self.first if self.first is not None else -1
        return k if 0 <= k < self.count else default

    def __contains__(self, nid: int) -> bool:
        return self.get(nid) is not None

    def __getitem__(self, nid: int) -> int:
        k = self.get(nid)
        if k is None:
            raise KeyError(nid)
        return k

    def add(self, nid: int) -> bool:
        """Give `nid` the next position; False (and no change) if it is already there."""
        if self.table is None:
            if self.first is None:
                self.first, self.count = nid, 1
                return True
            if nid == self.first + self.count:
                self.count += 1
                return True
            if 0 <= nid - self.first < self.count:
                return False
            self.table = {self.first + i: i for i in range(self.count)}
        if nid in self.table:
            return False
        self.table[nid] = len(self.table)
        return True


class DependencyTracker:
    """The dependency checks of one pass, in memory independent of the node count where ids are
    consecutive: a node that depends only on nodes seen before it cannot close a cycle, so only
    the dependencies that point forward (or nowhere) are remembered. Cycles are looked for, in a
    second pass (`Structure`), only when some dependency points forward."""

    def __init__(self):
        self.index = IdIndex()
        self.unresolved: list[tuple[int, int, str]] = []  # (node, dependency not seen yet, kind)
        self.self_deps: list[int] = []
        self.names: dict[int, str] = {}  # of the nodes named in those two lists

    def add(self, node: Node) -> bool:
        """Record one node; False if its id was seen before (the duplicate is not recorded)."""
        nid, index = node.id, self.index
        if index.table is None and index.first is not None:  # ids consecutive so far: inline
            first, count = index.first, index.count
            if 0 <= nid - first < count:
                return False
            data = node.data_deps
            if not node.ctrl_deps and nid == first + count and (not data or (first <= min(data) and max(data) < nid)):
                index.count = count + 1  # what index.add does for the next consecutive id
                return True
        elif nid in index:
            return False
        for kind, deps in (("data", node.data_deps), ("ctrl", node.ctrl_deps)):
            for d in deps:
                if d not in index:
                    if d == nid:
                        self.self_deps.append(nid)
                    else:
                        self.unresolved.append((nid, d, kind))
                    self.names[nid] = node.name
        index.add(nid)
        return True

    def dangling(self) -> list[tuple[int, int, str]]:
        """(node id, missing dep id, "data"|"ctrl") for every dependency on an absent node."""
        return [u for u in self.unresolved if u[1] not in self.index]

    def forward(self) -> list[tuple[int, int, str]]:
        """(node id, dep id, kind) for every dependency on a node later in the file."""
        return [u for u in self.unresolved if u[1] in self.index]

    def has_forward_refs(self) -> bool:
        return any(d in self.index for _, d, _ in self.unresolved)


class Structure:
    """Ids and dependencies in flat integer arrays (about 30 bytes a node) for the cycle search:
    built only when a rank has forward references."""

    def __init__(self):
        self.ids = array("Q")
        self.dep_ids = array("Q")
        self.dep_end = array("Q")
        self.index = IdIndex()
        #: names of the nodes that depend on a node not seen yet: a cycle needs a forward reference
        self.names: dict[int, str] = {}

    def add(self, node: Node) -> None:
        index = self.index
        nid = node.id
        deps = node.data_deps + node.ctrl_deps
        if deps and not all(d in index for d in deps):
            self.names[nid] = node.name
        if index.add(nid):
            self.ids.append(nid)
            self.dep_ids.extend(deps)
            self.dep_end.append(len(self.dep_ids))

    def find_cycle(self) -> list[int] | None:
        """One cycle of two or more nodes, as ids in dependency order (first == last), or None
        (self-dependencies are reported apart)."""
        index, dep_ids, ends = self.index, self.dep_ids, self.dep_end
        deps = [[j for j in map(index.get, dep_ids[ends[i - 1] if i else 0:ends[i]]) if j is not None]
                for i in range(len(self.ids))]
        cycle = find_cycle(deps, self_loops=False)
        return None if cycle is None else [self.ids[k] for k in cycle]
