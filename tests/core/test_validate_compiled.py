"""The validator's compiled common case (core/_hotloops.c `plain_run`) changes no finding.

Validation of any rank set, with the compiled run and with Python checking every node, must give
the same diagnostics; and on a long clean graph the compiled run must take the nodes (else it
would be dead code that only looks tested).
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings, strategies as st

from chakra_tools.core import hotloops, validate
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import Attr, Node, NodeType

from et_strategies import node_lists

pytestmark = pytest.mark.skipif(hotloops.COMPILED is None, reason="core/_hotloops.c not built")


def _findings(graphs, compiled: bool):
    with contextlib.nullcontext() if compiled else hotloops.python_twins():
        found = validate.validate_rankset(RankSet(dict(enumerate(graphs)), {"1": [0, 1]}, "t"))
    return sorted((d.severity, d.code, d.message, d.rank, d.node_id) for d in found)


def _consecutive(nodes):
    """Renumber from 1 and point dependencies mostly backwards: what converters write, where the
    compiled run applies, with the odd forward, self or dangling dependency left in."""
    out = []
    for i, n in enumerate(nodes, 1):
        deps = tuple((d % (i + 1)) if d % 7 else d for d in n.data_deps)
        out.append(n._replace(id=i, data_deps=deps, ctrl_deps=n.ctrl_deps[:1] if i % 5 == 0 else ()))
    return out


@settings(max_examples=200, deadline=None)
@given(node_lists(), node_lists(), st.booleans())
def test_the_same_findings_with_and_without_the_compiled_run(a, b, renumber):
    if renumber:
        a, b = _consecutive(a), _consecutive(b)
    graphs = [Graph(a, rank=0), Graph(b, rank=1)]
    assert _findings(graphs, True) == _findings(graphs, False)


def test_a_long_clean_graph_goes_through_the_compiled_run(monkeypatch):
    nodes = [Node(i, "op", NodeType.COMP_NODE, (i - 1,) if i > 1 else (),
                  attrs={"is_cpu_op": Attr("bool_val", True), "num_ops": Attr("int64_val", 3)})
             for i in range(1, 10_001)]
    bad = nodes[5000]._replace(attrs={"num_ops": Attr("int32_val", 3)})  # the wrong kind
    nodes[5000] = bad
    runs = []
    real = hotloops.plain_run
    monkeypatch.setattr(hotloops, "plain_run", lambda *a: runs.append(real(*a)) or runs[-1])
    found = validate.validate_rankset(RankSet({0: Graph(nodes, rank=0)}, {}, "t"))
    assert [d.node_id for d in found if d.code == "attr-kind"] == [5001]
    assert sum(runs) == len(nodes) - 2  # all but the first node and the bad one


# -- the frame scan: validate_path takes plain frames without decoding them (scan_frames) ---------

_CONTRACT_VALUES = {
    "comm_type": [Attr("int64_val", 0), Attr("int64_val", 6), Attr("int64_val", 9), Attr("int64_val", 10),
                  Attr("int64_val", -1), Attr("int32_val", 1), Attr("uint64_val", 2**64 - 1)],
    "comm_size": [Attr("int64_val", 1024), Attr("int64_val", 0), Attr("uint64_val", 8), Attr("double_val", 1.0)],
    "comm_src": [Attr("int32_val", 0), Attr("int32_val", 1), Attr("int32_val", -3), Attr("int64_val", 1)],
    "comm_dst": [Attr("int32_val", 1), Attr("int32_val", 7), Attr("string_val", "1")],
    "comm_tag": [Attr("int32_val", 0), Attr("int32_val", 5), Attr("sint32_val", 5)],
    "is_cpu_op": [Attr("bool_val", False), Attr("bool_val", True), Attr("int64_val", 0)],
    "pg_name": [Attr("string_val", s) for s in ("", "0", "1", "2", "7", "x", "\u0661", " 1")] + [Attr("int64_val", 1)],
    "group_size": [Attr("int64_val", 2), Attr("int64_val", 3)],
    "num_ops": [Attr("int64_val", 10), Attr("int32_val", 10)],
    "involved_dim": [Attr("bool_list", (True, False)), Attr("bool_val", True)],
    "other": [Attr("string_val", "x"), Attr("int64_list", (1, 2))],
}


_CLEAN = {
    NodeType.COMM_COLL_NODE: {"comm_type": Attr("int64_val", 0), "comm_size": Attr("int64_val", 1024),
                              "is_cpu_op": Attr("bool_val", False)},
    NodeType.COMM_SEND_NODE: {"comm_dst": Attr("int32_val", 1), "comm_tag": Attr("int32_val", 0),
                              "comm_size": Attr("int64_val", 64)},
    NodeType.COMM_RECV_NODE: {"comm_src": Attr("int32_val", 0), "comm_tag": Attr("int32_val", 0),
                              "comm_size": Attr("int64_val", 64)},
    NodeType.COMP_NODE: {"num_ops": Attr("int64_val", 10)},
}


@st.composite
def _realistic(draw) -> list[Node]:
    """What converters write (ids running on from 1, dependencies on earlier nodes, the contract's
    attributes of their kinds), with a defect in about one node in six: an id out of place, a
    dependency forward or on itself, an attribute of another kind or value, a group unknown, a
    group_size: where scan_frames must stop and leave the node to the checks in Python."""
    n = draw(st.integers(17, 60))  # past the 16 nodes the reader sniffs for the legacy layout itself
    out = []
    for i in range(1, n + 1):
        ntype = draw(st.sampled_from(sorted(_CLEAN)))
        attrs = dict(_CLEAN[ntype])
        pg = draw(st.sampled_from(("", "1", "2")))
        if pg:
            attrs["pg_name"] = Attr("string_val", pg)
        nid, deps, ctrl = i, tuple(range(max(1, i - 2), i)), ()
        if draw(st.integers(0, 5)) == 0:
            defect = draw(st.sampled_from(("id", "dep", "ctrl", "attr", "drop")))
            if defect == "id":
                nid = draw(st.sampled_from((i + 100, max(1, i - 1), 2**63)))
            elif defect == "dep":
                deps += (draw(st.sampled_from((i, i + 1, 0, 2**40))),)
            elif defect == "ctrl":
                ctrl = (draw(st.integers(0, i + 1)),)
            elif defect == "attr":
                name = draw(st.sampled_from(sorted(_CONTRACT_VALUES)))
                attrs[name] = draw(st.sampled_from(_CONTRACT_VALUES[name]))
            elif attrs:
                attrs.pop(draw(st.sampled_from(sorted(attrs))))
        out.append(Node(nid, draw(st.sampled_from(("op", "nccl:all_reduce", "é"))), ntype, deps, ctrl,
                        attrs=attrs))
    return out


def _file_findings(folder, compiled: bool):
    with contextlib.nullcontext() if compiled else hotloops.python_twins():
        report = validate.validate_path(folder)
    return sorted((d.severity, d.code, d.message, d.rank, d.node_id, d.node_name) for d in report.diagnostics)


@settings(max_examples=150, deadline=None)
@given(_realistic(), _realistic(), st.sampled_from([None, {"1": [0, 1], "2": [0]}, {"7": [1]}]))
def test_validating_files_finds_the_same_with_and_without_the_frame_scan(a, b, groups):
    import tempfile

    folder = tempfile.mkdtemp()
    RankSet({0: Graph(a, rank=0), 1: Graph(b, rank=1)}, groups or {}, "t").write(folder, "t")
    assert _file_findings(folder, True) == _file_findings(folder, False)


def test_a_long_clean_rank_set_goes_through_the_frame_scan(tmp_path, monkeypatch):
    """Compute and communication alike: only the nodes the reader sniffs and the bad one are decoded."""
    def rank(r):
        nodes = []
        for i in range(1, 5001):
            if i % 3 == 0:
                attrs = {"comm_type": Attr("int64_val", 0), "comm_size": Attr("int64_val", 64),
                         "pg_name": Attr("string_val", "1"), "is_cpu_op": Attr("bool_val", False)}
                nodes.append(Node(i, "all_reduce", NodeType.COMM_COLL_NODE, (i - 1,), attrs=attrs))
            else:
                nodes.append(Node(i, "op", NodeType.COMP_NODE, (i - 1,) if i > 1 else (),
                                  attrs={"num_ops": Attr("int64_val", 3)}))
        return Graph(nodes, rank=r)

    graphs = {0: rank(0), 1: rank(1)}
    graphs[1].nodes[4000] = graphs[1].nodes[4000]._replace(attrs={"num_ops": Attr("int32_val", 3)})
    RankSet(graphs, {"1": [0, 1]}, "t").write(tmp_path, "t")
    taken = []
    real = hotloops.scan_frames

    def counted(*a):
        got = real(*a)
        taken.append(got[1])
        return got

    monkeypatch.setattr(hotloops, "scan_frames", counted)
    report = validate.validate_path(tmp_path)
    assert [(d.rank, d.node_id) for d in report.diagnostics if d.code == "attr-kind"] == [(1, 4000)]
    assert sum(taken) >= 2 * 5000 - 2 * 16 - 1 - 64  # all but the sniffed, the bad one, a chunk edge or so
    assert report.nodes == 10000 and not report.error_count - 1
