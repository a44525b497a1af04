"""Validation rules on tiny inline rank sets, each with the violation it must find beside it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import Attr, CommType, Node, NodeType, make_attrs
from chakra_tools.core.validate import validate_graph, validate_path, validate_rankset

COMP, COLL = NodeType.COMP_NODE, NodeType.COMM_COLL_NODE
SEND, RECV = NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE


def coll(nid, kind, size, pg="1", deps=()):
    return Node(nid, f"c{nid}", COLL, tuple(deps),
                attrs=make_attrs(comm_type=kind, comm_size=size, pg_name=pg, is_cpu_op=False))


def send(nid, dst, tag, size):
    return Node(nid, f"s{nid}", SEND, attrs=make_attrs(comm_dst=dst, comm_tag=tag, comm_size=size, is_cpu_op=False))


def recv(nid, src, tag, size):
    return Node(nid, f"r{nid}", RECV, attrs=make_attrs(comm_src=src, comm_tag=tag, comm_size=size, is_cpu_op=False))


def rankset(per_rank, groups=None):
    return RankSet({r: Graph(nodes, rank=r, source=f"t.{r}.et") for r, nodes in per_rank.items()},
                   groups if groups is not None else {"1": (0, 1)})


def codes(diags, severity="error"):
    return sorted(d.code for d in diags if d.severity == severity)


def test_clean_rankset_has_no_findings():
    rs = rankset({r: [Node(1, "mm", COMP), coll(2, CommType.ALL_REDUCE, 1 << 20, deps=[1]),
                      send(3, 1 - r, 7, 64), recv(4, 1 - r, 7, 64)] for r in (0, 1)})
    assert validate_rankset(rs) == []


def test_collective_sequence_mismatch_names_rank_and_node():
    rs = rankset({0: [coll(1, CommType.ALL_REDUCE, 1024), coll(2, CommType.ALL_GATHER, 64)],
                  1: [coll(1, CommType.ALL_REDUCE, 1024), coll(5, CommType.ALL_REDUCE, 64)]})
    [d] = [d for d in validate_rankset(rs) if d.severity == "error"]
    assert (d.code, d.rank, d.node_id) == ("collective-mismatch", 1, 5)
    assert "collective #1 on group 1" in d.message and "ALL_GATHER" in d.message


def test_collective_size_mismatch_but_all_to_all_sizes_may_differ():
    rs = rankset({0: [coll(1, CommType.ALL_REDUCE, 1024), coll(2, CommType.ALL_TO_ALL, 10)],
                  1: [coll(1, CommType.ALL_REDUCE, 2048), coll(2, CommType.ALL_TO_ALL, 99)]})
    assert codes(validate_rankset(rs)) == ["collective-mismatch"]


def test_collective_count_mismatch():
    rs = rankset({0: [coll(1, CommType.ALL_REDUCE, 8), coll(2, CommType.ALL_REDUCE, 8)],
                  1: [coll(1, CommType.ALL_REDUCE, 8)]})
    [d] = validate_rankset(rs)
    assert d.code == "collective-count" and d.rank == 0 and d.node_id == 2


def test_rank_outside_group_is_reported():
    rs = rankset({0: [coll(1, CommType.ALL_REDUCE, 8, pg="2")], 1: []}, {"1": (0, 1), "2": (1,)})
    assert "not-in-group" in codes(validate_rankset(rs))


def test_unmatched_send_and_size_mismatch():
    rs = rankset({0: [send(1, 1, 0, 64), send(2, 1, 5, 64)], 1: [recv(1, 0, 0, 32)]})
    found = {(d.code, d.rank, d.node_id) for d in validate_rankset(rs)}
    assert ("p2p-size-mismatch", 0, 1) in found and ("unmatched-send", 0, 2) in found


def test_unmatched_recv():
    rs = rankset({0: [], 1: [recv(3, 0, 0, 32)]})
    assert [(d.code, d.rank, d.node_id) for d in validate_rankset(rs)] == [("unmatched-recv", 1, 3)]


def test_p2p_missing_peer_attributes():
    bad_send = Node(1, "s", SEND, attrs=make_attrs(comm_size=8))
    bad_recv = Node(2, "r", RECV, attrs=make_attrs(comm_tag=0, comm_size=8))
    assert codes(validate_graph(Graph([bad_send, bad_recv]))) == [
        "missing-comm-dst", "missing-comm-src", "missing-comm-tag"]


def test_wrong_oneof_kind_is_an_error():
    n = Node(1, "ar", COLL, attrs={"comm_type": Attr("int32_val", 0), "comm_size": Attr("uint64_val", 8)})
    found = [d for d in validate_graph(Graph([n])) if d.code == "attr-kind"]
    assert sorted(d.message.split()[0] for d in found) == ["comm_size", "comm_type"]


def test_pg_name_must_be_an_integer_in_the_group_file():
    nodes = [coll(1, CommType.ALL_REDUCE, 8, pg="ddp_bucket"), coll(2, CommType.ALL_REDUCE, 8, pg="7")]
    assert codes(validate_graph(Graph(nodes), {"1": (0,)})) == ["pg-not-integer", "unknown-pg"]
    assert codes(validate_graph(Graph(nodes[1:])), "warning") == ["no-comm-groups"]


def test_structure_duplicates_dangling_and_cycle():
    nodes = [Node(1, "a", COMP, (3,)), Node(2, "b", COMP, (1,), (99,)), Node(3, "c", COMP, (2,)),
             Node(2, "dup", COMP)]
    diags = validate_graph(Graph(nodes, source="g.0.et"))
    assert codes(diags) == ["cycle", "dangling-ctrl-dep", "duplicate-id"]
    cycle = next(d for d in diags if d.code == "cycle")
    assert "%1 -> %2 -> %3 -> %1" in cycle.message or "%3 -> %1 -> %2 -> %3" in cycle.message \
        or "%2 -> %3 -> %1 -> %2" in cycle.message


def test_streaming_and_in_memory_validation_agree(tmp_path):
    rs = rankset({0: [coll(1, CommType.ALL_REDUCE, 8), send(2, 1, 0, 4), Node(3, "x", COMP, (42,))],
                  1: [coll(1, CommType.ALL_GATHER, 8)]})
    rs.write(tmp_path, "t")
    streamed = validate_path(tmp_path / "t")
    assert sorted(d.code for d in streamed.diagnostics) == sorted(d.code for d in validate_rankset(rs))
    assert streamed.error_count == 3 and streamed.nodes == 4



@pytest.fixture
def cli():
    def _run(*args):
        code = "from chakra_tools.cli.main import validate_main; validate_main()"
        return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True)
    return _run


def test_cli_exit_codes_and_json(cli, tmp_path):
    good = rankset({r: [coll(1, CommType.ALL_REDUCE, 8)] for r in (0, 1)})
    good.write(tmp_path / "good", "t")
    bad = rankset({0: [coll(1, CommType.ALL_REDUCE, 8)], 1: [coll(1, CommType.BROADCAST, 8)]})
    bad.write(tmp_path / "bad", "t")
    ok = cli(tmp_path / "good")
    assert ok.returncode == 0, ok.stderr
    assert "2 rank(s) (the files do not record the job's size), 2 nodes: 0 error(s)" in ok.stdout
    failed = cli(tmp_path / "bad", "--json")
    assert failed.returncode == 1
    doc = json.loads(failed.stdout)
    assert doc["errors"] == 1 and doc["diagnostics"][0]["code"] == "collective-mismatch"
    assert doc["diagnostics"][0]["rank"] == 1
    missing = cli(tmp_path / "nothing-here")
    assert missing.returncode == 2 and "no trace files" in missing.stderr
    (tmp_path / "junk.0.et").write_bytes(b"\x05abc")
    corrupt = cli(tmp_path / "junk.0.et")
    assert corrupt.returncode == 2 and "byte 0" in corrupt.stderr and "Traceback" not in corrupt.stderr


def test_cli_comm_group_file_and_show(cli, tmp_path):
    rs = RankSet({r: Graph([coll(1, CommType.ALL_REDUCE, 8, pg="7"), Node(2, "x", COMP, (40 + r,)),
                            Node(3, "y", COMP, (50 + r,))], rank=r) for r in (0, 1)}, {})
    rs.write(tmp_path, "t")
    unchecked = cli(tmp_path / "t", "--json")
    doc = json.loads(unchecked.stdout)
    assert doc["counts"]["no-comm-groups"] == 2 and "unknown-pg" not in doc["counts"]
    (tmp_path / "g.json").write_text('{"1": [0, 1]}')
    checked = cli(tmp_path / "t", "--comm-group", tmp_path / "g.json", "--show", "1")
    assert checked.returncode == 1
    listed = [line for line in checked.stdout.splitlines() if line.startswith("error:")]
    assert sum("[dangling-data-dep]" in line for line in listed) == 1  # one shown ...
    assert "... and 3 more [dangling-data-dep]" in checked.stdout  # ... all four counted
    assert sum("[unknown-pg]" in line for line in listed) == 1 and "... and 1 more [unknown-pg]" in checked.stdout


def test_the_summary_says_whether_the_files_record_the_jobs_size(cli, tmp_path):
    """Without a recorded size a missing highest rank that nothing names is unseen: say so."""
    rs = rankset({r: [coll(1, CommType.ALL_REDUCE, 8)] for r in (0, 1)})
    rs.write(tmp_path / "ours", "t", record_world=True)
    ours = cli(tmp_path / "ours")
    assert "2 rank(s), 2 nodes" in ours.stdout and "record" not in ours.stdout
    assert json.loads(cli(tmp_path / "ours", "--json").stdout)["world_size"] == 2
    rs.write(tmp_path / "theirs", "t")
    assert json.loads(cli(tmp_path / "theirs", "--json").stdout)["world_size"] is None
