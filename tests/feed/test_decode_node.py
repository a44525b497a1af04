"""The feeder's compiled decode (`decode_node` in core/_hotloops.c) against its reference
(protobuf + `feed.info.node_entry`): for every node it reads, the same id, dependencies and
`NodeInfo`, value for value and type for type; every node it cannot read exactly it leaves to the
reference (None). On the shared fixtures, on generated nodes with every attribute kind under the
contract's names, on hand-made wire forms (unpacked ids, repeated fields, legacy and unknown
fields) and on damaged messages; and the feeder hands out the same thing either way."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from chakra_tools.core import hotloops
from chakra_tools.core.encoder import encode_node
from chakra_tools.core.etwrite import write_trace
from chakra_tools.core.framing import iter_frames, looks_like_metadata, open_binary
from chakra_tools.core.errors import TraceReadError
from chakra_tools.core.model import LIST_KINDS, SCALAR_KINDS, Attr, Node, NodeType
from chakra_tools.core.schema import et_def_pb2 as pb
from chakra_tools.feed import DeadlockError, ETFeeder
from chakra_tools.feed.info import _INT_SLOT, NodeInfo, node_entry
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet


compiled = pytest.mark.skipif(hotloops.COMPILED is None, reason="core/_hotloops.c not built")
pytestmark = compiled

RESOLVE = [(True, True), (True, False), (False, True)]
CONTRACT_NAMES = ["is_cpu_op", *_INT_SLOT, "pg_name", "involved_dim"]


def typed(value):
    """A value with the type of every part spelled out: True == 1, but not for the feeder's users."""
    if isinstance(value, tuple):
        return (type(value).__name__, tuple(typed(v) for v in value))
    return (type(value).__name__, value)


def reference(msg: bytes, use_data: bool, use_ctrl: bool):
    """What the feeder's reference decode keeps of `msg`, or None where it raises (or would
    check the node as a legacy one): the cases the compiled decode must leave to it."""
    try:
        m = pb.Node.FromString(msg)
    except DecodeError:
        return None
    if len(UnknownFieldSet(m)) or not 0 <= m.type <= max(NodeType):
        return None
    return node_entry(m, use_data, use_ctrl)


def compiled_decode(msg: bytes, use_data: bool, use_ctrl: bool):
    return hotloops.COMPILED.decode_node(msg, use_data, use_ctrl, NodeInfo, int(max(NodeType)),
                                         int(NodeType.COMM_COLL_NODE))


def check(msg: bytes) -> bool:
    """Compiled == reference wherever the compiled decode answers; True if it answered."""
    answered = False
    for use_data, use_ctrl in RESOLVE:
        got = compiled_decode(msg, use_data, use_ctrl)
        if got is None:
            continue
        answered = True
        ref = reference(msg, use_data, use_ctrl)
        assert ref is not None, f"compiled read a node the reference refuses: {msg!r}"
        assert type(got[2]) is NodeInfo
        assert typed(got) == typed(ref)
    return answered


def node_messages(path: Path) -> list[bytes]:
    with open_binary(path) as s:
        frames = [msg for _, msg in iter_frames(s, str(path))]
    return frames[1:] if frames and looks_like_metadata(frames[0]) else frames


def test_fixtures_decode_as_the_reference_reads_them(shared_fixtures, unpack):
    files = sorted(shared_fixtures.rglob("*.et")) + sorted(unpack("chakra/feeder_tests_trace.tar.gz").rglob("*.et"))
    assert files
    read = 0
    for path in files:
        for msg in node_messages(path):
            read += check(msg)
    assert read > 100  # the compiled decode reads real traces, not only leaves them to the reference


def generated_gpt(folder: Path) -> list[Path]:
    """The generator's 8-rank GPT (examples/workloads/gpt_8rank.yml): every kind of node."""
    from chakra_tools.frontends.generate import TransformerConfig, generate

    rs = generate(TransformerConfig.from_file(Path(__file__).parents[2] / "examples" / "workloads" / "gpt_8rank.yml"))
    rs.write(folder / "gpt", "w")
    return sorted((folder / "gpt").glob("*.et"))


