"""Legacy Chakra files (the proto2-era schema of 2023): recognised from the wire and decoded
(core/upgrade.py writes them in today's format).

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

A damaged file is refused whole, naming the file, the byte offset of the message and the node
(a TraceReadError; nothing is written): a field of the wrong wire type, a varint past 64 bits, a
node type or a contract attribute (`comm_size`, `comm_src`...) that today's schema cannot hold.
A guess there (an id of 0, a size dropped) would change the workload without a word, and a
legacy file has no other copy to compare with; unknown fields are skipped, as protobuf does.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

from .errors import TraceReadError
from .framing import I32 as _I32, I64 as _I64, LEN as _LEN, VARINT as _VARINT
from .framing import decode_varint, iter_frames, message_fields, open_binary
from .model import CONTRACT, Attr, CommType, IOInfo, Node, NodeType, make_attr

FORMAT = "legacy Chakra ET (proto2-era, 2023: attributes in field 11, dependencies in `parent`)"
LEGACY_COMM_TYPES = {0: CommType.ALL_REDUCE, 1: CommType.ALL_TO_ALL, 2: CommType.ALL_GATHER,
                     3: CommType.REDUCE_SCATTER, 4: CommType.BROADCAST}
_RENAMES = {"src": "comm_src", "dst": "comm_dst"}
_WIRE_NAMES = {_VARINT: "a varint", _I64: "a 64-bit value", _LEN: "length-delimited", _I32: "a 32-bit value"}
_U64 = (1 << 64) - 1
#: an integer written as text (ASCII digits only: int() also takes "٣"), at most 20 digits
_DECIMAL = re.compile(r"\s*-?[0-9]{1,20}\s*")
#: the range of each integer kind a contract attribute may have (core.model.CONTRACT)
_RANGES = {"int32_val": (-(1 << 31), (1 << 31) - 1), "int64_val": (-(1 << 63), (1 << 63) - 1),
           "uint64_val": (0, _U64)}


def fields(msg: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of a message's top-level fields (`framing.message_fields`
    without where each ends). ValueError if malformed."""
    return [(num, wire, value) for num, wire, value, _ in message_fields(msg)]


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
    """A legacy GlobalMetadata: only field 1, each a legacy attribute (a name, then its type).
    Today's metadata is told by its first field (its version string) without parsing the rest:
    every rank file's metadata is sniffed before a replay."""
    try:
        first = message_fields(msg, limit=1)
        if not first or not (first[0][0] == 1 and first[0][1] == _LEN and _is_legacy_attr(first[0][2])):
            return False
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

def _want(num: int, wire: int, value, wires: tuple[int, ...], what: str):
    """`value` if field `num` came with one of the wire types `wires`; ValueError naming it else."""
    if wire not in wires:
        raise ValueError(f"{what} (field {num}) is {_WIRE_NAMES.get(wire, wire)}, not "
                         f"{' or '.join(_WIRE_NAMES[w] for w in wires)}")
    return value


def _text(num: int, wire: int, value, what: str) -> str:
    return _want(num, wire, value, (_LEN,), what).decode("utf-8", "replace")


def _ints(wire: int, value, num: int = 0, what: str = "repeated integer") -> list[int]:
    """A repeated integer field's values: one varint, or a packed run of them."""
    _want(num, wire, value, (_VARINT, _LEN), what)
    if wire == _VARINT:
        return [value]
    out, pos = [], 0
    while pos < len(value):
        v, pos = decode_varint(value, pos)
        if v < 0:
            raise ValueError(f"{what} (field {num}): packed varints end early")
        if v > _U64:
            raise ValueError(f"{what} (field {num}): packed varint past 64 bits")
        out.append(v)
    return out


