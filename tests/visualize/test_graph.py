"""Graph export: GraphML reloads in networkx with the same nodes and edges; filters; DOT and SVG."""

from __future__ import annotations

import re

import networkx as nx
import pytest

from chakra_tools.core.errors import InputError
from chakra_tools.core.graph import RankSet
from chakra_tools.core.model import NodeType as T
from chakra_tools.visualize import drawing
from chakra_tools.visualize.select import (Selection, node_steps, parse_around, parse_ints, parse_kinds,
                                           parse_range, select)

from .conftest import tiny_rankset


def _expected(rs_or_view) -> tuple[set, dict]:
    graphs = rs_or_view.graphs if isinstance(rs_or_view, RankSet) else rs_or_view
    nodes = {f"{r}:{n.id}" for r, g in graphs.items() for n in g}
    kinds: dict = {}
    for r, g in graphs.items():
        for s, d, k in g.edges():
            key = (f"{r}:{s}", f"{r}:{d}")
            kinds[key] = "data+ctrl" if kinds.get(key, k) != k else k
    return nodes, kinds


def _reload(path):
    g = nx.read_graphml(path)
    return set(g.nodes), {(s, d): k for s, d, k in g.edges(data="kind")}, g


def test_graphml_round_trip_tiny(tmp_path):
    rs = tiny_rankset()
    out = drawing.write_graphml(rs.graphs, tmp_path / "g.graphml")
    nodes, edges, g = _reload(out)
    want_nodes, want_edges = _expected(rs)
    assert nodes == want_nodes and len(nodes) == 10
    assert edges == want_edges and len(edges) == 10
    assert g.nodes["1:3"]["comm_type"] == "ALL_REDUCE" and g.nodes["1:3"]["comm_size"] == 4 << 20
    assert g.nodes["0:4"]["comm_dst"] == 1 and g.nodes["1:4"]["comm_src"] == 0
    assert g.nodes["0:2"]["duration_micros"] == 30 and g.nodes["0:2"]["type"] == "COMP_NODE"


@pytest.mark.parametrize("rel", ["astra-sim/custom_ring_allreduce_8npus_1MB", "astra-sim/all_reduce_4npus_1MB"])
def test_graphml_round_trip_astra_sim(shared_fixtures, tmp_path, rel):
    rs = RankSet.load(shared_fixtures / rel)
    nodes, edges, _ = _reload(drawing.write_graphml(rs.graphs, tmp_path / "g.graphml"))
    assert (nodes, edges) == _expected(rs)


def _feeder(unpack) -> RankSet:
    return RankSet.load(unpack("chakra/feeder_tests_trace.tar.gz") / "tests" / "data" / "chakra.0.et")


def test_graphml_round_trip_real_converted_trace_part(unpack, tmp_path):
    """The 600 lowest ids of Chakra's feeder trace: kernel names full of XML-special characters."""
    rs = _feeder(unpack)
    ids = sorted(rs[0].nodes)
    view = select(rs, Selection(id_range=(ids[0], ids[599])))
    nodes, edges, g = _reload(drawing.write_graphml(view, tmp_path / "g.graphml"))
    want_nodes, want_edges = _expected(view)
    assert nodes == want_nodes and len(nodes) == len(view[0]) == 600
    assert edges == want_edges and len(edges) > 1000
    assert any("<" in g.nodes[n]["name"] and "&" not in g.nodes[n]["name"] for n in g.nodes)


@pytest.mark.slow
def test_graphml_round_trip_real_converted_trace(unpack, tmp_path):
    """All 3,664 nodes and 183,563 distinct dependency pairs."""
    rs = _feeder(unpack)
    nodes, edges, _ = _reload(drawing.write_graphml(rs.graphs, tmp_path / "g.graphml"))
    want_nodes, want_edges = _expected(rs)
    assert len(nodes) == 3664 and nodes == want_nodes
    assert edges == want_edges