def test_generated_traces_decode_as_the_reference_reads_them(tmp_path):
    msgs = [m for p in generated_gpt(tmp_path) for m in node_messages(p)]
    assert len(msgs) > 1000 and all(check(m) for m in msgs)


# -- every attribute kind under every contract name ------------------------------------------------
ALL_KINDS = (*SCALAR_KINDS, *LIST_KINDS)
I32, U32 = st.integers(-(1 << 31), (1 << 31) - 1), st.integers(0, (1 << 32) - 1)
I64, U64 = st.integers(-(1 << 63), (1 << 63) - 1), st.integers(0, (1 << 64) - 1)
SCALAR = {"double_val": st.floats(allow_nan=False), "float_val": st.floats(width=32, allow_nan=False),
          "int32_val": I32, "int64_val": I64, "uint32_val": U32, "uint64_val": U64, "sint32_val": I32,
          "sint64_val": I64, "fixed32_val": U32, "fixed64_val": U64, "sfixed32_val": I32, "sfixed64_val": I64,
          "bool_val": st.booleans(), "string_val": st.text(max_size=6), "bytes_val": st.binary(max_size=6)}


def attr_values(kind: str):
    if kind.endswith("_list"):
        return st.lists(SCALAR[kind[: -len("_list")] + "_val"], max_size=4).map(tuple)
    return SCALAR[kind]


@st.composite
def contract_nodes(draw) -> Node:
    names = draw(st.lists(st.sampled_from(CONTRACT_NAMES + ["other", "ünïcode"]), max_size=6, unique=True))
    attrs = {}
    for name in names:
        kind = draw(st.sampled_from((None, *ALL_KINDS)))
        attrs[name] = Attr(None, None, "") if kind is None else Attr(kind, draw(attr_values(kind)), "")
    ids = st.lists(st.integers(0, (1 << 64) - 1) | st.integers(0, 8), max_size=6).map(tuple)
    return Node(draw(st.integers(0, 8) | st.integers(0, (1 << 64) - 1)), draw(st.text(max_size=8)),
                draw(st.sampled_from(list(NodeType))),
                draw(ids), draw(ids), draw(SCALAR["uint64_val"]), draw(SCALAR["uint64_val"]), attrs)


@settings(max_examples=400, deadline=None)
@given(contract_nodes())
def test_every_attribute_kind_decodes_as_the_reference_reads_it(node):
    assert check(encode_node(node))


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("name", CONTRACT_NAMES)
def test_each_contract_name_with_each_kind(name, kind):
    example = {"string_val": "pg", "bytes_val": b"\x80", "bool_val": True, "double_val": 2.5, "float_val": 0.5}
    scalar = kind[:-5] + "_val" if kind.endswith("_list") else kind
    value = example.get(scalar, -7 if scalar.startswith(("int", "sint", "sfixed")) else 7)
    if kind.endswith("_list"):
        value = (value, value)
    node = Node(3, "n", NodeType.COMM_COLL_NODE, (1, 2, 1), (2, 4), 5, 6, {name: Attr(kind, value, "")})
    assert check(encode_node(node))


# -- wire forms our writer does not produce ----------------------------------------------------------
def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def vi(field: int, v: int) -> bytes:
    return varint(field << 3) + varint(v)