def _floats(wire: int, value, num: int = 0, what: str = "float") -> list[float]:
    """One 32-bit float, or a packed run of them (a whole number of 4-byte floats)."""
    _want(num, wire, value, (_I32, _LEN), what)
    if wire == _I32:
        return [struct.unpack("<f", value)[0]]
    if len(value) % 4:
        raise ValueError(f"{what} (field {num}): {len(value)} bytes, not a whole number of floats")
    return [x[0] for x in struct.iter_unpack("<f", value)]


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def legacy_attr(body: bytes) -> tuple[str, Attr]:
    """(name, value) of one legacy AttributeProto, in today's oneof kinds. The value comes from
    whichever value field is set (the legacy `type` field is not trusted: the generator wrote a
    string under type INT). ValueError, naming the attribute where its name came first, for one
    that does not decode."""
    return _named(_legacy_attr, body, lambda k: f"attribute {k['name']!r}" if "name" in k else None)


def _named(decode, data: bytes, what):
    """`decode(data, known)`, its ValueError led by `what(known)`: what the decode had read of
    the thing (its id, its name) when it failed, where it had read that much."""
    known: dict = {}
    try:
        return decode(data, known)
    except ValueError as e:
        prefix = what(known)
        if prefix:
            raise ValueError(f"{prefix}: {e}") from None
        raise


def _legacy_attr(body: bytes, known: dict) -> tuple[str, Attr]:
    name, doc = "", ""
    scalar: tuple[str, object] | None = None
    lists: dict[int, list] = {}
    for num, wire, value in fields(body):
        if num == 1:
            name = known["name"] = _text(num, wire, value, "attribute name")
        elif num == 2:
            _want(num, wire, value, (_VARINT,), "attribute type")
        elif num == 3:
            doc = _text(num, wire, value, "attribute doc_string")
        elif num == 4:
            scalar = ("bool_val", bool(_want(num, wire, value, (_VARINT,), "bool value")))
        elif num == 5:
            scalar = ("float_val", struct.unpack("<f", _want(num, wire, value, (_I32,), "float value"))[0])
        elif num == 6:
            scalar = ("uint64_val", _want(num, wire, value, (_VARINT,), "uint64 value"))
        elif num == 7:
            scalar = ("int64_val", _signed(_want(num, wire, value, (_VARINT,), "int64 value")))
        elif num == 8:
            scalar = ("string_val", _text(num, wire, value, "string value"))
        elif num in (9, 11, 12):
            lists.setdefault(num, []).extend(_ints(wire, value, num, "integer list"))
        elif num == 10:
            lists.setdefault(num, []).extend(_floats(wire, value, num, "float list"))
        elif num == 13:
            lists.setdefault(num, []).append(_text(num, wire, value, "string list"))
    if scalar is None and lists:
        num, values = next(iter(lists.items()))
        kind = {9: "bool_list", 10: "float_list", 11: "uint64_list", 12: "int64_list", 13: "string_list"}[num]
        values = [bool(v) for v in values] if num == 9 else [_signed(v) for v in values] if num == 12 else values
        scalar = (kind, tuple(values))
    kind, value = scalar if scalar is not None else (None, None)
    return name, Attr(kind, value, doc)


def legacy_node(msg: bytes) -> Node:
    """Today's Node for one legacy node message (see the module docstring for the mapping).
    ValueError, naming the node where its id came first, for a message that does not decode."""
    return _named(_legacy_node, msg, lambda k: f"node {k['id']} ({k.get('name', '')!r})" if "id" in k else None)


def _legacy_node(msg: bytes, known: dict) -> Node:
    nid, name, ntype, parents = 0, "", NodeType.INVALID_NODE, []
    strings: dict[int, str] = {}
    attrs: dict[str, Attr] = {}
    for num, wire, value in fields(msg):
        if num == 1:
            nid = known["id"] = _want(num, wire, value, (_VARINT,), "id")
        elif num == 2:
            name = known["name"] = _text(num, wire, value, "name")
        elif num == 3:
            ntype = _node_type(_want(num, wire, value, (_VARINT,), "type"))
        elif num == 4:
            parents.extend(_ints(wire, value, num, "parent"))
        elif 5 <= num <= 10:
            strings[num] = _text(num, wire, value, "input/output text")
        elif num == 11:
            key, attr = legacy_attr(_want(num, wire, value, (_LEN,), "attribute"))
            attrs[key] = attr
    duration, attrs = _contract(ntype, attrs)
    io = lambda a, b, c: IOInfo(strings.get(a, ""), strings.get(b, ""), strings.get(c, "")) \
        if {a, b, c} & strings.keys() else None  # noqa: E731
    return Node(nid, name, ntype, ctrl_deps=tuple(parents), duration_micros=duration,
                inputs=io(5, 6, 7), outputs=io(8, 9, 10), attrs=attrs)


