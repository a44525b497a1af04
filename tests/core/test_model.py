"""The node record, its one text form, Diagnostic text, and the graph model on tiny inline traces."""

from __future__ import annotations

import doctest
import importlib

import pytest

from chakra_tools.core.errors import ChakraToolsError, Diagnostic, Diagnostics, InputError, TraceReadError
from chakra_tools.core.graph import Graph, RankSet, find_rank_files
from chakra_tools.core.model import Attr, CommType, Node, NodeType, format_bytes, make_attr, make_attrs

T = NodeType


@pytest.mark.parametrize("module", ["model", "errors", "etio", "graph", "layout", "timings"])
def test_doctests(module):
    mod = importlib.import_module(f"chakra_tools.core.{module}")
    result = doctest.testmod(mod)
    assert result.failed == 0 and (result.attempted > 0 or module == "errors")


# -- the text form --------------------------------------------------------------------------------

@pytest.mark.parametrize("node, text", [
    (Node(7, "nccl:all_reduce", T.COMM_COLL_NODE, (3,),
          attrs=make_attrs(comm_type=CommType.ALL_REDUCE, comm_size=4 << 20, pg_name="1")),
     "%7 COMM_COLL 'nccl:all_reduce' ALL_REDUCE 4.0MiB pg=1 deps=[%3]"),
    (Node(12, "all_gather", T.COMM_COLL_NODE, (7, 9), duration_micros=15,
          attrs=make_attrs(comm_type=CommType.ALL_GATHER, comm_size=1536, pg_name="2")),
     "%12 COMM_COLL 'all_gather' ALL_GATHER 1.5KiB 15us pg=2 deps=[%7,%9]"),
    (Node(1, "no type", T.COMM_COLL_NODE), "%1 COMM_COLL 'no type' ALL_REDUCE 0B"),
    (Node(1, "bad type", T.COMM_COLL_NODE, attrs=make_attrs(comm_type=42)), "%1 COMM_COLL 'bad type' ? 0B"),
    (Node(4, "send", T.COMM_SEND_NODE, attrs=make_attrs(comm_size=131072, comm_dst=2, comm_tag=5)),
     "%4 COMM_SEND 'send' 128.0KiB to=2 tag=5"),
    (Node(5, "recv", T.COMM_RECV_NODE, ctrl_deps=(4,), attrs=make_attrs(comm_size=12, comm_src=1)),
     "%5 COMM_RECV 'recv' 12B from=1 tag=None ctrl=[%4]"),
    (Node(2, "gemm", T.COMP_NODE, (1,), (0,), duration_micros=318, attrs=make_attrs(num_ops=2_000_000)),
     "%2 COMP 'gemm' 2e+06flop 318us deps=[%1] ctrl=[%0]"),
    (Node(3, "load", T.MEM_LOAD_NODE, attrs=make_attrs(tensor_size=64)), "%3 MEM_LOAD 'load'"),
    (Node(0, "it's", T.INVALID_NODE), "%0 INVALID \"it's\""),
])
def test_node_text(node, text):
    assert str(node) == text


def test_text_form_is_what_errors_use(tmp_path):
    from chakra_tools.core.etio import iter_nodes
    from chakra_tools.core.etwrite import write_trace

    n = Node(9, "x", T.COMP_NODE, (8,))
    write_trace(tmp_path / "t.0.et", [n])
    (tmp_path / "t.0.et").write_bytes((tmp_path / "t.0.et").read_bytes() + b"\x07")
    with pytest.raises(TraceReadError, match=r"\(last good node: %9 COMP 'x' deps=\[%8\]\)"):
        list(iter_nodes(tmp_path / "t.0.et"))


def test_format_bytes_boundaries():
    assert [format_bytes(n) for n in (0, 1023, 1024, (1 << 20) - 1, 1 << 20, 3 << 30)] == \
        ["0B", "1023B", "1.0KiB", "1024.0KiB", "1.0MiB", "3.0GiB"]


# -- accessors and attributes ---------------------------------------------------------------------

