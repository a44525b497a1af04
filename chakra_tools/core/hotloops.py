"""The core's compiled loops (`_hotloops.c`) or their Python twins, picked once, here.

The writer (`etwrite.TraceWriter.write_all`) and the validator (`validate.scan_rank`) call
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
from .framing import LEN, decode_varint, message_fields
from .model import CONTRACT, INTEGER_KINDS, CommType, Node, NodeType

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
    """`_hotloops.shape_of` in Python: the same lanes over the same bytes and the same refs, each
    node's fields walked by `framing.message_fields` and its attributes read by protobuf (on a
    malformed file the two may give up at different places)."""
    from google.protobuf.message import DecodeError

    from .schema import et_def_pb2 as pb

    a, b, refs = 0xcbf29ce484222325, 0x84222325cbf29ce4, []
    mask = (1 << 64) - 1

    def add(chunk: bytes) -> None:
        nonlocal a, b
        words = len(chunk) // 8 * 8
        for i in range(0, words, 8):  # 8 bytes at a time, as lanes_add
            w = int.from_bytes(chunk[i:i + 8], "little")
            a = ((a ^ w) * 0x100000001b3) & mask
            a ^= a >> 32
            b = ((b + w + 1) * 0x9E3779B97F4A7C15) & mask
            b ^= b >> 29
        for byte in chunk[words:]:
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
            msg, at = buf[start:start + size], 0
            for num, wire, value, end in message_fields(msg):
                attr = pb.AttributeProto.FromString(value) if num == 10 and wire == LEN else None
                ref = None if attr is None else _REFS.get(attr.name)
                if ref is None:
                    add(msg[at:end])
                else:
                    kind = attr.WhichOneof("value")
                    if not (kind == "string_val" if ref == "pg" else kind in INTEGER_KINDS):
                        return None
                    add(attr.name.encode())
                    refs.append(getattr(attr, kind))
                at = end
            pos = start + size
    except (ValueError, DecodeError):
        return None
    return a, b, refs


def _pattern_of_twin(refs: list) -> tuple[tuple[int, ...], tuple[str, ...], tuple[int, ...]]:
    """`_hotloops.pattern_of` in Python: each ref as 2 x the index of its first appearance among
    its kind (groups are strings, ranks the rest), + 1 for a rank; the distinct ones in order."""
    groups: dict[str, int] = {}
    ranks: dict[int, int] = {}
    pattern = []
    for ref in refs:
        table = groups if type(ref) is str else ranks
        pattern.append(table.setdefault(ref, len(table)) * 2 + (table is ranks))
    return tuple(pattern), tuple(groups), tuple(ranks)


def _metadata_fields_twin(msg: bytes) -> None:
    """Says nothing (None): core/shapes.py decodes the GlobalMetadata message itself."""
    return None


#: the attributes whose values name ranks or groups (shape_of lists them instead of hashing them)
_REFS = {"pg_name": "pg", "comm_src": "rank", "comm_dst": "rank"}


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
#: pg_name, comm_src and comm_dst, which refs lists in order (see _hotloops.c; core/shapes.py)
#: pattern_of(refs) -> (pattern, groups, ranks): those refs as the places of their first appearances
#: metadata_fields(msg) -> (world_size, rank, conversion) of a GlobalMetadata message as
#: RankScan.read_metadata takes them, or None: "decode it yourself" (core/shapes.py)
#: Window(...) -> a feeder's window of loaded nodes held as C records, which load_node, load_frames
#: and finish_node change (see _hotloops.c); the twin is None: the feeder keeps the reference's
#: dict of `_Loaded` records, which the twins above leave to it
_TWINS = {"encode_frames": encoder.encode_frames, "plain_run": _plain_run_twin,
          "scan_frames": _scan_frames_twin, "node_parses": _node_parses_twin, "decode_node": _decode_node_twin, "load_node": _load_node_twin, "load_frames": _load_frames_twin,
          "finish_node": _finish_node_twin, "shape_of": _shape_of_twin, "pattern_of": _pattern_of_twin,
          "metadata_fields": _metadata_fields_twin, "Window": None}
_PICKED = _TWINS if COMPILED is None else {"encode_frames": COMPILED.encode_frames,
                                            "plain_run": _plain_run_compiled,
                                            "scan_frames": _scan_frames_compiled,
                                            "node_parses": COMPILED.node_parses,
                                            "decode_node": COMPILED.decode_node,
                                            "load_node": COMPILED.load_node,
                                            "load_frames": COMPILED.load_frames,
                                            "finish_node": COMPILED.finish_node,
                                            "shape_of": COMPILED.shape_of,
                                            "pattern_of": COMPILED.pattern_of,
                                            "metadata_fields": COMPILED.metadata_fields,
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
pattern_of = _PICKED["pattern_of"]
metadata_fields = _PICKED["metadata_fields"]
Window = _PICKED["Window"]


@contextmanager
def python_twins() -> Iterator[None]:
    """Run the Python twins inside the block, whatever was picked at import (to compare them)."""
    global encode_frames, plain_run, scan_frames, node_parses, decode_node, load_node, load_frames
    global finish_node, shape_of, pattern_of, metadata_fields, Window
    try:
        (encode_frames, plain_run, scan_frames, node_parses, decode_node, load_node, load_frames, finish_node,
         shape_of, pattern_of, metadata_fields, Window) = (_TWINS[k] for k in _TWINS)
        yield
    finally:
        (encode_frames, plain_run, scan_frames, node_parses, decode_node, load_node, load_frames, finish_node,
         shape_of, pattern_of, metadata_fields, Window) = (_PICKED[k] for k in _TWINS)
