"""The core's compiled loops (`_hotloops.c`) or their Python twins, picked once, here.

The writer (`etio.TraceWriter.write_all`) and the validator (`validate.scan_rank`) call
`encode_frames` and `plain_run`, the feeder (`feed.ETFeeder`) keeps its window in a `Window` and
calls `decode_node`, `load_node`, `load_frames` and `finish_node`, and each reads
as one algorithm; whether C or Python answers is decided
at import (the Python twins where the extension is not built or CHAKRA_TOOLS_PURE_PYTHON is set;
`core.native`) or, for a block of code, by `python_twins()`, which the tests that compare the two
paths use. Python is the reference: the C functions do the common case and leave the rest to it.

    >>> from chakra_tools.core.model import Node, NodeType
    >>> nodes = [Node(1, "a", NodeType.COMP_NODE), Node(2, "b", NodeType.COMP_NODE, (1,))]
    >>> with python_twins():
    ...     twin = encode_frames(nodes, 0)
    >>> encode_frames(nodes, 0) == twin
    True
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

from . import encoder, native
from .framing import decode_varint
from .model import CONTRACT, CommType, Node, NodeType

#: the compiled module, or None (not built, or not wanted)
COMPILED = native.load("chakra_tools.core._hotloops")
_CONTRACT_KINDS = dict(CONTRACT)  # a plain dict, what the compiled run takes
_COMM_TYPES = frozenset((NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMM_COLL_NODE))
_COMPILED_IDS = 1 << 62  # ids the compiled run counts in 64-bit integers


def _plain_run_compiled(nodes: Sequence[Node], start: int, first: int, count: int) -> int:
    if not 0 <= first or first + count >= _COMPILED_IDS:
        return 0
    return COMPILED.plain_run(nodes, start, first, count, _CONTRACT_KINDS, _COMM_TYPES)


def _plain_run_twin(nodes: Sequence[Node], start: int, first: int, count: int) -> int:
    """Claims no node: then the validator's general checks, the reference, look at every one."""
    return 0


def _contract_fields() -> dict[bytes, int]:
    """The contract as the compiled scan reads it: name -> the AttributeProto field number of its kind."""
    from .schema import et_def_pb2 as pb

    fields = pb.AttributeProto.DESCRIPTOR.fields_by_name
    return {name.encode(): fields[kind].number for name, kind in CONTRACT.items()}


_CONTRACT_FIELDS = _contract_fields() if COMPILED is not None else {}
_MAX_COMM_TYPE = max(CommType)
assert list(CommType) == list(range(_MAX_COMM_TYPE + 1))  # what the compiled scan's range check takes


def _scan_frames_compiled(buf: bytes, pos: int, first: int, count: int, pgs, sink: list,
                          colls: dict | None = None, kinds: tuple = ()) -> tuple[int, int, int]:
    if colls is None:
        return COMPILED.scan_frames(buf, pos, first, count, _CONTRACT_FIELDS, pgs, sink, _MAX_COMM_TYPE)
    return COMPILED.scan_frames(buf, pos, first, count, _CONTRACT_FIELDS, pgs, sink, _MAX_COMM_TYPE, colls, kinds)


def _scan_frames_twin(buf: bytes, pos: int, first: int, count: int, pgs, sink: list,
                      colls: dict | None = None, kinds: tuple = ()) -> tuple[int, int, int]:
    """Claims no frame: then the validator decodes every node (protobuf) and checks it, the reference."""
    return pos, 0, -1


