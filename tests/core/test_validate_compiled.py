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