def ld(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def attr_msg(name: str, *values: bytes) -> bytes:
    return ld(10, ld(1, name.encode()) + b"".join(values))


@pytest.mark.parametrize("msg", [
    vi(1, 5) + vi(5, 1) + vi(5, 2) + vi(4, 1) + ld(5, varint(3) + varint(2)),  # unpacked and packed ids, repeated
    vi(1, 5) + vi(1, 6) + ld(2, b"a") + ld(2, b"b") + vi(3, 4) + vi(3, 7),  # scalars given twice: the last counts
    vi(1, 1) + attr_msg("num_ops", vi(9, 3), vi(7, (1 << 64) - 1)),  # the oneof given twice: the last kind
    vi(1, 1) + attr_msg("is_cpu_op", vi(27, 1)) + attr_msg("is_cpu_op", vi(9, 0)),  # a later non-bool is ignored
    vi(1, 1) + attr_msg("comm_src", vi(7, (1 << 64) - 1)) + attr_msg("comm_src", vi(13, 9)),  # a later one counts
    vi(1, 1) + attr_msg("involved_dim", ld(28, vi(1, 1) + vi(1, 0) + ld(1, b"\x01\x02\x00"))),  # bools both ways
    vi(1, 1) + attr_msg("involved_dim", ld(28, b"")),  # an empty list is a list
    vi(1, 1) + ld(10, ld(1, b"pg_name") + ld(29, "grüppe".encode()) + ld(99, b"x")),  # unknown attr field
    vi(1, 1) + ld(8, ld(1, b"v") + ld(2, b"[1]") + ld(3, b"t")) + ld(9, b""),  # inputs and outputs
    vi(1, 1) + vi(3, (1 << 64) - 1),  # type -1
    vi(1, 1) + vi(3, 8),  # a type beyond the enum
    vi(1, 1) + vi(11, 4),  # a field today's Node lacks (a legacy node's attributes live in 11)
    vi(1, 1) + varint(2 << 3 | 0) + varint(4),  # a known field with another wire type
    vi(1, 1) + ld(2, b"\xff"),  # a name that is not UTF-8
    vi(1, 1) + attr_msg("x", ld(30, ld(1, b"\xc3"))),  # a string list value that is not UTF-8
    vi(1, 1) + ld(5, b"\x80"),  # a truncated packed id
    vi(1, 1) + attr_msg("num_ops", ld(10, ld(1, b"\x80"))),  # a truncated packed list value
    vi(1, 1) + attr_msg("x", ld(20, ld(1, b"abc"))),  # packed fixed32 of 3 bytes
    vi(1, 1) + ld(5, b"".join(varint(i) for i in range(70))),  # more deps than the compiled decode keeps
    vi(1, 1) + attr_msg("involved_dim", ld(28, vi(1, 1)), ld(28, vi(1, 0))),  # a list given twice (merged)
    vi(1, 1) + b"\x0b\x0c",  # a group
    vi(1, 1) + ld(2, b"abc")[:-1],  # truncated
])
def test_hand_made_wire_forms(msg):
    check(msg)


@settings(max_examples=300, deadline=None)
@given(contract_nodes(), st.data())
def test_damaged_messages_are_read_as_the_reference_reads_them_or_left_to_it(node, data):
    msg = bytearray(vi(1, 1) + encode_node(node))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(msg) - 1))
        msg[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(msg)))
    check(bytes(msg[:cut]))


# -- the feeder, either way --------------------------------------------------------------------------
def handed_out(path, **kw):
    """Every node the feeder hands out with what it says of it, its findings, and how it ended."""
    f = ETFeeder(path, eager_info=True, **kw)
    out = []
    try:
        for nid in f.drain():
            out.append((nid, f.deps(nid), typed(f.info(nid))))
        end = "done"
    except DeadlockError as e:  # a real trace with a cycle (feeder_tests_trace)
        end = str(e)
    return out, [(d.code, d.node_id, d.message) for d in f.diagnostics], end


def test_the_feeder_hands_out_the_same_with_either_decode(shared_fixtures, unpack, tmp_path):
    files = [*generated_gpt(tmp_path)[:2], *sorted(shared_fixtures.rglob("*.et")),
             *sorted(unpack("chakra/feeder_tests_trace.tar.gz").rglob("*.et"))]
    for path in files:
        for resolve in (("data", "ctrl"), ("ctrl",)):
            picked = handed_out(path, resolve=resolve, window=64)
            with hotloops.python_twins():
                twin = handed_out(path, resolve=resolve, window=64)
            assert picked == twin, path


