"""One rank file of a multi-rank job (most public traces are one rank of many): by default
validation refuses it (its messages name ranks no file holds); unvalidated, the replay waits for
them and stops with a deadlock naming them and the option; `absent_peers` (`--absent-peers
assume`) replays it as if they arrived with the ranks given, the network still costing the whole
group."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from chakra_tools.cli.replay import app
from chakra_tools.convert.run import convert, inputs_from_files
from chakra_tools.core.errors import InputError
from chakra_tools.feed import DeadlockError
from chakra_tools.replay import AS_CAPTURED, replay_rankset
from chakra_tools.replay.api import RanksetRefused, open_rankset
from chakra_tools.replay.engine import Replayer

from _util import backend, coll, comp, events, recv, ring_net, send, write_rankset

WORLD = {"0": [0, 1, 2, 3]}


def _replay(tmp_path, ranks, absent_peers):
    feeders, groups = open_rankset(write_rankset(tmp_path, ranks, WORLD))
    return Replayer(feeders, backend(ring_net(4)), groups=groups, absent_peers=absent_peers).run()


def test_a_collective_with_absent_members_is_costed_on_the_whole_group(tmp_path):
    """Rank 0 alone finishes its all-reduce when it would among all four (they arrive together)."""
    nodes = lambda: [comp(1, 10), coll(2, 1 << 20, deps=[1], pg="0")]  # noqa: E731
    whole = _replay(tmp_path / "all", {r: nodes() for r in range(4)}, absent_peers=False)
    alone = _replay(tmp_path / "one", {0: nodes()}, absent_peers=True)
    assert events(alone)[(0, 2)] == events(whole)[(0, 2)]
    assert events(whole)[(0, 2)][1] - events(whole)[(0, 2)][0] > 10_000  # a real 4-rank transfer
    with pytest.raises(DeadlockError, match=r"waits for ranks \[1, 2, 3\].*--absent-peers assume"):
        _replay(tmp_path / "wait", {0: nodes()}, absent_peers=False)


def test_a_send_and_a_receive_to_an_absent_peer_take_their_transfer(tmp_path):
    ranks = {0: [send(1, dst=1, size=1 << 20), recv(2, src=1, size=1 << 20, deps=[1])]}
    whole = _replay(tmp_path / "all", {**ranks, 1: [recv(1, src=0, size=1 << 20), send(2, dst=0, size=1 << 20, deps=[1])]},
                    absent_peers=False)
    alone = _replay(tmp_path / "one", ranks, absent_peers=True)
    assert events(alone)[(0, 2)][1] == events(whole)[(0, 2)][1] > 0
    with pytest.raises(InputError, match="comm_dst=1 is not a rank of this set.*--absent-peers assume"):
        _replay(tmp_path / "wait", ranks, absent_peers=False)


@pytest.fixture(scope="module")
def one_rank_of_two(shared_fixtures, tmp_path_factory):
    """HTA's device-only trace: rank 0 of a 2-rank job, 21 NCCL collectives on group [0, 1]."""
    out = tmp_path_factory.mktemp("hta")
    convert(inputs_from_files([], [str(shared_fixtures / "hta/nccl_metadata_kineto.json.gz")], []), out,
            executor="serial")
    return out


def test_one_rank_of_a_real_job_replays_as_captured_with_absent_peers_assumed(one_rank_of_two):
    with pytest.raises(RanksetRefused) as refused:
        replay_rankset(one_rank_of_two, modes=AS_CAPTURED, on_warning=lambda d: None)
    assert {d.code for d in refused.value.report.errors} == {"missing-rank"}
    with pytest.raises(DeadlockError, match=r"ranks \[1\] are not in this set"):
        replay_rankset(one_rank_of_two, modes=AS_CAPTURED, validate=False)
    result = replay_rankset(one_rank_of_two, modes=AS_CAPTURED, on_warning=lambda d: None, absent_peers=True)
    assert len(result.collectives) == 21
    assert abs(result.fidelity["job"]["error"]) < 0.02  # as captured: its own window, measured


def test_trace_replay_absent_peers_option(one_rank_of_two):
    res = CliRunner().invoke(app, [str(one_rank_of_two), "--as-captured", "--absent-peers", "assume"])
    assert res.exit_code == 0, res.output
    assert any(line.startswith("error ") and "(the traced window across ranks" in line for line in res.output.splitlines())
    bad = CliRunner().invoke(app, [str(one_rank_of_two), "--absent-peers", "maybe"])
    assert bad.exit_code != 0 and "--absent-peers" in bad.output


def test_a_rank_set_with_no_node_says_so(tmp_path):
    """A device trace with no host op and no device work converts to empty rank files (one of
    HTA's inference traces): the replay's makespan of 0 comes with a warning, not silence."""
    heard = []
    result = replay_rankset(write_rankset(tmp_path, {0: []}), on_warning=heard.append)
    assert result.makespan_ns == 0 and [d.code for d in heard] == ["nothing-to-replay"]
