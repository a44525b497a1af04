"""The direct encoder writes exactly the bytes protobuf itself would (so files stay identical)."""

from __future__ import annotations

from hypothesis import given, settings

from chakra_tools.core.etio import encode_node, node_to_pb
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
