"""Hypothesis strategies for Chakra nodes and graphs, and an independent framing oracle.

`frames()` re-implements the length-delimited framing in the plainest way (whole file in memory,
no buffering) so the property tests can compare the streaming reader against something that does
not share its code.
"""

from __future__ import annotations

from hypothesis import strategies as st

from chakra_tools.core.model import LIST_KINDS, SCALAR_KINDS, Attr, IOInfo, Node, NodeType

U64 = st.integers(0, (1 << 64) - 1)
I32 = st.integers(-(1 << 31), (1 << 31) - 1)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
U32 = st.integers(0, (1 << 32) - 1)
F32 = st.floats(width=32, allow_nan=False)  # NaN != NaN would make equality meaningless
F64 = st.floats(allow_nan=False)
TEXT = st.text(max_size=12)

#: one value strategy per scalar oneof kind, matching the protobuf field's range exactly
SCALAR = {
    "double_val": F64, "float_val": F32,
    "int32_val": I32, "int64_val": I64, "uint32_val": U32, "uint64_val": U64,
    "sint32_val": I32, "sint64_val": I64, "fixed32_val": U32, "fixed64_val": U64,
    "sfixed32_val": I32, "sfixed64_val": I64,
    "bool_val": st.booleans(), "string_val": TEXT, "bytes_val": st.binary(max_size=12),
}
assert set(SCALAR) == set(SCALAR_KINDS)


def attr_values(kind: str):
    if kind.endswith("_list"):
        return st.lists(SCALAR[kind[: -len("_list")] + "_val"], max_size=4).map(tuple)
    return SCALAR[kind]


@st.composite
def attrs(draw, max_size: int = 5) -> dict[str, Attr]:
    names = draw(st.lists(st.text(min_size=1, max_size=8), max_size=max_size, unique=True))
    out = {}
    for name in names:
        kind = draw(st.sampled_from((None, *SCALAR_KINDS, *LIST_KINDS)))
        doc = draw(st.sampled_from(("", "a doc string")))
        out[name] = Attr(None, None, doc) if kind is None else Attr(kind, draw(attr_values(kind)), doc)
    return out


io_infos = st.none() | st.builds(IOInfo, TEXT, TEXT, TEXT)


def encodes_to_something(n: Node) -> bool:
    """False for the one node our writer (rightly) refuses: every field at its default."""
    return bool(n.id or n.name or n.type or n.data_deps or n.ctrl_deps or n.start_time_micros
                or n.duration_micros or n.attrs or n.inputs is not None or n.outputs is not None)


@st.composite
def nodes(draw, node_id=None, earlier=()) -> Node:
    nid = draw(U64) if node_id is None else node_id
    deps = st.lists(st.sampled_from(earlier) if earlier else U64, max_size=3).map(tuple)
    return Node(
        nid, draw(TEXT), draw(st.sampled_from(list(NodeType))), draw(deps), draw(deps),
        draw(U64), draw(U64), draw(attrs()), draw(io_infos), draw(io_infos),
    )


@st.composite
def node_lists(draw, max_size: int = 12) -> list[Node]:
    """Nodes with unique ids; deps mostly on earlier nodes, sometimes on absent or later ones."""
    ids = draw(st.lists(U64, min_size=0, max_size=max_size, unique=True))
    out = []
    for i, nid in enumerate(ids):
        earlier = tuple(ids[:i]) or (nid + 1 if nid < (1 << 64) - 1 else 0,)
        n = draw(nodes(node_id=nid, earlier=earlier))
        if encodes_to_something(n):
            out.append(n)
    return out


def split_frames(data: bytes) -> tuple[list[tuple[int, bytes]], int | None]:
    """(offset, body) of each whole length-delimited message, and the offset of the message
    where the framing breaks (a length prefix running past the end or over 10 bytes, a zero
    length), or None if the whole file frames cleanly."""
    out, pos = [], 0
    while pos < len(data):
        start, length, shift = pos, 0, 0
        while True:
            if pos >= len(data) or shift > 63:
                return out, start
            b = data[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        if length == 0 or pos + length > len(data):
            return out, start
        out.append((start, data[pos:pos + length]))
        pos += length
    return out, None


def frames(data: bytes) -> list[tuple[int, bytes]] | None:
    """The whole file's frames, or None if its framing is broken somewhere."""
    out, broken = split_frames(data)
    return None if broken is not None else out


# -- a neutral view of a node, to compare our records with the reference's protobuf messages -------

def ref_view(m) -> dict:
    """A protobuf Node (ours or mlc-chakra's) as plain data, read with protobuf's API only."""
    def io(field):
        if not m.HasField(field):
            return None
        v = getattr(m, field)
        return (v.values, v.shapes, v.types)

    attrs = {}
    for a in m.attr:
        kind = a.WhichOneof("value")
        value = None if kind is None else getattr(a, kind)
        if kind is not None and kind.endswith("_list"):
            value = tuple(value.values)
        attrs[a.name] = (kind, value, a.doc_string)
    return dict(id=m.id, name=m.name, type=int(m.type), data=tuple(m.data_deps), ctrl=tuple(m.ctrl_deps),
                start=m.start_time_micros, dur=m.duration_micros, inputs=io("inputs"), outputs=io("outputs"),
                attrs=attrs)


def our_view(n) -> dict:
    """Our Node as the same plain data."""
    def io(v):
        return None if v is None else (v.values, v.shapes, v.types)

    return dict(id=n.id, name=n.name, type=int(n.type), data=n.data_deps, ctrl=n.ctrl_deps,
                start=n.start_time_micros, dur=n.duration_micros, inputs=io(n.inputs), outputs=io(n.outputs),
                attrs={k: (a.kind, a.value, a.doc) for k, a in n.attrs.items()})


def reference_read(path):
    """(GlobalMetadata, [Node]) read by mlc-chakra's own Python reader (protolib)."""
    from chakra.schema.protobuf import et_def_pb2 as ref
    from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

    f = openFileRd(str(path))
    try:
        meta = ref.GlobalMetadata()
        decodeMessage(f, meta)
        out = []
        while True:
            m = ref.Node()
            if not decodeMessage(f, m):
                return meta, out
            out.append(m)
    finally:
        f.close()
