"""A rank the set names but no file holds is an error, whoever wrote the files (ASTRA-sim's and
Chakra's carry no `world_size`): a send's destination, a receive's source, a member of a group a
collective runs on or of comm_group.json, a gap in the file numbers. `trace-replay` validates
first, so it refuses such a set instead of replaying the ranks given (or waiting forever);
`--absent-peers assume` takes the set as one part of a larger job (warnings only).

The real sets are ASTRA-sim's own (../shared/fixtures/external/PROVENANCE.md): the 8-rank ring
all-reduce spelled out as sends and receives, and the 4-rank all-reduce, one rank file removed."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from chakra_tools.cli.replay import app as replay_app
from chakra_tools.cli.validate import app as validate_app
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import CommType, Node, NodeType, make_attrs
from chakra_tools.core.validate import validate_path, validate_rankset

runner = CliRunner()
RING = "astra-sim/custom_ring_allreduce_8npus_1MB"
ALL_REDUCE = "astra-sim/all_reduce_4npus_1MB"


def without(shared_fixtures, tmp_path, folder: str, rank: int):
    """A copy of the fixture `folder` with rank `rank`'s file removed."""
    out = shutil.copytree(shared_fixtures / folder, tmp_path / "set")
    (victim,) = out.glob(f"*.{rank}.et")
    victim.unlink()
    return out


def send(i, dst, deps=()):
    return Node(i, f"send{i}", NodeType.COMM_SEND_NODE, tuple(deps),
                attrs=make_attrs(comm_dst=dst, comm_size=1024, comm_tag=0, is_cpu_op=False))


def recv(i, src, deps=()):
    return Node(i, f"recv{i}", NodeType.COMM_RECV_NODE, tuple(deps),
                attrs=make_attrs(comm_src=src, comm_size=1024, comm_tag=0, is_cpu_op=False))


def coll(i, pg):
    return Node(i, f"coll{i}", NodeType.COMM_COLL_NODE, (),
                attrs=make_attrs(comm_type=CommType.ALL_REDUCE, comm_size=4096, pg_name=pg, is_cpu_op=False))


def write(tmp_path, ranks: dict, groups=None, record_world=False):
    RankSet({r: Graph(nodes, rank=r) for r, nodes in ranks.items()}, dict(groups or {})).write(
        tmp_path, "t", record_world=record_world)
    return tmp_path / "t"


def missing(report) -> list[tuple[str, str]]:
    return [(d.code, d.message) for d in report.errors]


# --------------------------------------------------------------------------------------------
# ASTRA-sim's sets, one rank removed
# --------------------------------------------------------------------------------------------

def test_the_ring_without_rank_6_is_an_error_naming_who_sends_to_it(shared_fixtures, tmp_path):
    ring = without(shared_fixtures, tmp_path, RING, 6)
    res = runner.invoke(validate_app, [str(ring)])
    assert res.exit_code == 1, res.output
    (line,) = [x for x in res.output.splitlines() if x.startswith("error:")]
    assert line.startswith(f"error: {ring}/custom_allreduce.5.et: rank 6: no file, but rank 5 node 0 "
                           "('COMM_SEND_NODE_tb0_step0') sends to it (named 28 times)")  # 14 sends, 14 receives
    assert line.endswith("[missing-rank]") and "--absent-peers assume" in line
    assert "7 rank(s) (the files do not record the job's size), 245 nodes: 1 error(s), 0 warning(s) — FAILED" in res.output


def test_trace_replay_refuses_the_ring_without_rank_6(shared_fixtures, tmp_path):
    ring = without(shared_fixtures, tmp_path, RING, 6)
    res = runner.invoke(replay_app, [str(ring)])
    assert res.exit_code == 1, res.output
    assert "rank 6: no file" in res.output and "not replayed" in res.output and "makespan" not in res.output


def test_absent_peers_assume_takes_the_ring_as_part_of_a_larger_job(shared_fixtures, tmp_path):
    ring = without(shared_fixtures, tmp_path, RING, 6)
    res = runner.invoke(validate_app, [str(ring), "--absent-peers", "assume"])
    assert res.exit_code == 0, res.output
    assert res.output.count("[peer-absent]") == 28 and "[missing-rank]" not in res.output
    assert runner.invoke(validate_app, [str(ring), "--absent-peers", "maybe"]).exit_code == 2


def test_the_whole_ring_still_validates(shared_fixtures):
    report = validate_path(shared_fixtures / RING)
    assert report.ranks == list(range(8)) and not report.diagnostics.counts


def test_a_gap_in_the_file_numbers_is_an_error(shared_fixtures, tmp_path):
    """The 4-rank all-reduce names no rank (one collective on the world, no metadata); without
    rank 1 the files 0, 2, 3 are still no set ASTRA-sim can read (it reads files 0..N-1)."""
    ar = without(shared_fixtures, tmp_path, ALL_REDUCE, 1)
    assert missing(validate_path(ar)) == [(
        "missing-ranks", "the files go up to rank 3 (a rank set is one file for each rank 0..N-1, as "
        "ASTRA-sim reads them); 1 has no file [1]")]
    res = runner.invoke(replay_app, [str(ar)])
    assert res.exit_code == 1 and "[missing-ranks]" in res.output and "makespan" not in res.output