def _shape_of_twin(buf: bytes, pos: int) -> tuple[int, int, list] | None:
    """`_hotloops.shape_of` in Python, field by field: the same lanes, the same refs."""
    a, b, refs = 0xcbf29ce484222325, 0x84222325cbf29ce4, []
    mask = (1 << 64) - 1

    def add(chunk: bytes) -> None:
        nonlocal a, b
        for byte in chunk:
            a = ((a ^ byte) * 0x100000001b3) & mask
            b = ((b + byte + 1) * 0x9E3779B97F4A7C15) & mask
            b ^= b >> 29

    try:
        while pos < len(buf):
            size, start = decode_varint(buf, pos)
            if size < 0 or start + size > len(buf):
                return None
            a = (a * 0x9E3779B97F4A7C15 + 1) & mask  # a frame begins (lanes_frame)
            b = ((b << 17 | b >> 47) & mask) ^ 0x85EBCA77C2B2AE63
            q, end = start, start + size
            while q < end:
                at = q
                field, wire, value, q = _field(buf, q, end)
                attr = _attr(buf, *value) if field == 10 and wire == 2 else None
                ref = None if attr is None else _REFS.get(attr[0])
                if ref is None:
                    add(buf[at:q])
                    continue
                name, kind, raw = attr
                add(name)
                if ref == "pg" and kind == 29:
                    refs.append(buf[raw[0]:raw[1]].decode())
                elif ref == "rank" and kind in _INT_VALUE:
                    refs.append(_INT_VALUE[kind](raw))
                else:
                    return None
            pos = end
    except (ValueError, IndexError, UnicodeDecodeError):
        return None
    return a, b, refs


#: the attributes whose values name ranks or groups (shape_of lists them instead of hashing them)
_REFS = {b"pg_name": "pg", b"comm_src": "rank", b"comm_dst": "rank"}


def _signed(bits: int):
    return lambda v: (v & ((1 << bits) - 1)) - ((v >> (bits - 1) & 1) << bits)


def _zigzag(bits: int):
    return lambda v: ((v & ((1 << bits) - 1)) >> 1) ^ -(v & 1)


#: AttributeProto's integer kinds (by field number): the raw varint or fixed value -> the int
_INT_VALUE = {7: _signed(32), 9: _signed(64), 11: lambda v: v & 0xFFFFFFFF, 13: lambda v: v,
              15: _zigzag(32), 17: _zigzag(64), 19: lambda v: v, 21: lambda v: v, 23: _signed(32), 25: _signed(64)}


def _field(buf: bytes, pos: int, end: int) -> tuple[int, int, object, int]:
    """(field number, wire type, value, next pos) of the field at pos: a varint or fixed value as
    an int, a length-delimited one as its (start, end)."""
    key, pos = decode_varint(buf, pos)
    field, wire = key >> 3, key & 7
    if key < 0 or field == 0:
        raise ValueError("malformed field")
    if wire == 0:
        value, pos = decode_varint(buf, pos)
        if value < 0:
            raise ValueError("truncated varint")
    elif wire in (1, 5):
        width = 8 if wire == 1 else 4
        value, pos = int.from_bytes(buf[pos:pos + width], "little"), pos + width
    elif wire == 2:
        size, pos = decode_varint(buf, pos)
        value, pos = (pos, pos + size), pos + size
    else:
        raise ValueError(f"wire type {wire}")
    if pos > end or (wire == 2 and size < 0):
        raise ValueError("field past its message")
    return field, wire, value, pos


def _attr(buf: bytes, start: int, end: int) -> tuple[bytes, int, object]:
    """An AttributeProto's (name, kind's field number, value): the last value field wins."""
    name, kind, value = b"", 0, None
    while start < end:
        field, _, value_here, start = _field(buf, start, end)
        if field == 1:
            name = buf[value_here[0]:value_here[1]]
        elif 3 <= field <= 32:
            kind, value = field, value_here
    return name, kind, value


def _node_parses_twin(msg: bytes) -> bool:
    """Says nothing (False): the reader's reference looks at every message for the legacy layout."""
    return False


def _decode_node_twin(msg: bytes, use_data: bool, use_ctrl: bool, info_type: type, max_type: int,
                      comm_coll: int) -> None:
    """Decodes no node: then the feeder's reference (protobuf and `feed.info.node_info`) reads every one."""
    return None


def _load_node_twin(window: tuple, msg: bytes, offset: int | None = None) -> None:
    """Loads no node: then the feeder's reference (`ETFeeder._load`) loads every one."""
    return None


def _load_frames_twin(window: tuple, buf: bytes, pos: int, base: int, budget: int) -> tuple[int, int]:
    """Loads no frame: then the feeder takes each from its FrameReader and loads it itself."""
    return pos, 0


def _finish_node_twin(window: tuple, nid: int) -> None:
    """Finishes no node: then the feeder's reference (`ETFeeder._finish_record`) finishes every one."""
    return None


