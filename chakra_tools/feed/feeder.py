"""`ETFeeder`: one rank's `.et` file handed out as dependency-resolved nodes, in bounded memory.

The contract (the one ASTRA-sim's feeder implements, REFERENCE §4): a node becomes *issuable* when
every dependency it has (data and control, or only the kinds named in `resolve`) has finished; the
issuable nodes are handed out in ascending id; `finish(id)` frees the node's children.

Memory stays flat on files of millions of nodes because the feeder holds a *window* of the file,
not the file: it decodes nodes ahead of the consumer only until `window` nodes are loaded and not
yet finished, and forgets a node once it has finished (a bitmap remembers which ids finished, one
bit per id). It reads further than the window only when it must: when nothing is issuable and
nothing is in flight (a forward reference, a long chain of blocked nodes), or when a consumer asks
with `expand()` (the replayer does so before it declares a cross-rank deadlock). So "issuable" means
issuable among the nodes read so far; with the default window (64k nodes) that is the whole
frontier of any real trace.

The per-node work runs in C where the core's extension is built (`core/hotloops.py`): the window
is a `Window`, C records rather than Python objects (per node its id, file offset, counts, children
and, packed, its dependencies and `NodeInfo` fields, its name shared with every feeder that has
it: about 60 bytes a node of a generated GPT where a record, its `NodeInfo` and their numbers took
650; a `NodeInfo` is made each time it is asked for); `load_frames` walks the read
buffer's frames and, as `load_node` does for one message, decodes each Node straight off the wire
and links it into the window; `finish_node` finishes one and frees its children. `_load_reference`
(with `_link_reference`) and `_finish_record` (window.py) are the reference, on a dict of
`LoadedNode` records: it decodes every node C leaves to it (anything unusual, ids past the bitmap, repeated ids; the
`Window` links those in as `_link_reference` would), and does all of them under
`hotloops.python_twins()` or without the extension: the same nodes, order, `NodeInfo`s and
diagnostics (tests/feed/test_decode_node.py).

Dependencies are resolved, never rewritten: `lookup(id)` returns the node exactly as recorded. A
dependency on a node that comes later in the file (forward reference) waits for it; one on a node
that never appears is dropped at end of file and reported in `diagnostics` ("dangling-dep"). When
nodes remain but none is issuable and none is in flight, `check_deadlock()` raises `DeadlockError`
naming the blocked nodes and what each waits for.

>>> import tempfile, os
>>> from chakra_tools.core.etwrite import write_trace
>>> from chakra_tools.core.model import Node, NodeType as T
>>> path = os.path.join(tempfile.mkdtemp(), "t.0.et")
>>> _ = write_trace(path, [Node(1, "a", T.COMP_NODE), Node(2, "b", T.COMP_NODE, (1,)),
...                        Node(3, "c", T.COMP_NODE)])
>>> f = ETFeeder(path)
>>> f.issuable()
[1, 3]
>>> f.take(1); f.finish(1)   # returns the children it freed
[2]
>>> f.issuable()
[2, 3]
"""

from __future__ import annotations

import gzip
import heapq
import os
from pathlib import Path
from typing import Iterable, Iterator

from chakra_tools.core.errors import Diagnostic, Diagnostics, TraceReadError
from chakra_tools.core.etio import LEGACY_SNIFF, metadata_from_pb, node_from_pb
from chakra_tools.core.framing import CHUNK, FrameReader, looks_like_metadata, open_binary
from chakra_tools.core.legacy import refuse_legacy
from chakra_tools.core.model import Metadata, Node
from chakra_tools.core.schema import et_def_pb2 as pb
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from chakra_tools.core import hotloops

from .deadlock import DeadlockCheck
from .info import NodeInfo, node_entry, node_info
from .window import BITMAP_LIMIT, COMM_COLL, MAX_TYPE, FinishedIds, LoadedNode, ReferenceWindow


DEFAULT_WINDOW = 1 << 16


def _read_size(stream) -> int:
    """Bytes per read of a plain file: the whole file where it is small, at most CHUNK (a read
    of CHUNK bytes costs its 4 MiB allocation even where the file is shorter: 25 us a file)."""
    if isinstance(stream, gzip.GzipFile):
        return CHUNK
    try:
        return max(1, min(CHUNK, os.fstat(stream.fileno()).st_size + 1))
    except (AttributeError, OSError, ValueError):
        return CHUNK


