"""Node records -> protobuf bytes: the `.et` writer's encoder, in Python.

`node_to_pb` builds protobuf's own message (the reference); `encode_node` writes the same bytes
directly, several times faster; `encode_frames` frames a run of nodes for the writer. The last is
the Python twin of the compiled `encode_frames` in `_hotloops.c`: `core.hotloops` picks one of
the two, and tests compare them byte for byte.
"""

from __future__ import annotations

from typing import Sequence

from .model import Attr, IOInfo, Node, NodeType
from .schema import et_def_pb2 as pb

#: a run of frames stops after about this many bytes (the compiled encoder's chunk, too)
CHUNK_BYTES = 4 << 20
#: what can go wrong encoding a node that is not one (TraceWriter.write words the error)
ENCODE_ERRORS = (ValueError, TypeError, OverflowError, UnicodeError)


def _attr_to_pb(target, name: str, a: Attr) -> None:
    target.name = name
    if a.doc:
        target.doc_string = a.doc
    if a.kind is None:
        return
    if a.kind[-5:] == "_list":
        getattr(target, a.kind).values.extend(a.value)
        if not a.value:  # keep the (empty) list kind: mark the sub-message present
            getattr(target, a.kind).SetInParent()
    else:
        setattr(target, a.kind, a.value)


def node_to_pb(node: Node):
    """The protobuf `Node` for our record; attributes sorted by name for deterministic bytes."""
    m = pb.Node(id=node.id, name=node.name, type=int(node.type),
                start_time_micros=node.start_time_micros, duration_micros=node.duration_micros)
    if node.ctrl_deps:
        m.ctrl_deps.extend(node.ctrl_deps)
    if node.data_deps:
        m.data_deps.extend(node.data_deps)
    for field in ("inputs", "outputs"):
        v = getattr(node, field)
        if v is not None:
            sub = getattr(m, field)
            sub.SetInParent()
            sub.values, sub.shapes, sub.types = v.values, v.shapes, v.types
    for name in sorted(node.attrs):
        _attr_to_pb(m.attr.add(), name, node.attrs[name])
    return m


# -- a direct encoder: the same bytes as node_to_pb(node).SerializeToString(), 3x faster ----------

_SMALL_VARINTS = [bytes([n]) if n < 0x80 else bytes([(n & 0x7F) | 0x80, n >> 7]) for n in range(1 << 14)]
#: the 14 low bits of a larger number as two continuation bytes
_CONTINUED_14 = [bytes([(n & 0x7F) | 0x80, (n >> 7) | 0x80]) for n in range(1 << 14)]
_ATTR_CACHE: dict[tuple, bytes] = {}
_NAME_CACHE: dict[str, bytes] = {}  # op names repeat: "aten::mm" is written thousands of times
_ATTR_CACHE_LIMIT = 1 << 16
_FLOAT_KINDS = frozenset(("float_val", "double_val", "float_list", "double_list"))


def _uvarint(n: int) -> bytes:
    """Varint bytes by table, 14 bits at a time (time stamps in µs are 7-8 byte varints)."""
    if 0 <= n < 16384:  # a negative n would index the table from its end: silently wrong bytes
        return _SMALL_VARINTS[n]
    if 16384 <= n < 1 << 42:  # ids, sizes, durations and time stamps: no loop
        if n < 1 << 28:
            return _CONTINUED_14[n & 0x3FFF] + _SMALL_VARINTS[n >> 14]
        return _CONTINUED_14[n & 0x3FFF] + _CONTINUED_14[(n >> 14) & 0x3FFF] + _SMALL_VARINTS[n >> 28]
    if n < 0 or n >> 64:
        raise ValueError(f"{n} is out of range for a uint64 field")
    head = b""
    while n >= 16384:
        head += _CONTINUED_14[n & 0x3FFF]
        n >>= 14
    return head + _SMALL_VARINTS[n]


def _len_field(tag: bytes, payload: bytes) -> bytes:
    return tag + _uvarint(len(payload)) + payload


def _io_bytes(tag: bytes, v: IOInfo) -> bytes:
    body = b"".join(_len_field(t, x.encode()) for t, x in zip((b"\x0a", b"\x12", b"\x1a"), v) if x)
    return _len_field(tag, body)


#: oneof kinds whose value is one varint: the tag of their field in AttributeProto
_VARINT_TAGS = {"int64_val": b"\x48", "int32_val": b"\x38", "uint64_val": b"\x68",
                "uint32_val": b"\x58", "bool_val": b"\xd8\x01"}
#: the values each of those kinds can hold (protobuf raises outside them; so do we)
_VARINT_RANGES = {"int64_val": (-(1 << 63), 1 << 63), "int32_val": (-(1 << 31), 1 << 31),
                  "uint64_val": (0, 1 << 64), "uint32_val": (0, 1 << 32), "bool_val": (0, 2)}
_NAME_FIELDS: dict[str, bytes] = {}  # attribute name -> its encoded field 1
#: (name, Attr) -> the attribute's framed field, for values that repeat (is_cpu_op, comm_type...).
#: Not for floats: 0.0 == -0.0 (one key) but they encode differently. `True == 1` is harmless:
#: the kind is part of the key and decides the encoding.
_FIELD_CACHE: dict[tuple, bytes] = {}