#: encode_frames(nodes, start) -> (frames, next): see `encoder.encode_frames`
#: plain_run(nodes, start, first, count) -> how many nodes from nodes[start] on have ids
#: first + count, first + count + 1, ... and nothing the validator would report (the run of
#: consecutive ids then simply grows); 0 means "check nodes[start] yourself"
#: scan_frames(buf, pos, first, count, pgs, sink[, colls, kinds]) -> (pos, n, last): plain_run on
#: the raw frames of buf from pos on (the validator's common case without decoding: see
#: _hotloops.c), the communication nodes' records appended to sink (with colls, a dict of lists
#: by pg, the collectives' (id, name, kinds[comm_type], size) there), `last` where the last frame
#: taken starts;
#: (pos, 0, -1) means "decode and check the frame at pos yourself"
#: node_parses(msg) -> True where the Node message reads as today's schema (so has no legacy
#: layout); False: "look yourself"
#: decode_node(msg, use_data, use_ctrl, info_type, max_type, comm_coll) -> (id, deps, info) read
#: straight off the wire, or None: "decode this Node message yourself" (see `feed.ETFeeder._load`)
#: load_node(window, msg[, offset]) -> id: decode_node, then the node put into the feeder's window as
#: `feed.ETFeeder._load` puts it (an eager window keeps the message's file offset, not the
#: message); or None, nothing changed: "load this one yourself"
#: load_frames(window, buf, pos, base, budget) -> (pos, loaded): the frames of buf from pos on, each
#: loaded as load_node loads it, up to budget; it stops at a frame it cannot take whole from buf or
#: must leave to the reference (the feeder's FrameReader then reads that one)
#: finish_node(window, nid) -> the children it freed, the node finished in the feeder's window as
#: `feed.ETFeeder._finish_record` finishes it; or None, nothing changed: "finish it yourself"
#: shape_of(buf, pos) -> (a, b, refs) or None: the frames from pos on hashed but for the values of
#: pg_name, comm_src and comm_dst, which refs lists in order (see _hotloops.c; replay/replicas.py)
#: Window(...) -> a feeder's window of loaded nodes held as C records, which load_node, load_frames
#: and finish_node change (see _hotloops.c); the twin is None: the feeder keeps the reference's
#: dict of `_Loaded` records, which the twins above leave to it
_TWINS = {"encode_frames": encoder.encode_frames, "plain_run": _plain_run_twin,
          "scan_frames": _scan_frames_twin, "node_parses": _node_parses_twin, "decode_node": _decode_node_twin, "load_node": _load_node_twin, "load_frames": _load_frames_twin,
          "finish_node": _finish_node_twin, "shape_of": _shape_of_twin, "Window": None}
_PICKED = _TWINS if COMPILED is None else {"encode_frames": COMPILED.encode_frames,
                                            "plain_run": _plain_run_compiled,
                                            "scan_frames": _scan_frames_compiled,
                                            "node_parses": COMPILED.node_parses,
                                            "decode_node": COMPILED.decode_node,
                                            "load_node": COMPILED.load_node,
                                            "load_frames": COMPILED.load_frames,
                                            "finish_node": COMPILED.finish_node,
                                            "shape_of": COMPILED.shape_of,
                                            "Window": COMPILED.Window}
encode_frames = _PICKED["encode_frames"]
plain_run = _PICKED["plain_run"]
scan_frames = _PICKED["scan_frames"]
node_parses = _PICKED["node_parses"]
decode_node = _PICKED["decode_node"]
load_node = _PICKED["load_node"]
load_frames = _PICKED["load_frames"]
finish_node = _PICKED["finish_node"]
shape_of = _PICKED["shape_of"]
Window = _PICKED["Window"]


@contextmanager
def python_twins() -> Iterator[None]:
    """Run the Python twins inside the block, whatever was picked at import (to compare them)."""
    global encode_frames, plain_run, scan_frames, node_parses, decode_node, load_node, load_frames
    global finish_node, shape_of, Window
    try:
        (encode_frames, plain_run, scan_frames, node_parses, decode_node, load_node, load_frames, finish_node,
         shape_of, Window) = (_TWINS[k] for k in _TWINS)
        yield
    finally:
        (encode_frames, plain_run, scan_frames, node_parses, decode_node, load_node, load_frames, finish_node,
         shape_of, Window) = (_PICKED[k] for k in _TWINS)
