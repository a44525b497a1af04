"""The reference of the feeder's window (feeder.py): the records of the nodes read and not yet
finished, linked to their parents and children, on a dict of `LoadedNode`s, and the ids that
finished (`FinishedIds`). The compiled `Window` (core/_hotloops.c) does the same work in C; this
is what reads every node it leaves to Python (anything unusual) and all of them under
`hotloops.python_twins()` or without the extension: the same nodes, order and diagnostics
(tests/feed/test_decode_node.py).

`ReferenceWindow` is a part of `ETFeeder` (its window, its ready heap, its decode), kept apart so
the feeder reads as its contract.
"""

from __future__ import annotations

import heapq

from chakra_tools.core.model import NodeType

from .info import NodeInfo

MAX_TYPE = int(max(NodeType))
COMM_COLL = int(NodeType.COMM_COLL_NODE)

#: ids below this are remembered in a bitmap (1 bit each); larger ids in a set.
BITMAP_LIMIT = 1 << 27


class FinishedIds:
    """Which ids have finished: a growable bitmap for dense ids, a set for the rest (made for the
    first such id: an empty set is 216 bytes a feeder)."""

    __slots__ = ("_bits", "_other")

    def __init__(self) -> None:
        self._bits = bytearray()
        self._other: set[int] | None = None

    def add(self, i: int) -> None:
        if i < BITMAP_LIMIT:
            byte = i >> 3
            if byte >= len(self._bits):
                self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
            self._bits[byte] |= 1 << (i & 7)
        elif self._other is None:
            self._other = {i}
        else:
            self._other.add(i)

    def __contains__(self, i: int) -> bool:
        if i < BITMAP_LIMIT:
            byte = i >> 3
            return byte < len(self._bits) and bool(self._bits[byte] >> (i & 7) & 1)
        return self._other is not None and i in self._other

    def nbytes(self) -> int:
        return len(self._bits) + 64 * len(self._other or ())


class LoadedNode:
    """One node in the reference's window: its raw message (or, with the info decoded as the node
    is read, the message's offset in the file), its `NodeInfo`, what it still waits for. (A
    compiled `Window` hands out views with these slots: `hotloops.Record`.)"""

    __slots__ = ("raw", "info", "deps", "waiting", "children", "state")

    def __init__(self, raw: bytes | int, deps: tuple[int, ...], info: NodeInfo | None):
        self.raw = raw
        self.info = info  # None: decoded on first use
        self.deps = deps
        self.waiting = 0
        self.children: list[int] | None = None  # made for the first child (most nodes have none)
        self.state = 0  # 0 blocked, 1 issuable, 2 in flight


class ReferenceWindow:
    """The reference of `load_node`, `Window.link` and `finish_node` (core/hotloops.py)."""

    def _load_reference(self, offset: int, msg: bytes) -> None:
        """The reference of `load_node`: the node into the window, linked to its parents (or to
        `_unseen`), and to the children that waited for it; issuable if nothing holds it."""
        # the compiled decode, or None where the reference must read it (it never reads a node
        # with a field today's Node lacks, so the legacy check sees all of those)
        got = self._decode_node(msg, self._use_data, self._use_ctrl, NodeInfo, MAX_TYPE, COMM_COLL)
        nid, deps, info = got if got is not None else self._decode(offset, msg)
        self.nodes_read += 1
        loaded, finished = self._loaded, self._finished
        bits = finished._bits
        if nid in loaded or (nid < BITMAP_LIMIT and (nid >> 3) < len(bits) and bits[nid >> 3] >> (nid & 7) & 1
                             or nid >= BITMAP_LIMIT and nid in finished):  # inlined `nid in finished`
            self._warn("duplicate-id", f"node {nid} appears again at byte {offset}: ignored", nid)
            return
        self._unfinished += 1
        if type(loaded) is dict:
            self._link_reference(nid, deps, LoadedNode(offset, deps, info) if self._eager_info else LoadedNode(msg, deps, None))
        else:  # a compiled window: it links the node in as _link_reference does
            loaded.link(nid, deps, info if self._eager_info else None, offset if self._eager_info else msg)

    def _link_reference(self, nid: int, deps: tuple[int, ...], rec: LoadedNode) -> None:
        """The reference of `Window.link`: a new node's record into the window, linked to its
        parents (or to `_unseen`) and to the children that waited for it; issuable if nothing
        holds it."""
        loaded, finished = self._loaded, self._finished
        bits = finished._bits
        loaded[nid] = rec
        if deps:
            nbits = len(bits) << 3
            waiting = 0
            for d in deps:  # this loop runs for every edge of the file: a loaded parent first (the
                parent = loaded.get(d)  # common case), then an inlined `d in finished`
                if parent is not None:
                    waiting += 1
                    if parent.children is None:
                        parent.children = [nid]
                    else:
                        parent.children.append(nid)
                elif not (d < nbits and bits[d >> 3] >> (d & 7) & 1 or d >= BITMAP_LIMIT and d in finished):
                    waiting += 1
                    self._unseen.setdefault(d, []).append(nid)
            rec.waiting = waiting
        if self._unseen:
            waiters = self._unseen.pop(nid, None)
            if waiters:
                if rec.children is None:
                    rec.children = waiters
                else:
                    rec.children.extend(waiters)
        if rec.waiting == 0:
            rec.state = 1
            heapq.heappush(self._ready, nid)

    def _drop_unseen(self) -> None:
        """At end of file: dependencies on nodes that never appeared are dropped (and reported)."""
        for d in sorted(self._unseen):
            for nid in self._unseen[d]:
                self._warn("dangling-dep", f"depends on node {d}, which is not in the file: ignored", nid)
                self._release(nid)
        self._unseen.clear()

    def _finish_record(self, nid: int) -> list[int]:
        """The reference of `finish_node`: the node out of the window, its bit set, the children
        it frees made issuable (returned)."""
        loaded = self._loaded
        rec = loaded.get(nid)
        if rec is None or rec.state != 2:
            raise ValueError(f"{self._where()}node {nid} is not in flight")
        del loaded[nid]
        self._finished.add(nid)
        freed = []
        if rec.children:
            for c in rec.children:
                child = loaded[c]
                child.waiting -= 1
                if child.waiting == 0 and child.state == 0:
                    child.state = 1
                    heapq.heappush(self._ready, c)
                    freed.append(c)
        return freed

    def _release(self, nid: int) -> bool:
        rec = self._loaded[nid]
        rec.waiting -= 1
        if rec.waiting == 0 and rec.state == 0:
            rec.state = 1
            heapq.heappush(self._ready, nid)
            return True
        return False
