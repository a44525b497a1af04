"""Legacy Chakra files (the proto2-era schema of 2023): recognised from the wire, upgraded.

Chakra's generator and converter wrote, until late 2023, a different `Node` message in the same
package and framing (`syntax = "proto2"`; field numbers):

    Node            1 id, 2 name, 3 type (NodeType, values as today), 4 parent (repeated uint64),
                    5 inputs, 6 input_shapes, 7 input_types, 8 outputs, 9 output_shapes,
                    10 output_types (all strings), 11 attribute (repeated AttributeProto)
    AttributeProto  1 name, 2 type (AttributeType), 3 doc_string, 4 b (bool), 5 f (float),
                    6 u (uint64), 7 i (int64), 8 s (string), 9 bools, 10 floats, 11 uints,
                    12 ints, 13 strings
    GlobalMetadata  1 attribute (repeated AttributeProto); often absent
    CollectiveCommType  ALL_REDUCE 0, ALL_TO_ALL 1, ALL_GATHER 2, REDUCE_SCATTER 3, BROADCAST 4

Read as today's schema such a file loses every attribute (field 11 is unknown today) and its
input/output strings, silently: a one-node all-gather reads as an all-reduce of 0 bytes. Two
wire facts tell it apart: today's Node has no field 11, and its fields 6 and 7 are varints (start
time, duration) where the legacy ones are strings. A legacy node with neither (no attributes, no
shapes) reads the same either way.

Upgrading keeps every attribute, with today's contract names and kinds: `comm_type` through the
old enum, `comm_size`/`tensor_size`/`num_ops` as their contract kinds, `src`/`dst` as
`comm_src`/`comm_dst`, `runtime` (µs, the legacy feeders' compute time) as `duration_micros`;
`parent` becomes `ctrl_deps`. Communication nodes get `is_cpu_op` false (they run on the device)
and point-to-point nodes without a tag get `comm_tag` 0 (the legacy simulator matched on
source and destination alone), and compute nodes without `is_cpu_op` get false, what ASTRA-sim
reads for them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputError, TraceReadError
from .etio import decode_varint, iter_frames, looks_like_metadata, open_binary, write_trace
from .model import CONTRACT, Attr, CommType, IOInfo, Metadata, Node, NodeType, make_attr

FORMAT = "legacy Chakra ET (proto2-era, 2023: attributes in field 11, dependencies in `parent`)"
LEGACY_COMM_TYPES = {0: CommType.ALL_REDUCE, 1: CommType.ALL_TO_ALL, 2: CommType.ALL_GATHER,
                     3: CommType.REDUCE_SCATTER, 4: CommType.BROADCAST}
_RENAMES = {"src": "comm_src", "dst": "comm_dst"}
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def fields(msg: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of a message's top-level fields: varints as ints, fixed
    32/64-bit values as their bytes, length-delimited ones as bytes. ValueError if malformed."""
    out, pos, n = [], 0, len(msg)
    while pos < n:
        tag, pos = decode_varint(msg, pos)
        if tag < 0:
            raise ValueError("message ends inside a tag")
        num, wire = tag >> 3, tag & 7
        if wire == _VARINT:
            value, pos = decode_varint(msg, pos)
            if value < 0:
                raise ValueError("message ends inside a varint")
        elif wire == _LEN:
            length, pos = decode_varint(msg, pos)
            if length < 0 or pos + length > n:
                raise ValueError("length-delimited field runs past the message")
            value, pos = msg[pos:pos + length], pos + length
        elif wire in (_I64, _I32):
            size = 8 if wire == _I64 else 4
            if pos + size > n:
                raise ValueError("fixed-size field runs past the message")
            value, pos = msg[pos:pos + size], pos + size
        else:
            raise ValueError(f"wire type {wire} is not used by Chakra")
        out.append((num, wire, value))
    return out


def is_legacy_node(msg: bytes) -> bool:
    """Whether one node message has the legacy layout (see the module docstring).

    >>> is_legacy_node(bytes([0x08, 0x00, 0x12, 0x01, 0x61, 0x5a, 0x00]))  # id 0, name 'a', field 11
    True
    >>> is_legacy_node(bytes([0x08, 0x01, 0x12, 0x01, 0x61, 0x38, 0x05]))  # id 1, name 'a', duration 5
    False
    """
    try:
        return any(num == 11 and wire == _LEN or num in (6, 7) and wire == _LEN
                   for num, wire, _ in fields(msg))
    except ValueError:
        return False