def _attr_field(name: str, a: Attr) -> bytes:
    """One attribute as a framed field 10 of Node. Scalars of one varint (ids, sizes, flags,
    durations: most attributes) and strings are encoded here; the other kinds are serialised by
    protobuf itself and cached, since attributes repeat a lot."""
    kind, value, doc = a
    if not doc:
        tag = _VARINT_TAGS.get(kind)
        if tag is not None and type(value) in (int, bool):
            lo, hi = _VARINT_RANGES[kind]
            if not lo <= value < hi:
                raise ValueError(f"{name}={value} is out of range for {kind}")
            body = _name_field(name) + tag + _uvarint(value if value >= 0 else value + (1 << 64))
            return b"\x52" + _uvarint(len(body)) + body
        if kind == "string_val" and type(value) is str:
            return _len_field(b"\x52", _name_field(name) + _len_field(b"\xea\x01", value.encode()))
    return _cached_attr_field(name, a)


def _repeats(a: Attr) -> bool:
    """Whether a value is worth caching: flags, small numbers (kinds, ranks) and short strings;
    never floats (see _FIELD_CACHE)."""
    v = a.value
    t = type(v)
    return t is bool or (t is int and -1024 < v < 1024) or (t is str and len(v) <= 64)


def _name_field(name: str) -> bytes:
    field = _NAME_FIELDS.get(name)
    if field is None:
        field = _len_field(b"\x0a", name.encode())
        if len(_NAME_FIELDS) < _ATTR_CACHE_LIMIT:
            _NAME_FIELDS[name] = field
    return field


def _cached_attr_field(name: str, a: Attr) -> bytes:
    # floats are not cached: 0.0 == -0.0 (same key) but they encode differently
    key = None if a.kind in _FLOAT_KINDS else (name, a.kind, a.value, a.doc)
    try:
        return _ATTR_CACHE[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable value, or no key
        key = None
    m = pb.AttributeProto()
    _attr_to_pb(m, name, a)
    data = _len_field(b"\x52", m.SerializeToString())
    # only small attributes: the cache outlives every writer, and a large unique value (a model's
    # source text, a blob) would otherwise stay in memory for good, twice (key and bytes)
    if key is not None and len(data) <= 256 and len(_ATTR_CACHE) < _ATTR_CACHE_LIMIT:
        _ATTR_CACHE[key] = data
    return data


def _packed_ids(tag: bytes, ids: tuple[int, ...]) -> bytes:
    """A packed repeated uint64 field; ids below 2**28 (every real trace's) by table."""
    small, cont = _SMALL_VARINTS, _CONTINUED_14
    body = b"".join([small[d] if 0 <= d < 16384 else
                     cont[d & 0x3FFF] + small[d >> 14] if 16384 <= d < 268435456 else _uvarint(d)
                     for d in ids])
    return tag + _uvarint(len(body)) + body


def encode_node(node: Node) -> bytes:
    """The node's protobuf bytes (fields in number order, defaults omitted, attributes sorted):
    the same bytes as `node_to_pb(node).SerializeToString()`, several times faster. The hot
    path of every writer: small numbers go through the varint table inline."""
    nid, name, ntype, data_deps, ctrl_deps, start, duration, attrs, inputs, outputs = node
    uv, small = _uvarint, _SMALL_VARINTS
    parts = []
    if nid:
        parts.append(b"\x08" + (small[nid] if 0 < nid < 16384 else uv(nid)))
    if name:
        field = _NAME_CACHE.get(name)
        if field is None:
            field = _len_field(b"\x12", name.encode())
            if len(_NAME_CACHE) < _ATTR_CACHE_LIMIT:
                _NAME_CACHE[name] = field
        parts.append(field)
    if ntype:
        parts.append(_TYPE_FIELDS.get(ntype) or b"\x18" + uv(int(ntype)))
    if ctrl_deps:
        parts.append(_packed_ids(b"\x22", ctrl_deps))
    if data_deps:
        parts.append(_packed_ids(b"\x2a", data_deps))
    if start:
        parts.append(b"\x30" + uv(start))
    if duration:
        parts.append(b"\x38" + (small[duration] if 0 < duration < 16384 else uv(duration)))
    if inputs is not None:
        parts.append(_io_bytes(b"\x42", inputs))
    if outputs is not None:
        parts.append(_io_bytes(b"\x4a", outputs))
    if attrs:
        cache = _FIELD_CACHE
        for k in sorted(attrs) if len(attrs) > 1 else attrs:
            a = attrs[k]
            try:
                parts.append(cache[k, a])
            except KeyError:
                data = _attr_field(k, a)
                parts.append(data)
                if _repeats(a) and len(cache) < _ATTR_CACHE_LIMIT:
                    cache[k, a] = data
            except TypeError:  # an unhashable value (a list)
                parts.append(_attr_field(k, a))
    return b"".join(parts)


#: field 3 (type) of each node type, encoded once
_TYPE_FIELDS = {t: b"\x18" + _SMALL_VARINTS[int(t)] for t in NodeType if int(t)}


def frame(data: bytes) -> bytes:
    """One length-delimited message: its length as a varint, then the bytes."""
    n = len(data)
    return (_SMALL_VARINTS[n] if n < 16384 else _uvarint(n)) + data


def encode_frames(nodes: Sequence[Node], start: int) -> tuple[bytes, int]:
    """(frames of nodes[start:next], next): encodes until a node cannot be encoded (raises, or
    encodes to nothing, which readers take as end of file) or about 4 MiB are framed, so
    nodes[next] is the first node not encoded; `TraceWriter.write` then raises the error that
    names it. What the compiled twin does, less what it leaves to Python."""
    parts, size, i, end = [], 0, start, len(nodes)
    while i < end and size < CHUNK_BYTES:
        try:
            data = encode_node(nodes[i])
        except ENCODE_ERRORS:
            break
        if not data:
            break
        framed = frame(data)
        parts.append(framed)
        size += len(framed)
        i += 1
    return b"".join(parts), i
