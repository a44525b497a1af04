"""Streaming reader of Chakra `.et` files (the writer is etwrite.py).

The wire format (REFERENCE §1): a stream of protobuf messages, each preceded by its byte length as
a base-128 varint; first an optional `GlobalMetadata`, then `Node`s; gzip accepted (magic 1f 8b).
There is no footer, so a file cut exactly at a message boundary is a valid, shorter trace; any
other cut, and any message that does not decode, raises `TraceReadError` naming the file, the byte
offset (in the decompressed stream) and the last good node.

The reader holds one read buffer, never the whole file: `iter_nodes` yields `Node`s one at a time.
What it had to assume (no GlobalMetadata, an int32 where the contract says int64, a COMM_COLL node
without `comm_type`, unknown fields) goes to a `Diagnostics` collector as warnings.
"""

from __future__ import annotations

import re
from pathlib import Path
from collections.abc import Collection, Mapping
from typing import Callable, Iterator

from google.protobuf.message import DecodeError

from . import hotloops
from .encoder import _attr_to_pb
from .framing import decode_varint, iter_frames, looks_like_metadata, open_binary
from .legacy import refuse_legacy
from .errors import Diagnostic, Diagnostics, TraceReadError
from .model import CONTRACT, EMPTY_ATTRS, INTEGER_KINDS, Attr, IOInfo, Metadata, Node, NodeType
from .schema import et_def_pb2 as pb


def _field_number(kind: str) -> int:
    return pb.AttributeProto.DESCRIPTOR.fields_by_name[kind].number


def _wrong_kind_pattern() -> "re.Pattern[bytes]":
    """A regex that finds a contract attribute *not* followed by the tag of its contract kind.

    An attribute serialises as field 1 (its name), then the value's field; one C-level scan of the
    message thus proves every contract kind right without decoding attributes. A match sends the
    node to the full check, so a false alarm (a doc_string between name and value) costs only time.
    """
    alternatives = []
    for name, kind in CONTRACT.items():
        wire = 2 if kind.endswith("_list") or kind == "string_val" else 0
        tag = _varint_bytes(_field_number(kind) << 3 | wire)
        raw = name.encode()
        alternatives.append(re.escape(b"\x0a" + bytes([len(raw)]) + raw) + b"(?!" + re.escape(tag) + b")")
    return re.compile(b"|".join(alternatives))
LEGACY_SNIFF = 16  # nodes checked for the legacy (proto2-era) layout at the start of a file
WRITER_VERSION = "0.0.4"




# --------------------------------------------------------------------------------------------
# protobuf <-> model
# --------------------------------------------------------------------------------------------

# Attr(...) and Node(...) without NamedTuple's keyword-default wrapper: the reader's hot path
_new_attr = _new_node = tuple.__new__
_NODE_TYPES = tuple(NodeType)


def _attr_from_pb(a) -> Attr:
    kind = a.WhichOneof("value")
    if kind is None:
        return _new_attr(Attr, (None, None, a.doc_string))
    v = getattr(a, kind)
    if kind[-5:] == "_list":
        v = tuple(v.values)
    return _new_attr(Attr, (kind, v, a.doc_string))


def _io_from_pb(m, field: str) -> IOInfo | None:
    if not m.HasField(field):
        return None
    io_ = getattr(m, field)
    return IOInfo(io_.values, io_.shapes, io_.types)


class PbAttrs(Mapping):
    """A node's attributes, decoded from the protobuf message on first access.

    Decoding attributes costs several times more than decoding the rest of a node, and most
    consumers (feeders, counters) touch few of them; this keeps streaming reads fast. Read-only,
    compares equal to the plain dict it decodes to, and pickles as that dict.
    """

    __slots__ = ("_pb", "_dict")

    def __init__(self, pb_attrs):
        self._pb = pb_attrs
        self._dict: dict[str, Attr] | None = None

    def _decoded(self) -> dict[str, Attr]:
        d = self._dict
        if d is None:
            d = self._dict = {a.name: _attr_from_pb(a) for a in self._pb}
            self._pb = None
        return d

    def __getitem__(self, name: str) -> Attr:
        return self._decoded()[name]

    def kinds(self):
        """(name, kind) of each attribute, without decoding values where they are not yet
        (a validator checking kinds on every node reads nothing else of most of them)."""
        if self._dict is not None:
            return ((name, a.kind) for name, a in self._dict.items())
        return ((a.name, a.WhichOneof("value")) for a in self._pb)

    def get(self, name: str, default=None):
        return self._decoded().get(name, default)

    def __contains__(self, name) -> bool:
        return name in self._decoded()

    def __iter__(self):
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._pb) if self._dict is None else len(self._dict)

    def __eq__(self, other) -> bool:
        return self._decoded() == (other._decoded() if isinstance(other, PbAttrs) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._decoded())

    def __reduce__(self):
        return dict, (self._decoded(),)