def legacy_metadata(msg: bytes) -> bool:
    """A legacy GlobalMetadata: only field 1, each a legacy attribute (a name, then its type)."""
    try:
        top = fields(msg)
        return bool(top) and all(num == 1 and wire == _LEN and _is_legacy_attr(v) for num, wire, v in top)
    except ValueError:
        return False


def _is_legacy_attr(body: bytes) -> bool:
    try:
        f = fields(body)
    except ValueError:
        return False
    return any(n == 1 and w == _LEN for n, w, _ in f) and any(n == 2 and w == _VARINT for n, w, _ in f)


def refuse_legacy(path: str, offset: int, msg: bytes, *, metadata: bool = False) -> None:
    """Raise a TraceReadError naming the format and the fix if `msg` (a node, or with
    `metadata` the first message) has the legacy layout: read as today's schema it would lose
    every attribute without a word. Readers call it on the first few messages of a file."""
    if legacy_metadata(msg) if metadata else is_legacy_node(msg):
        raise TraceReadError(path, offset, f"a {FORMAT}, not today's schema: "
                             f"`chakra-tools upgrade {path} NEW` converts it")


# --------------------------------------------------------------------------------------------
# decoding legacy messages
# --------------------------------------------------------------------------------------------

def _ints(wire: int, value) -> list[int]:
    """A repeated integer field's values: one varint, or a packed run of them."""
    if wire == _VARINT:
        return [value]
    out, pos = [], 0
    while pos < len(value):
        v, pos = decode_varint(value, pos)
        if v < 0:
            raise ValueError("packed varints end early")
        out.append(v)
    return out


def _floats(wire: int, value) -> list[float]:
    if wire == _I32:
        return [struct.unpack("<f", value)[0]]
    return [x[0] for x in struct.iter_unpack("<f", value)]


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def legacy_attr(body: bytes) -> tuple[str, Attr]:
    """(name, value) of one legacy AttributeProto, in today's oneof kinds. The value comes from
    whichever value field is set (the legacy `type` field is not trusted: the generator wrote a
    string under type INT)."""
    name, doc = "", ""
    scalar: tuple[str, object] | None = None
    lists: dict[int, list] = {}
    for num, wire, value in fields(body):
        if num == 1:
            name = value.decode("utf-8", "replace")
        elif num == 3:
            doc = value.decode("utf-8", "replace")
        elif num == 4:
            scalar = ("bool_val", bool(value))
        elif num == 5:
            scalar = ("float_val", _floats(wire, value)[0])
        elif num == 6:
            scalar = ("uint64_val", value)
        elif num == 7:
            scalar = ("int64_val", _signed(value))
        elif num == 8:
            scalar = ("string_val", value.decode("utf-8", "replace"))
        elif num in (9, 11, 12):
            lists.setdefault(num, []).extend(_ints(wire, value))
        elif num == 10:
            lists.setdefault(num, []).extend(_floats(wire, value))
        elif num == 13:
            lists.setdefault(num, []).append(value.decode("utf-8", "replace"))
    if scalar is None and lists:
        num, values = next(iter(lists.items()))
        kind = {9: "bool_list", 10: "float_list", 11: "uint64_list", 12: "int64_list", 13: "string_list"}[num]
        values = [bool(v) for v in values] if num == 9 else [_signed(v) for v in values] if num == 12 else values
        scalar = (kind, tuple(values))
    kind, value = scalar if scalar is not None else (None, None)
    return name, Attr(kind, value, doc)


def legacy_node(msg: bytes) -> Node:
    """Today's Node for one legacy node message (see the module docstring for the mapping)."""
    nid, name, ntype, parents = 0, "", NodeType.INVALID_NODE, []
    strings: dict[int, str] = {}
    attrs: dict[str, Attr] = {}
    for num, wire, value in fields(msg):
        if num == 1:
            nid = value
        elif num == 2:
            name = value.decode("utf-8", "replace")
        elif num == 3:
            ntype = NodeType(value)
        elif num == 4:
            parents.extend(_ints(wire, value))
        elif 5 <= num <= 10 and wire == _LEN:
            strings[num] = value.decode("utf-8", "replace")
        elif num == 11:
            key, attr = legacy_attr(value)
            attrs[key] = attr
    duration, attrs = _contract(ntype, attrs)
    io = lambda a, b, c: IOInfo(strings.get(a, ""), strings.get(b, ""), strings.get(c, "")) \
        if {a, b, c} & strings.keys() else None  # noqa: E731
    return Node(nid, name, ntype, ctrl_deps=tuple(parents), duration_micros=duration,
                inputs=io(5, 6, 7), outputs=io(8, 9, 10), attrs=attrs)