def test_accessors_apply_the_contract_defaults():
    n = Node(1, "c", T.COMP_NODE)
    # is_cpu_op absent: GPU work, as both Chakra feeders (and so ASTRA-sim) read it
    assert (n.is_cpu_op, n.num_ops, n.tensor_size, n.comm_size, n.comm_type, n.pg_name) == (False, 0, 0, 0, None, "")
    assert n.comm_src is None and n.involved_dim is None and n.comm_priority == 0


def test_accessors_read_any_integer_kind_but_only_the_right_other_kinds():
    n = Node(1, "c", T.COMM_COLL_NODE, attrs={
        "comm_size": Attr("uint32_val", 64), "comm_type": Attr("int32_val", 2),
        "is_cpu_op": Attr("int64_val", 1), "pg_name": Attr("int64_val", 3)})
    assert n.comm_size == 64 and n.comm_type is CommType.ALL_GATHER
    assert n.is_cpu_op is False  # not a bool_val: the contract's default, as Chakra's feeder does
    assert n.pg_name == ""


def test_deps_are_data_then_ctrl_each_once():
    assert Node(1, "n", T.COMP_NODE, (3, 2), (2, 4, 3)).deps == (3, 2, 4)
    assert Node(1, "n", T.COMP_NODE, (3,)).deps == (3,)


def test_node_is_immutable_and_replace_copies():
    n = Node(1, "n", T.COMP_NODE)
    with pytest.raises(AttributeError):
        n.name = "m"
    m = n.replace(name="m")
    assert (n.name, m.name, m.id) == ("n", "m", 1)


def test_make_attr_kinds_by_python_type():
    assert make_attr("x", True).kind == "bool_val"
    assert make_attr("x", 3).kind == "int64_val"
    assert make_attr("x", 1.5).kind == "double_val"
    assert make_attr("x", b"\0").kind == "bytes_val"
    assert make_attr("x", ["a", "b"]) == Attr("string_list", ("a", "b"))
    assert make_attr("x", []).kind == "int64_list"
    assert make_attr("comm_type", CommType.BROADCAST) == Attr("int64_val", 5)
    assert type(make_attr("comm_type", CommType.BROADCAST).value) is int
    with pytest.raises(TypeError):
        make_attr("x", object())


# -- errors and diagnostics -----------------------------------------------------------------------

def test_diagnostic_text_with_and_without_location():
    d = Diagnostic("error", "dangling-data-dep", "depends on unknown node 4410",
                   file="t.3.et", rank=3, node_id=812, node_name="nccl:all_reduce")
    assert str(d) == "t.3.et: rank 3: node 812 ('nccl:all_reduce'): depends on unknown node 4410 [dangling-data-dep]"
    assert str(Diagnostic("warning", "c", "m")) == "m [c]"
    assert str(Diagnostic("warning", "c", "m", rank=0, node_id=0)) == "rank 0: node 0: m [c]"
    assert d.to_dict() == {"severity": "error", "code": "dangling-data-dep", "message": "depends on unknown node 4410",
                           "file": "t.3.et", "rank": 3, "node_id": 812, "node_name": "nccl:all_reduce"}
    assert Diagnostic("warning", "c", "m", extra={"n": 1}).to_dict() == {
        "severity": "warning", "code": "c", "message": "m", "extra": {"n": 1}}


def test_diagnostics_cap_examples_but_count_all():
    ds = Diagnostics(examples_per_code=2)
    ds.extend(Diagnostic("warning", "a", f"m{i}") for i in range(5))
    ds.add(Diagnostic("error", "b", "x"))
    assert len(ds) == 6 and len(list(ds)) == 3
    assert ds.counts == {"a": 5, "b": 1} and ds.omitted() == {"a": 3}


def test_error_context_reads_outermost_first():
    e = InputError("t.3.json: node 12: bad").add_context("rank 3").add_context("while converting")
    assert str(e) == "while converting: rank 3: t.3.json: node 12: bad"
    assert isinstance(e, ChakraToolsError) and e.exit_code == 2
    r = TraceReadError("f.et", 10, "bad", None)
    assert str(r) == "f.et: byte 10: bad (before the first node)" and r.offset == 10


# -- the graph ------------------------------------------------------------------------------------