def test_the_top_rank_named_only_by_comm_group_json(shared_fixtures, tmp_path):
    """Rank 3 of the 4-rank all-reduce: only the communicator-group file names it."""
    ar = without(shared_fixtures, tmp_path, ALL_REDUCE, 3)
    (ar / "comm_group.json").write_text(json.dumps({"1": [0, 1, 2, 3]}))
    ((code, message),) = missing(validate_path(ar))
    assert code == "missing-rank"
    assert message.startswith("rank 3: no file, but group 1 of the communicator-group file has it")
    assert validate_path(ar).errors[0].file == str(ar / "comm_group.json")
    assert runner.invoke(replay_app, [str(ar)]).exit_code == 1


# --------------------------------------------------------------------------------------------
# hand-made sets: each way a rank is named
# --------------------------------------------------------------------------------------------

def test_a_receive_from_an_absent_rank(tmp_path):
    prefix = write(tmp_path, {0: [send(1, dst=1)], 1: [recv(1, src=0), recv(2, src=2, deps=[1])]})
    report = validate_path(prefix)
    assert missing(report) == [("missing-rank", "rank 2: no file, but rank 1 node 2 ('recv2') receives from "
                                "it; add its file, or, if the set is one part of a larger job, pass "
                                "--absent-peers assume")]
    assert report.errors[0].file == str(tmp_path / "t.1.et") and report.errors[0].extra == {"missing_rank": 2}
    assert report.to_dict()["diagnostics"][0]["extra"] == {"missing_rank": 2}


def test_a_collectives_group_member(tmp_path):
    prefix = write(tmp_path, {r: [coll(1, "1"), coll(2, "1")] for r in (0, 1)}, {"1": (0, 1, 2)})
    ((code, message),) = missing(validate_path(prefix))
    assert code == "missing-rank"
    assert message.startswith("rank 2: no file, but rank 0 node 1 ('coll1') is a collective on group 1, which "
                              "has it (named 4 times)")


def test_with_our_metadata_a_named_rank_is_said_once(tmp_path):
    """A set written with its `world_size`: the rank that went missing is named by who talks to it,
    not listed a second time among the ranks the count says are absent."""
    ranks = {r: [send(1, dst=(r + 1) % 4), recv(2, src=(r - 1) % 4, deps=[1])] for r in range(4)}
    write(tmp_path, ranks, record_world=True)
    assert not validate_path(tmp_path).diagnostics.counts
    (tmp_path / "t.2.et").unlink()
    errors = validate_path(tmp_path).errors
    assert [(e.code, e.extra["missing_rank"]) for e in errors] == [("missing-rank", 2)]
    assert errors[0].message.startswith("rank 2: no file, but rank 1 node 1 ('send1') sends to it (named 2 times)")


def test_a_peer_that_is_no_rank(tmp_path):
    prefix = write(tmp_path, {0: [send(1, dst=-1)]})
    ((code, message),) = missing(validate_path(prefix))
    assert code == "missing-rank" and message.startswith("rank -1 (no rank: ranks are 0..2147483647): no file")


def test_a_single_rank_above_zero_lacks_the_ranks_below(tmp_path):
    """One rank's file of many (rank 5 of a job): ranks 0..4 are absent; assumed, it validates."""
    prefix = write(tmp_path, {5: [coll(1, "1")]}, {"1": (4, 5, 6, 7)})
    report = validate_path(prefix)
    assert [(e.code, e.extra.get("missing_rank")) for e in report.errors] == [
        ("missing-ranks", None), ("missing-rank", 4), ("missing-rank", 6), ("missing-rank", 7)]
    assert report.errors[0].message.endswith("4 have no file [0..3]")
    assumed = validate_path(prefix, absent_peers=True)
    assert not assumed.errors and [d.code for d in assumed.diagnostics] == ["partial-group"]


def test_validate_rankset_checks_the_ranks_it_was_given_unless_asked_for_a_whole_job():
    """A conversion validates the ranks it converted, often one part of a job."""
    rs = RankSet({0: Graph([send(1, dst=1)], rank=0)}, {})
    assert [d.code for d in validate_rankset(rs)] == []  # one rank: no pairing checked
    assert [d.code for d in validate_rankset(rs, absent_peers=False)] == ["missing-rank"]


@pytest.mark.parametrize("extra", [[], ["--absent-peers", "assume"]])
def test_a_whole_set_gives_the_same_verdict_either_way(tmp_path, extra):
    prefix = write(tmp_path, {0: [send(1, dst=1)], 1: [recv(1, src=0)]})
    res = runner.invoke(validate_app, [str(prefix), *extra])
    assert res.exit_code == 0 and "0 error(s), 0 warning(s)" in res.output, res.output


def test_a_network_of_more_npus_than_files_names_the_ranks_without_one(shared_fixtures, tmp_path):
    """ASTRA-sim's 4-rank all-reduce without rank 3 reads as a 3-rank job (nothing in the files
    names rank 3); replayed on its 4-NPU network, the replay says which ranks have no file."""
    import shutil

    from chakra_tools.replay import SystemSpec, replay_rankset

    src = shared_fixtures / "astra-sim" / "all_reduce_4npus_1MB"
    shutil.copytree(src, tmp_path / "set")
    (tmp_path / "set" / "all_reduce.3.et").unlink()
    said = []
    spec = SystemSpec(network=shared_fixtures / "astra-sim" / "configs" / "Ring_4npus.yml")
    replay_rankset(tmp_path / "set", spec, on_warning=said.append)
    (warn,) = [d for d in said if d.code == "network-larger"]
    assert "4 NPUs, the rank set 3 files: rank 3 has none" in warn.message
    said.clear()
    replay_rankset(src, spec, on_warning=said.append)
    assert not [d for d in said if d.code == "network-larger"]