def _node_type(value: int) -> NodeType:
    try:
        return NodeType(value)
    except ValueError:
        raise ValueError(f"type {value} is no node type (0..{int(max(NodeType))})") from None


def _contract(ntype: NodeType, attrs: dict[str, Attr]) -> tuple[int, dict[str, Attr]]:
    """(duration in µs, attributes under today's contract names and kinds)."""
    out: dict[str, Attr] = {}
    duration = 0
    for name, a in attrs.items():
        if name == "runtime" and isinstance(a.value, int) and not isinstance(a.value, bool):
            duration = max(a.value, 0)
            continue
        name = _RENAMES.get(name, name) if ntype.is_comm else name
        if name in CONTRACT and a.kind is not None and not a.kind.endswith("_list"):
            a = _contract_attr(name, a)
            if name == "comm_type":  # the legacy enum's number, today's
                a = a._replace(value=int(LEGACY_COMM_TYPES.get(a.value, a.value)))
        out[name] = a
    if ntype.is_comm:
        out.setdefault("is_cpu_op", make_attr("is_cpu_op", False))
        if ntype is not NodeType.COMM_COLL_NODE:
            out.setdefault("comm_tag", make_attr("comm_tag", 0))
    elif ntype is NodeType.COMP_NODE:
        out.setdefault("is_cpu_op", make_attr("is_cpu_op", False))
    return duration, out


def _contract_attr(name: str, a: Attr) -> Attr:
    """A contract attribute in its contract kind, where the legacy value means one: a number for
    a number (an integral float, a decimal string: the generator wrote either), text for text (a
    group number as its decimal name). ValueError naming the attribute for any other value: a
    size, rank or type that does not fit is no guess to make."""
    kind, value = CONTRACT[name], a.value
    got = _contract_value(kind, value)
    if got is None:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(f"attribute {name!r}: {a.kind} {shown} is no {kind}")
    return Attr(kind, got, a.doc)


def _contract_value(kind: str, value):
    """`value` in contract kind `kind`, None where it has no such meaning."""
    if kind == "string_val":
        return value if type(value) is str else str(value) if type(value) is int else None
    if kind == "bool_val":
        return bool(value) if type(value) in (bool, int) else None
    if kind.endswith("_list"):
        return None  # a scalar where the contract has a list (involved_dim)
    if type(value) is float and value.is_integer():
        value = int(value)
    elif type(value) is str and _DECIMAL.fullmatch(value):
        value = int(value)
    elif isinstance(value, int):  # a bool, or an enum (comm_type): its number
        value = int(value)
    lo, hi = _RANGES[kind]
    return value if type(value) is int and lo <= value <= hi else None


# --------------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------------

def sniff(path: str | Path, limit: int = 64, *, strict: bool = False) -> bool:
    """Whether a file is a legacy Chakra trace: one of its first `limit` node messages has the
    legacy layout. Framing errors are left to the reader that follows, or with `strict` raised
    where they come before any legacy message, as is the first message that is no protobuf
    message at all (a file cut inside its first node, or damaged there, is no trace of today's
    format either: saying so would send the user the wrong way)."""
    bad: TraceReadError | None = None
    with open_binary(path) as stream:
        try:
            for k, (offset, msg) in enumerate(iter_frames(stream, path)):
                if k >= limit:
                    break
                if k == 0 and legacy_metadata(msg) or is_legacy_node(msg):
                    return True
                if strict and bad is None:
                    bad = _undecodable(path, offset, msg)
        except TraceReadError:
            if strict:
                raise
            return False
    if bad is not None:
        raise bad
    return False


def _undecodable(path: str | Path, offset: int, msg: bytes) -> TraceReadError | None:
    """The error for a message whose fields do not decode at all (None if they do)."""
    try:
        fields(msg)
    except ValueError as e:
        return TraceReadError(path, offset, f"message does not decode: {e}")
    return None
