"""The real `.et` files in ../shared/fixtures/external read, node for node as the reference reads
them, and validation reports what is really wrong in them.

Facts asserted here come from PROVENANCE.md in that folder or from the reference reader
(mlc-chakra's protolib + protobuf), never from our own output.
"""

from __future__ import annotations

from collections import Counter

import pytest

from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import CommType, NodeType

from et_strategies import our_view, ref_view, reference_read

ASTRA = "astra-sim"


def fixture_files(root):
    return sorted(root.glob(f"{ASTRA}/*/*.et"))


@pytest.fixture(scope="module")
def feeder(unpack):
    """Chakra's feeder test trace (PROVENANCE: 3,664 nodes from a real 2-GPU run, 2023 converter)."""
    path = unpack("chakra/feeder_tests_trace.tar.gz") / "tests" / "data" / "chakra.0.et"
    return path, Graph.read(path)


def test_all_external_et_files_read_as_the_reference_reads_them(shared_fixtures, feeder):
    paths = fixture_files(shared_fixtures) + [feeder[0]]
    assert len(paths) == 4 + 8 + 1
    for path in paths:
        g = Graph.read(path)
        meta, ref_nodes = reference_read(path)
        assert [our_view(n) for n in g] == [ref_view(m) for m in ref_nodes], path
        assert g.metadata.present and g.metadata.version == meta.version
        assert not g.duplicates


def test_astra_sim_all_reduce_microbenchmark(shared_fixtures):
    """PROVENANCE: one COMM_COLL all-reduce of 1,048,576 bytes per rank, version "0.0.4"."""
    rs = RankSet.load(shared_fixtures / ASTRA / "all_reduce_4npus_1MB")
    assert rs.ranks == [0, 1, 2, 3] and rs.prefix == "all_reduce"
    for g in rs:
        assert g.metadata.version == "0.0.4"
        (n,) = list(g)
        assert n.type is NodeType.COMM_COLL_NODE
        assert n.comm_type is CommType.ALL_REDUCE and n.attrs["comm_type"].kind == "int64_val"
        assert n.comm_size == 1_048_576 and n.attrs["comm_size"].kind == "int64_val"
        assert n.is_cpu_op is False
        assert len(g.diagnostics) == 0


def test_astra_sim_custom_ring(shared_fixtures):
    """PROVENANCE: 14 SEND, 14 RECV, 7 COMP per rank, with comm_src/comm_dst/comm_tag."""
    rs = RankSet.load(shared_fixtures / ASTRA / "custom_ring_allreduce_8npus_1MB")
    assert rs.ranks == list(range(8))
    for g in rs:
        kinds = Counter(n.type for n in g)
        assert kinds == {NodeType.COMM_SEND_NODE: 14, NodeType.COMM_RECV_NODE: 14, NodeType.COMP_NODE: 7}
        for n in g:
            if n.type is NodeType.COMM_SEND_NODE:
                assert n.comm_dst is not None and n.comm_tag is not None and n.comm_size > 0
            elif n.type is NodeType.COMM_RECV_NODE:
                assert n.comm_src is not None and n.comm_tag is not None and n.comm_size > 0
        assert g.topological_order()  # acyclic


def test_feeder_trace_quirks_are_read_and_reported(feeder):
    """PROVENANCE: 3,664 nodes (3,643 COMP, 21 COMM_COLL, 14 of them without comm_type),
    GlobalMetadata schema "1.0.1", 53 forward-referencing data deps, 1,277 ctrl_deps to absent
    nodes, involved_dim bool lists."""
    _, g = feeder
    assert len(g) == 3664
    assert Counter(n.type for n in g) == {NodeType.COMP_NODE: 3643, NodeType.COMM_COLL_NODE: 21}
    no_type = [n for n in g if n.type is NodeType.COMM_COLL_NODE and "comm_type" not in n.attrs]
    assert len(no_type) == 14
    assert all(n.comm_type is CommType.ALL_REDUCE for n in no_type)  # the proto3 default, reported
    assert g.metadata.attrs["schema"].value == "1.0.1"
    seen, forward_data = set(), 0
    for n in g:
        forward_data += sum(1 for d in n.data_deps if d in g and d not in seen)
        seen.add(n.id)
    assert forward_data == 53
    absent_ctrl = sum(1 for n in g for d in n.ctrl_deps if d not in g)
    assert absent_ctrl == 1277
    assert sum(1 for n in g for d in n.data_deps if d not in g) == 0
    assert any(n.attrs.get("involved_dim", (None,))[0] == "bool_list" for n in g)
    # what the reader and the graph had to assume is reported, with counts
    counts = g.diagnostics.counts
    assert counts["dangling-ctrl-dep"] == 1277
    assert "dangling-data-dep" not in counts
    # forward references of both kinds, counted on the reference reader's messages; a node listing
    # itself (383 do, in ctrl_deps) is a cycle, not a forward reference
    _, ref_nodes = reference_read(feeder[0])
    ids, seen, forward, selfdeps = {m.id for m in ref_nodes}, set(), 0, 0
    for m in ref_nodes:
        for d in (*m.data_deps, *m.ctrl_deps):
            selfdeps += d == m.id
            forward += d in ids and d not in seen and d != m.id
        seen.add(m.id)
    assert selfdeps == 383
    assert counts["forward-ref"] == forward
    assert sum(n for c, n in counts.items() if "comm-type" in c or "all-reduce" in c) == 14