@settings(max_examples=300, deadline=None)
@given(st.lists(contract_nodes(), max_size=16))
def test_the_feeder_hands_out_generated_nodes_the_same_with_either_decode(tmp_path_factory, nodes):
    """Small ids, repeated ones, forward, dangling and self dependencies, ids past the bitmap."""
    nodes = [n for n in nodes if encode_node(n)]  # the writer refuses an empty one; ids may repeat
    path = tmp_path_factory.mktemp("g") / "g.0.et"
    write_trace(path, nodes)
    picked = handed_out(path, window=4)
    with hotloops.python_twins():
        assert handed_out(path, window=4) == picked


@pytest.mark.parametrize("read", [17, 130, 1000])
def test_frames_cut_by_the_read_buffer_are_loaded_the_same(tmp_path, monkeypatch, read):
    """load_frames stops at a frame the buffer cuts (and at one it leaves to the reference, and at
    the window's budget); the feeder's FrameReader takes that one: the same nodes either way."""
    from chakra_tools.feed import feeder

    nodes = [Node(i, f"n{i}" * (i % 40), NodeType.COMP_NODE, (i - 1,) if i % 3 and i > 1 else ())
             for i in range(1, 120)]
    nodes.insert(50, nodes[10])  # a repeated id in mid-buffer: the reference's, as a duplicate
    path = tmp_path / "c.0.et"
    write_trace(path, nodes)
    whole = handed_out(path, window=8)
    with hotloops.python_twins():
        assert handed_out(path, window=8) == whole
    monkeypatch.setattr(feeder, "_read_size", lambda stream: read)
    assert handed_out(path, window=8) == whole
    assert [d[0] for d in whole[1]] == ["duplicate-id"]


def test_load_frames_stops_at_the_budget_and_at_a_cut_frame(tmp_path):
    path = tmp_path / "b.0.et"
    write_trace(path, [Node(i, "x", NodeType.COMP_NODE) for i in range(10)])
    f = ETFeeder(path, window=3, eager_info=True)
    r = f._frames
    assert f.nodes_read == 3 and r is not None
    if hotloops.COMPILED is None:
        pytest.skip("the compiled extension is not built")
    pos, n = hotloops.load_frames(f._window, r.buf, r.pos, r.base, 2)
    assert n == 2 and sorted(f._loaded) == [0, 1, 2, 3, 4]
    with open_binary(path) as s:
        offsets = [off for off, _ in iter_frames(s, str(path))]  # the metadata, then nodes 0..9
    assert [f._loaded[i].raw for i in (3, 4)] == offsets[4:6] and pos == offsets[6]
    cut = r.buf[:pos + 2]  # the next frame cut short: left alone
    assert hotloops.load_frames(f._window, cut, pos, r.base, 5) == (pos, 0)


def test_a_legacy_node_is_refused_either_way(tmp_path):
    legacy = ld(2, b"n") + vi(1, 1) + ld(11, ld(1, b"comm_type") + vi(2, 4))
    path = tmp_path / "l.0.et"
    path.write_bytes(varint(len(legacy)) + legacy)
    errors = []
    for twins in (False, True):
        with hotloops.python_twins() if twins else nullcontext():
            with pytest.raises(TraceReadError) as e:
                list(ETFeeder(path).drain())
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "legacy" in errors[0]


@pytest.mark.parametrize("bad", [
    ld(2, b"\xff") + vi(1, 9),  # a name that is not UTF-8
    vi(1, 9) + vi(3, 99),  # an unknown node type
    vi(1, 9) + ld(5, b"\x80"),  # a truncated dependency list
])
def test_a_bad_node_midway_is_reported_the_same_either_way(tmp_path, bad):
    good = [encode_node(Node(i, f"n{i}", NodeType.COMP_NODE, (i - 1,) if i else ())) for i in range(20)]
    path = tmp_path / "b.0.et"
    path.write_bytes(b"".join(varint(len(m)) + m for m in good + [bad] + good[:1]))
    errors = []
    for twins in (False, True):
        with hotloops.python_twins() if twins else nullcontext():
            with pytest.raises(TraceReadError) as e:
                list(ETFeeder(path, window=4).drain())
        errors.append(str(e.value))
    assert errors[0] == errors[1]