def test_filters():
    rs = tiny_rankset()
    ids = lambda view: {r: sorted(g.nodes) for r, g in view.items()}  # noqa: E731
    assert ids(select(rs, Selection(ranks=(1,)))) == {1: [1, 2, 3, 4, 5]}
    assert ids(select(rs, Selection(id_range=(2, 3)))) == {0: [2, 3], 1: [2, 3]}
    assert ids(select(rs, Selection(kinds=parse_kinds(["coll,send"])))) == {0: [3, 4], 1: [3]}
    assert ids(select(rs, Selection(name="^sm80"))) == {0: [2, 5], 1: [2, 5]}
    assert ids(select(rs, Selection(around=(1, 4), radius=1))) == {1: [3, 4, 5]}
    assert ids(select(rs, Selection(around=(0, 1), radius=2))) == {0: [1, 2, 3, 5]}
    view = select(rs, Selection(ranks=(0,), id_range=(2, 5)))
    assert drawing.count(view) == (4, 4)  # 2->3, 3->4, 4->5, 2->5; the edge from %1 is gone


def test_step_filter_uses_profiler_step_windows():
    from chakra_tools.core.graph import Graph
    from chakra_tools.core.model import Node

    g = Graph([Node(1, "ProfilerStep#4", T.COMP_NODE, start_time_micros=0, duration_micros=100),
               Node(2, "a", T.COMP_NODE, start_time_micros=10, duration_micros=5),
               Node(3, "ProfilerStep#5", T.COMP_NODE, start_time_micros=100, duration_micros=100),
               Node(4, "b", T.COMP_NODE, start_time_micros=150, duration_micros=5),
               Node(5, "child", T.COMP_NODE, ctrl_deps=(4,))], rank=0)
    assert node_steps(g) == {1: 4, 2: 4, 3: 5, 4: 5, 5: 5}
    assert sorted(select(RankSet({0: g}), Selection(steps=(5,)))[0].nodes) == [3, 4, 5]


def test_filter_errors_name_the_problem():
    rs = tiny_rankset()
    with pytest.raises(InputError, match=r"rank\(s\) \[7\] not in the trace"):
        select(rs, Selection(ranks=(7,)))
    with pytest.raises(InputError, match="needs a rank"):
        select(rs, Selection(around=(None, 3)))
    with pytest.raises(InputError, match="rank 0 has no node 99"):
        select(rs, Selection(around=(0, 99)))
    with pytest.raises(InputError, match="unknown node kind"):
        parse_kinds(["gpu"])
    with pytest.raises(InputError, match="regular expression"):
        select(rs, Selection(name="("))


def test_parsers():
    assert parse_ints("0,2,4-6", "--rank") == (0, 2, 4, 5, 6)
    assert parse_range("100:200") == (100, 200) and parse_range("7") == (7, 7)
    assert parse_range(":5")[0] == 0 and parse_range("5:")[1] >= 2**63
    assert parse_around("3:42") == (3, 42) and parse_around("42") == (None, 42)


def test_dot_styles_by_kind_and_dependency():
    text = drawing.dot_text(tiny_rankset().graphs)
    assert text.count("subgraph") == 2
    assert len(re.findall(r'^\s+"\d+:\d+" \[label=', text, re.M)) == 10
    assert len(re.findall(r"->", text)) == 10
    assert '"0:3" [label="%3 nccl:all_reduce\\nCOMM_COLL ALL_REDUCE 4.0MiB pg=1 20us" shape=hexagon' in text
    assert '"0:4" -> "0:5" [style=solid' in text      # data
    assert '"0:3" -> "0:4" [style=dashed' in text     # ctrl
    assert "shape=cds" in text and "shape=invhouse" in text


def test_drawing_refuses_big_graphs_and_suggests_filters(tmp_path):
    with pytest.raises(InputError, match=r"10 nodes; DOT and SVG draw at most 5 .*--around"):
        drawing.write_dot(tiny_rankset().graphs, tmp_path / "g.dot", limit=5)
    assert not (tmp_path / "g.dot").exists()


def test_svg_through_graphviz(tmp_path):
    if drawing.dot_program() is None:
        pytest.skip("Graphviz `dot` not installed (apt-get install graphviz); DOT text is tested above")
    out = drawing.write_svg(tiny_rankset().graphs, tmp_path / "g.svg")
    svg = out.read_text()
    assert svg.count('class="node"') == 10 and svg.count('class="edge"') == 10


def test_svg_without_graphviz_gives_install_hint(tmp_path, monkeypatch):
    monkeypatch.setattr(drawing, "dot_program", lambda: None)
    with pytest.raises(InputError, match="apt-get install graphviz"):
        drawing.write_svg(tiny_rankset().graphs, tmp_path / "g.svg")
    assert not (tmp_path / "g.svg").exists()