def tiny() -> Graph:
    return Graph([Node(5, "a", T.COMP_NODE), Node(2, "b", T.COMP_NODE, (5,)),
                  Node(9, "c", T.COMP_NODE, (5, 77), (2,)), Node(1, "d", T.COMP_NODE)], rank=0)


def test_graph_views():
    g = tiny()
    assert list(g.nodes) == [5, 2, 9, 1]  # file order
    assert g.predecessors(9) == (5, 2)  # absent 77 left out
    assert g.successors(5) == (2, 9) and g.successors(1) == ()
    assert sorted(g.edges()) == [(2, 9, "ctrl"), (5, 2, "data"), (5, 9, "data")]
    assert [n.id for n in g.topological_order()] == [1, 5, 2, 9]  # ties in ascending id
    assert g.find_cycle() is None
    nx_g = g.to_networkx()
    assert nx_g.number_of_nodes() == 4 and nx_g.edges[2, 9]["kind"] == "ctrl"


def test_graph_duplicates_are_kept_aside():
    g = Graph([Node(1, "a", T.COMP_NODE), Node(1, "again", T.COMP_NODE)])
    assert len(g) == 1 and g[1].name == "a" and [n.name for n in g.duplicates] == ["again"]


def test_cycles_are_found_and_named():
    g = Graph([Node(1, "a", T.COMP_NODE, (3,)), Node(2, "b", T.COMP_NODE, (1,)), Node(3, "c", T.COMP_NODE, (2,)),
               Node(4, "d", T.COMP_NODE)])
    cyc = g.find_cycle()
    assert cyc[0] == cyc[-1] and set(cyc) == {1, 2, 3} and len(cyc) == 4
    for a, b in zip(cyc, cyc[1:]):  # a -> b means b depends on a
        assert a in g[b].deps
    with pytest.raises(ChakraToolsError, match="dependency cycle: %"):
        g.topological_order()
    assert Graph([Node(1, "self", T.COMP_NODE, (), (1,))]).find_cycle() == [1, 1]


def test_find_rank_files(tmp_path):
    from chakra_tools.core.etwrite import write_trace

    for r in (0, 1, 10):
        write_trace(tmp_path / f"w.{r}.et", [Node(r, "n", T.COMP_NODE)])
    assert list(find_rank_files(tmp_path)) == [0, 1, 10]
    assert list(find_rank_files(tmp_path / "w")) == [0, 1, 10]
    assert list(find_rank_files(tmp_path / "w.1.et")) == [1]
    write_trace(tmp_path / "other.0.et", [Node(0, "n", T.COMP_NODE)])
    with pytest.raises(InputError, match="several rank sets"):
        find_rank_files(tmp_path)
    with pytest.raises(InputError, match="no trace files"):
        find_rank_files(tmp_path / "nothing")
    assert RankSet.load(tmp_path / "w").ranks == [0, 1, 10]


def test_graph_read_notes_dependency_quirks(tmp_path):
    from chakra_tools.core.etwrite import write_trace

    write_trace(tmp_path / "q.2.et", [Node(1, "a", T.COMP_NODE, (2,)), Node(2, "b", T.COMP_NODE, (), (99,))])
    g = Graph.read(tmp_path / "q.2.et")
    assert g.rank == 2
    assert g.diagnostics.counts == {"forward-ref": 1, "dangling-ctrl-dep": 1}
    d = next(d for d in g.diagnostics if d.code == "dangling-ctrl-dep")
    assert (d.file, d.rank, d.node_id, d.node_name) == (str(tmp_path / "q.2.et"), 2, 2, "b")
    assert list(g) == [Node(1, "a", T.COMP_NODE, (2,)), Node(2, "b", T.COMP_NODE, (), (99,))]  # never rewritten


def test_a_self_dependency_is_not_called_a_forward_reference(tmp_path):
    from chakra_tools.core.etwrite import write_trace

    write_trace(tmp_path / "s.0.et", [Node(1, "a", T.COMP_NODE, (), (1,)), Node(2, "b", T.COMP_NODE, (1,))])
    g = Graph.read(tmp_path / "s.0.et")
    assert "forward-ref" not in g.diagnostics.counts
    assert g.find_cycle() == [1, 1]