def _lazy_info(msg: bytes) -> NodeInfo:
    """The `NodeInfo` of a lazy window's node, made from its message when first asked for."""
    return node_info(pb.Node.FromString(msg))


class ETFeeder(ReferenceWindow, DeadlockCheck):
    """Dependency-resolved nodes of one rank's trace; see the module docstring for the contract."""

    def __init__(self, path: str | Path, *, resolve: Iterable[str] = ("data", "ctrl"),
                 window: int = DEFAULT_WINDOW, rank: int | None = None,
                 diagnostics: Diagnostics | None = None, eager_info: bool = False):
        resolve = tuple(resolve)
        if not set(resolve) <= {"data", "ctrl"} or not resolve:
            raise ValueError(f"resolve must name 'data' and/or 'ctrl', not {resolve!r}")
        self.path = str(path)
        self.rank = rank
        self.window = max(1, window)
        # keep NodeInfo from loading (a replayer reads every node), and of the message only its
        # offset: `lookup` reads it again from the file (FeederV3 keeps offsets likewise)
        self._eager_info = eager_info
        self._decode_node = hotloops.decode_node  # C or its twin, as picked now (python_twins())
        self._load_node = hotloops.load_node
        self._load_frames = hotloops.load_frames
        self._finish_node = hotloops.finish_node
        self._diagnostics = diagnostics  # None: made when first needed (350 bytes a held feeder)
        self._use_data = "data" in resolve
        self._use_ctrl = "ctrl" in resolve
        self._finished = FinishedIds()
        self._unseen: dict[int, list[int]] = {}  # absent id -> loaded nodes waiting for it
        self._ready: list[int] = []  # heap of issuable ids
        window = hotloops.Window  # C records, or None: the reference's dict (python_twins())
        #: id -> record, in file order; what `load_node`, `load_frames` and `finish_node` change
        self._loaded: dict[int, LoadedNode] | hotloops.Window = {} if window is None else window(
            eager_info, self._use_data, self._use_ctrl, NodeInfo, MAX_TYPE, COMM_COLL, BITMAP_LIMIT,
            self._finished._bits, self._finished, self._unseen, self._ready, heapq.heappush, _lazy_info)
        self._in_flight = 0
        self._unfinished = 0  # loaded and not finished
        self.nodes_read = 0
        self.nodes_finished = 0
        self._window = self._loaded  # what the compiled loops take (the twins take nothing)
        self._stream = open_binary(path)
        self._frames: FrameReader | None = FrameReader(self._stream, self.path, _read_size(self._stream))
        self._metadata: Metadata | bytes = self._read_metadata()
        self._fill()

    @property
    def diagnostics(self) -> Diagnostics:
        """What the feeder found (repeated ids, dangling dependencies, no metadata): the
        `Diagnostics` given, or its own."""
        if self._diagnostics is None:
            self._diagnostics = Diagnostics()
        return self._diagnostics

    @diagnostics.setter
    def diagnostics(self, value: Diagnostics) -> None:
        self._diagnostics = value

    @property
    def metadata(self) -> Metadata:
        """The file's GlobalMetadata (checked at open; its message, kept, made a `Metadata` when
        first asked for: a decoded protobuf message held 2.4 KiB of every feeder)."""
        if not isinstance(self._metadata, Metadata):
            self._metadata = metadata_from_pb(pb.GlobalMetadata.FromString(self._metadata))
        return self._metadata

    # -- reading --------------------------------------------------------------------------------
    def _read_metadata(self) -> Metadata | bytes:
        first = self._frames.next_frame()
        if first is None:
            self._close()
            return Metadata("", {}, present=False)
        if looks_like_metadata(first[1]):
            self._refuse_legacy(*first, metadata=True)
            try:
                pb.GlobalMetadata.FromString(first[1])
                return first[1]
            except DecodeError:
                pass
        self._warn("no-metadata", "no GlobalMetadata message: read the first message as a node")
        self._load(*first)
        return Metadata("", {}, present=False)

    @property
    def eof(self) -> bool:
        return self._frames is None

    def _close(self) -> None:
        if self._frames is not None:
            self._frames = None
            self._stream.close()
            self._stream = None  # the closed file and its reader: 0.4 KiB a held feeder
            self._drop_unseen()
            if type(self._loaded) is not dict:
                self._loaded.trim()  # the window's spare room, held as long as the feeder

    def _read_one(self) -> bool:
        """Decode the next node into the window; False at end of file."""
        if self._frames is None:
            return False
        nxt = self._frames.next_frame()
        if nxt is None:
            self._close()
            return False
        self._load(*nxt)
        return True

    def _refuse_legacy(self, offset: int, msg: bytes, metadata: bool = False) -> None:
        """A legacy (2023, proto2-era) file would feed nodes without their attributes: refused,
        naming the format (core/legacy.py)."""
        try:
            refuse_legacy(self.path, offset, msg, metadata=metadata)
        except TraceReadError:
            self._close()
            raise

    def _decode(self, offset: int, msg: bytes) -> tuple[int, tuple[int, ...], NodeInfo]:
        """The reference decode (protobuf, `node_entry`): every node `decode_node` leaves to it,
        and the one that words the error of a node that does not decode."""
        try:
            m = pb.Node.FromString(msg)
        except DecodeError as e:
            if self.nodes_read < LEGACY_SNIFF:
                self._refuse_legacy(offset, msg)
            raise TraceReadError(self.path, offset, f"message does not decode as a Node: {e}") from None
        if self.nodes_read < LEGACY_SNIFF and len(UnknownFieldSet(m)):
            self._refuse_legacy(offset, msg)  # a legacy node always leaves fields today's schema lacks
        if not 0 <= m.type <= MAX_TYPE:  # as Graph.read refuses it: no simulator can run it
            raise TraceReadError(self.path, offset, f"node {m.id} has unknown node type {m.type}")
        return node_entry(m, self._use_data, self._use_ctrl)

    def _load(self, offset: int, msg: bytes) -> None:
        if self._load_node(self._window, msg, offset) is None:  # compiled: decoded and linked, as below
            self._load_reference(offset, msg)
        else:
            self.nodes_read += 1
            self._unfinished += 1

    def _fill(self) -> None:
        """Read ahead until the window is full; further only while nothing can move."""
        load_frames, window = self._load_frames, self._window
        while (r := self._frames) is not None and self._unfinished < self.window:
            # the frames of the read buffer, loaded in C as `_load` loads each; it stops at one it
            # cannot take whole from the buffer or must leave to the reference: `_read_one`'s
            pos, n = load_frames(window, r.buf, r.pos, r.base, self.window - self._unfinished)
            if n:
                r.pos = pos
                self.nodes_read += n
                self._unfinished += n
            elif not self._read_one():
                break
        while not self._ready and not self._in_flight and self._read_one():
            pass

    def expand(self, limit: int | None = None) -> bool:
        """Read past the window until a new node is issuable (or `limit` nodes, or end of file).

        Returns True if something became issuable. A multi-rank driver calls this before it
        declares a deadlock, since the node that would unblock another rank may lie beyond the
        window.
        """
        before = len(self._ready)
        n = 0
        while len(self._ready) == before and (limit is None or n < limit) and self._read_one():
            n += 1
        return len(self._ready) > before

    # -- the contract ---------------------------------------------------------------------------
    def issuable(self) -> list[int]:
        """The ids that are issuable now, ascending (a snapshot; nothing is taken)."""
        return sorted(self._ready)

    def has_issuable(self) -> bool:
        return bool(self._ready)

    def next_issuable(self) -> int | None:
        """Take the smallest issuable id (it is now in flight), or None."""
        if not self._ready:
            return None
        nid = heapq.heappop(self._ready)
        loaded = self._loaded
        if type(loaded) is dict:
            loaded[nid].state = 2
        else:
            loaded.taken(nid)  # as the line above, without making a record view
        self._in_flight += 1
        return nid

    def take(self, nid: int) -> None:
        """Take a specific issuable node (now in flight)."""
        rec = self._loaded.get(nid)
        if rec is None or rec.state != 1:
            raise ValueError(f"{self._where()}node {nid} is not issuable")
        self._ready.remove(nid)
        heapq.heapify(self._ready)
        rec.state = 2
        self._in_flight += 1

    def push_back(self, nid: int) -> None:
        """Return a taken node to the issuable set (its resource was busy)."""
        rec = self._loaded.get(nid)
        if rec is None or rec.state != 2:
            raise ValueError(f"{self._where()}node {nid} is not in flight")
        rec.state = 1
        self._in_flight -= 1
        heapq.heappush(self._ready, nid)

    def finish(self, nid: int) -> list[int]:
        """Mark a taken node finished; returns the children that became issuable."""
        freed = self._finish_node(self._window, nid)  # compiled, as `_finish_record` below
        if freed is None:
            freed = self._finish_record(nid)
        self._in_flight -= 1
        self._unfinished -= 1
        self.nodes_finished += 1
        if self._unfinished < self.window and self._frames is not None or not self._ready:
            self._fill()  # (at end of file with a node issuable it would do nothing)
        return freed

    def has_nodes_to_issue(self) -> bool:
        """True until every node of the file has finished (Chakra's `hasNodesToIssue`)."""
        return bool(self._unfinished) or not self.eof

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def done(self) -> bool:
        return not self.has_nodes_to_issue()

    # -- access ---------------------------------------------------------------------------------
    def info(self, nid: int) -> NodeInfo:
        """The typed contract fields of a loaded node (see `NodeInfo`)."""
        if type(self._loaded) is not dict:
            return self._loaded.info(nid)  # made from the record's packed fields
        rec = self._loaded[nid]
        if rec.info is None:
            rec.info = node_info(pb.Node.FromString(rec.raw))  # not eager: raw is the message
        return rec.info

    def lookup(self, nid: int) -> Node:
        """The node as recorded in the file (dependencies untouched); only loaded nodes."""
        rec = self._loaded.get(nid)
        if rec is None:
            raise KeyError(f"{self._where()}node {nid} is not loaded (finished, or not read yet)")
        raw = rec.raw if isinstance(rec.raw, bytes) else self._message_at(rec.raw)
        return node_from_pb(pb.Node.FromString(raw))

    def _message_at(self, offset: int) -> bytes:
        """The message at `offset` of the file, read again: an eager feeder keeps each node's
        `NodeInfo` and where its message lies, not the message (as FeederV3 keeps file offsets)."""
        with open_binary(self.path) as stream:
            stream.seek(offset)
            got = FrameReader(stream, self.path, 1 << 16).next_frame()
        if got is None:
            raise TraceReadError(self.path, offset, "the file changed since it was read: no message here")
        return got[1]

    def loaded_ids(self) -> list[int]:
        """The ids in the window now (read, not finished), in file order."""
        return list(self._loaded)

    def deps(self, nid: int) -> tuple[int, ...]:
        """The dependencies the feeder resolves for a node (per `resolve`), as recorded."""
        return self._loaded[nid].deps

    def memory_bytes(self) -> int:
        """A rough count of what the window holds (for benchmarks), bitmap included."""
        if type(self._loaded) is not dict:
            return self._loaded.nbytes() + self._finished.nbytes()
        raw = sum(len(r.raw) if isinstance(r.raw, bytes) else 32 for r in self._loaded.values())
        return raw + 400 * len(self._loaded) + self._finished.nbytes()

    # -- helpers --------------------------------------------------------------------------------
    def _where(self) -> str:
        return f"{self.path}: " + (f"rank {self.rank}: " if self.rank is not None else "")

    def _warn(self, code: str, message: str, nid: int | None = None) -> None:
        self.diagnostics.add(Diagnostic("warning", code, message, file=self.path, rank=self.rank,
                                        node_id=nid))

    def drain(self) -> Iterator[int]:
        """Issue and finish every node in contract order (for tests and benchmarks)."""
        while True:
            nid = self.next_issuable()
            if nid is None:
                if self.done:
                    return
                self.check_deadlock()
                continue
            yield nid
            self.finish(nid)

    # -- Chakra's names (its C++ ETFeeder), for users porting a backend ---------------------------
    def get_next_issuable_node(self) -> Node | None:
        """Chakra's `getNextIssuableNode`: take the next issuable node and return it."""
        nid = self.next_issuable()
        return None if nid is None else self.lookup(nid)

    def push_back_issuable_node(self, nid: int) -> None:
        self.push_back(nid)

    def free_children_nodes(self, nid: int) -> None:
        self.finish(nid)

    def lookup_node(self, nid: int) -> Node:
        return self.lookup(nid)
