"""The direct encoder writes exactly the bytes protobuf itself would (so files stay identical)."""

from __future__ import annotations

from hypothesis import given, settings

from chakra_tools.core.encoder import encode_node, node_to_pb
from chakra_tools.core.model import Attr, IOInfo, Node, NodeType

from et_strategies import nodes


@settings(max_examples=300, deadline=None)
@given(nodes())
def test_direct_encoding_equals_protobuf_serialisation(node):
    assert encode_node(node) == node_to_pb(node).SerializeToString()


def test_large_ids_deps_and_empty_io():
    n = Node(2**64 - 1, "x" * 300, NodeType.COMM_RECV_NODE, (0, 127, 128, 16383, 16384, 2**63),
             (5,), 2**40, 1, {"a": Attr("int64_val", -1), "b": Attr("bool_list", ())}, IOInfo(), None)
    assert encode_node(n) == node_to_pb(n).SerializeToString()


def test_signed_zero_is_not_confused_by_the_attribute_cache():
    for v in (0.0, -0.0, 0.0):
        n = Node(1, "z", NodeType.COMP_NODE, attrs={"f": Attr("double_val", v), "g": Attr("float_list", (v,))})
        assert encode_node(n) == node_to_pb(n).SerializeToString()


# -- the compiled encoder (core/_hotloops.c): the same frames as the Python encoder, or a punt to it -----

import os
import shutil

import pytest
from hypothesis import strategies as st

from chakra_tools.core import hotloops

from chakra_tools.core import etio, etwrite
from chakra_tools.core.errors import TraceWriteError
from chakra_tools.core.etio import iter_nodes

from et_strategies import node_lists

native = pytest.mark.skipif(hotloops.COMPILED is None, reason="compiled encoder not built")


def test_the_compiled_encoder_is_built_where_a_compiler_is():
    if os.environ.get("CHAKRA_TOOLS_PURE_PYTHON") or not shutil.which("cc"):
        pytest.skip("pure Python asked for, or no C compiler")
    assert hotloops.COMPILED is not None, "chakra_tools/core/_hotloops.c did not build (pip install -e .)"


def python_frames(nodes) -> bytes:
    return b"".join(etio._varint_bytes(len(d)) + d for d in map(encode_node, nodes))


def native_frames(nodes) -> bytes:
    """What TraceWriter.write_all emits: compiled chunks, punted nodes by Python."""
    out, i = [], 0
    while i < len(nodes):
        data, j = hotloops.COMPILED.encode_frames(nodes, i)
        if j == i:
            data, j = python_frames(nodes[i:i + 1]), i + 1
        out.append(data)
        i = j
    return b"".join(out)


@native
@settings(max_examples=400, deadline=None)
@given(node_lists())
def test_compiled_frames_equal_python_frames(nodes):
    assert native_frames(nodes) == python_frames(nodes)


COMMON = st.builds(
    lambda i, name, t, deps, start, dur, n_ops, cpu, pg: Node(
        i, name, t, deps, (), start, dur,
        {"num_ops": Attr("int64_val", n_ops), "is_cpu_op": Attr("bool_val", cpu),
         "pg_name": Attr("string_val", pg), "x": Attr("double_val", 0.5)}),
    st.integers(1, 1 << 40), st.text(max_size=40), st.sampled_from(list(NodeType)),
    st.lists(st.integers(0, 1 << 40), max_size=5).map(tuple), st.integers(0, 1 << 62),
    st.integers(0, 1 << 40), st.integers(-(1 << 63), (1 << 63) - 1), st.booleans(), st.text(max_size=5))


@native
@settings(max_examples=300, deadline=None)
@given(st.lists(COMMON, max_size=20))
def test_common_nodes_are_encoded_in_c(nodes):
    """The kinds a conversion writes never go back to Python (that is the point of the C code)."""
    data, stop = hotloops.COMPILED.encode_frames(nodes, 0)
    assert stop == len(nodes)
    assert data == python_frames(nodes)


@native
def test_chunks_of_a_large_list_join_up(tmp_path):
    nodes = [Node(i, "op" * 60, NodeType.COMP_NODE, (i - 1,) if i > 1 else (), (), i * 10, 3,
                  {"is_cpu_op": Attr("bool_val", True)}) for i in range(1, 60_001)]
    first, stop = hotloops.COMPILED.encode_frames(nodes, 0)
    assert 0 < stop < len(nodes)  # over 4 MiB: it stopped for a chunk boundary
    path = tmp_path / "t.0.et"
    assert etwrite.write_trace(path, nodes) == len(nodes)
    assert [n.id for n in iter_nodes(path)] == list(range(1, 60_001))
    assert path.read_bytes().endswith(python_frames(nodes[-100:]))


BAD = [
    Node(-1, "negative id", NodeType.COMP_NODE),
    Node(3, "bool out of range", NodeType.COMP_NODE, attrs={"b": Attr("bool_val", 2)}),
    Node(4, "int32 out of range", NodeType.COMP_NODE, attrs={"i": Attr("int32_val", 1 << 31)}),
    Node(5, "\udcff lone surrogate", NodeType.COMP_NODE),
    Node(6, "a float start", NodeType.COMP_NODE, start_time_micros=1.5),
    Node(0, "", NodeType.INVALID_NODE),  # nothing to encode: reads as end of file
]


@pytest.mark.parametrize("bad", BAD, ids=lambda n: n.name or "empty")
def test_a_bad_node_among_good_ones_names_itself_and_leaves_no_file(tmp_path, bad):
    good = [Node(1, "a", NodeType.COMP_NODE), Node(2, "b", NodeType.COMP_NODE, (1,))]
    path = tmp_path / "t.0.et"
    with pytest.raises(TraceWriteError, match=f"node {bad.id}"):
        etwrite.write_trace(path, good + [bad] + good)
    assert list(tmp_path.iterdir()) == []