def node_from_pb(m) -> Node:
    """Our immutable record of a protobuf `Node` (no checks; see `TraceReader`).

    Attributes are decoded lazily (`PbAttrs`). Raises ValueError for a type outside the enum.
    """
    t = m.type
    if not 0 <= t < len(_NODE_TYPES):
        raise ValueError(t)
    return _new_node(Node, (
        m.id, m.name, _NODE_TYPES[t], tuple(m.data_deps), tuple(m.ctrl_deps),
        m.start_time_micros, m.duration_micros, PbAttrs(m.attr) if m.attr else EMPTY_ATTRS,
        _io_from_pb(m, "inputs") if m.HasField("inputs") else None,
        _io_from_pb(m, "outputs") if m.HasField("outputs") else None,
    ))


def metadata_to_pb(meta: Metadata):
    # An empty version is kept when attributes carry the schema (as Chakra's converter writes);
    # with nothing at all the message would encode to zero bytes, which readers take as EOF.
    m = pb.GlobalMetadata(version=meta.version if (meta.version or meta.attrs) else WRITER_VERSION)
    for name in sorted(meta.attrs):
        _attr_to_pb(m.attr.add(), name, meta.attrs[name])
    return m


def metadata_from_pb(m, names: Collection[str] | None = None) -> Metadata:
    """The `Metadata` of a GlobalMetadata message; with `names`, only those attributes decoded."""
    return Metadata(m.version, {a.name: _attr_from_pb(a) for a in m.attr if names is None or a.name in names}, True)


# --------------------------------------------------------------------------------------------
# reader
# --------------------------------------------------------------------------------------------