# -- validation ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def validate():
    return pytest.importorskip("chakra_tools.core.validate")


def codes(diags):
    return Counter(d.code for d in diags)


def test_validate_feeder_trace_reports_what_is_wrong(validate, feeder):
    import networkx as nx

    path, g = feeder
    diags = validate.validate_graph(g)
    c = codes(diags)
    errors = {d.code for d in diags if d.severity == "error"}
    assert c["dangling-ctrl-dep"] == 1277 and "dangling-ctrl-dep" in errors
    assert c["missing-comm-type"] == 14 and "missing-comm-type" in errors
    missing = {d.node_id for d in diags if d.code == "missing-comm-type"}
    assert missing == {n.id for n in g if n.type is NodeType.COMM_COLL_NODE and "comm_type" not in n.attrs}
    assert "dangling-data-dep" not in c
    # the file really has dependency cycles (self-dependencies among them): found independently
    # with networkx on the reference reader's messages
    _, ref_nodes = reference_read(path)
    ids = {m.id for m in ref_nodes}
    ref = nx.DiGraph([(d, m.id) for m in ref_nodes for d in (*m.data_deps, *m.ctrl_deps) if d in ids])
    assert not nx.is_directed_acyclic_graph(ref)
    (cyc,) = [d for d in diags if d.code == "cycle"]
    assert cyc.severity == "error" and cyc.node_id in ids
    # every diagnostic names the file, the rank and (all of these) the node
    assert all(d.file == str(path) and d.rank == 0 and d.node_id is not None for d in diags)


def test_validate_clean_fixtures_have_no_errors(validate, shared_fixtures):
    for folder in ("all_reduce_4npus_1MB", "custom_ring_allreduce_8npus_1MB"):
        rs = RankSet.load(shared_fixtures / ASTRA / folder)
        assert [str(d) for d in validate.validate_rankset(rs) if d.severity == "error"] == [], folder


def test_validate_finds_a_collective_size_mismatch(validate, shared_fixtures):
    rs = RankSet.load(shared_fixtures / ASTRA / "all_reduce_4npus_1MB")
    g2 = rs[2]
    (n,) = list(g2)
    g2.nodes[n.id] = n.replace(attrs={**n.attrs, "comm_size": n.attrs["comm_size"]._replace(value=4096)})
    errors = [d for d in validate.validate_rankset(rs) if d.severity == "error"]
    assert [(d.code, d.rank) for d in errors] == [("collective-mismatch", 2)]
    assert "4.0KiB" in errors[0].message and "1.0MiB" in errors[0].message


def test_validate_finds_an_unmatched_send(validate, shared_fixtures):
    rs = RankSet.load(shared_fixtures / ASTRA / "custom_ring_allreduce_8npus_1MB")
    g3 = rs[3]
    recv = next(n for n in g3 if n.type is NodeType.COMM_RECV_NODE)
    del g3.nodes[recv.id]
    errors = [d for d in validate.validate_rankset(rs) if d.severity == "error"]
    assert recv.comm_src == 2
    unmatched = [d for d in errors if d.code == "unmatched-send"]
    assert len(unmatched) == 1 and unmatched[0].rank == 2 and "rank 3" in unmatched[0].message
    # and the node that depended on the removed receive now has a dangling dependency
    assert any(d.code == "dangling-data-dep" and d.rank == 3 for d in errors)


def test_validate_streaming_matches_in_memory(validate, feeder):
    path, g = feeder
    report = validate.validate_path(path)
    assert report.nodes == 3664
    in_memory = codes(validate.validate_graph(g))
    # the streaming path also carries the reader's warnings; every in-memory finding is there
    for code, n in in_memory.items():
        assert report.diagnostics.counts.get(code) == n, code