def _contract(ntype: NodeType, attrs: dict[str, Attr]) -> tuple[int, dict[str, Attr]]:
    """(duration in µs, attributes under today's contract names and kinds)."""
    out: dict[str, Attr] = {}
    duration = 0
    for name, a in attrs.items():
        if name == "runtime" and isinstance(a.value, int):
            duration = max(a.value, 0)
            continue
        name = _RENAMES.get(name, name) if ntype.is_comm else name
        value = a.value
        if name == "comm_type" and isinstance(value, int):
            value = LEGACY_COMM_TYPES.get(value, value)
        contract = name in CONTRACT and a.kind is not None and not a.kind.endswith("_list")
        out[name] = make_attr(name, value) if contract else Attr(a.kind, value, a.doc)
    if ntype.is_comm:
        out.setdefault("is_cpu_op", make_attr("is_cpu_op", False))
        if ntype is not NodeType.COMM_COLL_NODE:
            out.setdefault("comm_tag", make_attr("comm_tag", 0))
    elif ntype is NodeType.COMP_NODE:
        out.setdefault("is_cpu_op", make_attr("is_cpu_op", False))
    return duration, out


# --------------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------------

def sniff(path: str | Path, limit: int = 64) -> bool:
    """Whether a file is a legacy Chakra trace: one of its first `limit` node messages has the
    legacy layout. Framing errors are left to the reader that follows."""
    with open_binary(path) as stream:
        try:
            for k, (_, msg) in enumerate(iter_frames(stream, path)):
                if k >= limit:
                    return False
                if k == 0 and legacy_metadata(msg):
                    return True
                if is_legacy_node(msg):
                    return True
        except TraceReadError:
            return False
    return False


@dataclass
class Upgrade:
    """What `upgrade_file` did: nodes written, and the attributes it had to assume."""

    source: str
    target: str
    nodes: int = 0
    assumed: dict[str, int] = field(default_factory=dict)


def upgrade_file(src: str | Path, dst: str | Path) -> Upgrade:
    """Write today's format of the legacy trace `src` to `dst` (atomically).

    Raises InputError if `src` is not a legacy trace, TraceReadError (file, byte offset) if it
    is damaged; nothing is written then."""
    src, dst = str(src), str(dst)
    if not sniff(src):
        raise InputError(f"{src}: not a {FORMAT}: it reads as today's format (nothing to upgrade)")
    report = Upgrade(src, dst)
    meta, nodes = Metadata(attrs={"upgraded_from": make_attr("upgraded_from", FORMAT)}), []
    with open_binary(src) as stream:
        for k, (offset, msg) in enumerate(iter_frames(stream, src)):
            if k == 0 and (legacy_metadata(msg) or looks_like_metadata(msg) and not is_legacy_node(msg)):
                meta = _metadata(msg, meta)
                continue
            try:
                node = legacy_node(msg)
            except ValueError as e:
                raise TraceReadError(src, offset, f"legacy node does not decode: {e}",
                                     str(nodes[-1]) if nodes else None) from None
            _count_assumed(report, msg, node)
            nodes.append(node)
    report.nodes = write_trace(dst, nodes, meta)
    return report


def _metadata(msg: bytes, base: Metadata) -> Metadata:
    attrs = dict(base.attrs)
    if legacy_metadata(msg):
        for _, _, body in fields(msg):
            name, a = legacy_attr(body)
            attrs[name] = a
    return Metadata(attrs=attrs)


def _count_assumed(report: Upgrade, msg: bytes, node: Node) -> None:
    """Count the attributes the upgrade added (not in the legacy node)."""
    raw = {legacy_attr(v)[0] for num, _, v in fields(msg) if num == 11}
    for name in ("is_cpu_op", "comm_tag"):
        if name in node.attrs and name not in raw:
            report.assumed[name] = report.assumed.get(name, 0) + 1


def upgrade_set(src: str | Path, dst: str | Path) -> list[Upgrade]:
    """Upgrade one legacy file (`dst` a file) or every file of a rank set (a folder or prefix;
    `dst` a folder, same file names, comm_group.json copied): all or nothing."""
    from .graph import find_rank_files

    src_path, dst = Path(src), Path(dst)
    if src_path.is_file():
        return [upgrade_file(src_path, dst)]
    files = find_rank_files(src_path)
    dst.mkdir(parents=True, exist_ok=True)
    done: list[Upgrade] = []
    try:
        for f in files.values():
            done.append(upgrade_file(f, dst / f.name))
        groups = next(iter(files.values())).parent / "comm_group.json"
        if groups.is_file():
            (dst / "comm_group.json").write_bytes(groups.read_bytes())
    except BaseException:
        for u in done:
            Path(u.target).unlink(missing_ok=True)
        raise
    return done