class TraceReader:
    """Iterate the nodes of one `.et` file with bounded memory.

    >>> import tempfile, os
    >>> from chakra_tools.core.etwrite import write_trace
    >>> path = os.path.join(tempfile.mkdtemp(), "t.0.et")
    >>> write_trace(path, [Node(1, "a", NodeType.COMP_NODE), Node(2, "b", NodeType.COMP_NODE, (1,))])
    2
    >>> r = TraceReader(path)
    >>> [str(n) for n in r]
    ["%1 COMP 'a'", "%2 COMP 'b' deps=[%1]"]
    >>> r.metadata.version
    '0.0.4'
    """

    def __init__(self, path: str | Path, *, rank: int | None = None,
                 diagnostics: Diagnostics | None = None, skippable: bool = False):
        self.path = str(path)
        self.rank = rank
        self.diagnostics = diagnostics if diagnostics is not None else Diagnostics()
        self.metadata: Metadata | None = None
        #: with `skippable`, a callable(buf, pos) -> (pos past the frames a caller takes from the raw
        #: bytes itself, where the last of them starts or -1) (validate.scan_rank), asked once the
        #: legacy sniff is over
        self.skip: Callable[[bytes, int], tuple[int, int]] | None = None
        self._skipped: tuple[bytes, int] | None = None  # the last frame skipped, if after the last node
        self._stream = open_binary(path)
        self._frames = iter_frames(self._stream, self.path, skip=self._skip if skippable else None)
        self._first: tuple[int, bytes] | None = None
        self._sniff_left = LEGACY_SNIFF
        self._read_metadata()

    def _skip(self, buf: bytes, pos: int) -> int:
        # while the first nodes are sniffed for the legacy layout too: a frame the skip takes
        # parses as today's schema (`hotloops.node_parses`), which is what the sniff accepts
        if self.skip is None:
            return pos
        pos, last = self.skip(buf, pos)
        if last >= 0:
            self._skipped = (buf, last)
        return pos

    def _last_good(self, last: Node | None) -> Node | None:
        """The last node read whole: `last`, or the last frame a skip took after it (decoded now,
        for the message of an error that follows it)."""
        if self._skipped is None:
            return last
        buf, start = self._skipped
        length, body = decode_varint(buf, start)
        return node_from_pb(pb.Node.FromString(buf[body:body + length]))

    def _warn(self, code: str, message: str, node: Node | None = None) -> None:
        self.diagnostics.add(Diagnostic(
            "warning", code, message, file=self.path, rank=self.rank,
            node_id=node.id if node else None, node_name=node.name if node else None))

    def _read_metadata(self) -> None:
        try:
            first = next(self._frames, None)
        except TraceReadError:
            self.close()
            raise
        if first is not None and looks_like_metadata(first[1]):
            self._refuse_legacy(first[0], first[1], metadata=True)
            try:
                self.metadata = metadata_from_pb(pb.GlobalMetadata.FromString(first[1]))
                return
            except DecodeError:
                pass  # not metadata after all: decode it as a node
        self.metadata = Metadata("", {}, present=False)
        if first is not None:
            self._warn("no-metadata", "no GlobalMetadata message: read the first message as a node")
        self._first = first

    def __iter__(self) -> Iterator[Node]:
        last: Node | None = None
        try:
            if self._first is not None:
                last = self._decode(*self._first, last)
                yield last
            for offset, msg in self._frames:
                last = self._decode(offset, msg, last)
                self._skipped = None  # `last` is after what a skip took
                yield last
        except TraceReadError as e:
            good = self._last_good(last)
            if good is not None and (e.last_good is None or good is not last):  # name the last good node
                raise TraceReadError(e.path, e.offset, e.reason, str(good)) from None
            raise
        finally:
            self.close()

    def _refuse_legacy(self, offset: int, msg: bytes, metadata: bool = False) -> None:
        """Refuse a legacy (2023, proto2-era) file: read as today's schema it would lose every
        attribute without a word (core/legacy.py; `chakra-tools upgrade` converts it)."""
        if not metadata and hotloops.node_parses(msg):  # today's layout, read in C: no legacy field
            return
        try:
            refuse_legacy(self.path, offset, msg, metadata=metadata)
        except TraceReadError:
            self.close()
            raise

    def _decode(self, offset: int, msg: bytes, last: Node | None) -> Node:
        """Decode one node; check the contract kinds on the raw bytes (see `_contract_patterns`).
        The first `LEGACY_SNIFF` nodes are also checked for the legacy layout."""
        if self._sniff_left:
            self._sniff_left -= 1
            self._refuse_legacy(offset, msg)
        try:
            m = pb.Node.FromString(msg)
            node = node_from_pb(m)
        except DecodeError as e:
            raise TraceReadError(self.path, offset, f"message does not decode as a Node: {e}",
                                 str(last) if last else None) from None
        except ValueError:
            raise TraceReadError(self.path, offset, f"node {m.id} has unknown node type {m.type}",
                                 str(last) if last else None) from None
        # the name's bytes may also occur inside another attribute's value: then look properly
        if node.type is NodeType.COMM_COLL_NODE and (_COMM_TYPE_NAME not in msg
                                                     or "comm_type" not in node.attrs):
            self._warn("assumed-all-reduce", "COMM_COLL node without comm_type: read as ALL_REDUCE", node)
        if _WRONG_KIND.search(msg) is not None:
            self._check_contract(node)
        return node

    def _check_contract(self, node: Node) -> None:
        attrs = node.attrs
        for name in _CONTRACT_NAMES.intersection(attrs):
            a, want = attrs[name], CONTRACT[name]
            if a.kind != want:
                if want in INTEGER_KINDS and a.kind in INTEGER_KINDS:
                    self._warn("int-kind", f"{name} stored as {a.kind}, read as {want}", node)
                else:
                    self._warn("attr-kind", f"{name} stored as {a.kind}, the contract says {want}", node)

    def close(self) -> None:
        self._stream.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def iter_nodes(path: str | Path, **kw) -> Iterator[Node]:
    """Stream the nodes of one file (see `TraceReader`)."""
    return iter(TraceReader(path, **kw))


def _varint_bytes(n: int) -> bytes:
    if n < 0 or n >> 64:
        raise ValueError(f"{n} is out of range for a uint64 field")
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_CONTRACT_NAMES = frozenset(CONTRACT)
_WRONG_KIND = _wrong_kind_pattern()
_COMM_TYPE_NAME = b"\x0a\x09comm_type"
