"""trace-replay validates the rank set first: it refuses what it cannot replay correctly (exit 1,
the first findings), ranks the set names without a file among them, `--no-validate` skips that,
and with `--absent-peers assume` a group whose ranks are not all given is named before the replay
starts."""

from __future__ import annotations

from typer.testing import CliRunner

from chakra_tools.cli.replay import app
from chakra_tools.core.model import CommType, Node, NodeType, make_attrs

from _util import coll, comp, write_rankset

runner = CliRunner()


def unsized_all_reduce(i, deps=()):
    """A COMM node as in the published 64-rank ResNet-50 `.et`: no comm_size."""
    return Node(i, f"ar{i}", NodeType.COMM_COLL_NODE, tuple(deps),
                attrs=make_attrs(comm_type=CommType.ALL_REDUCE, is_cpu_op=False))


def test_refuses_comm_nodes_without_comm_size(tmp_path):
    ranks = {r: [comp(1, us=5), unsized_all_reduce(2, deps=[1]), unsized_all_reduce(3, deps=[2])]
             for r in range(4)}
    prefix = write_rankset(tmp_path, ranks)
    res = runner.invoke(app, [str(prefix)])
    assert res.exit_code == 1, res.output
    assert "[missing-comm-size]" in res.output and "8 validation error(s): not replayed" in res.output
    assert "makespan" not in res.output
    skipped = runner.invoke(app, [str(prefix), "--no-validate"])
    assert skipped.exit_code == 0 and "makespan" in skipped.output


def test_names_the_ranks_a_group_lacks_and_refuses_unless_they_are_assumed(tmp_path):
    """One rank's file of a 4-rank job: refused (exit 1) naming each absent rank, rather than a
    replay that waits for them; `--absent-peers assume` names the group's absent ranks before
    replaying without them, and `--no-validate` runs into the deadlock (exit 3)."""
    prefix = write_rankset(tmp_path, {0: [comp(1, us=5), coll(2, 1024, deps=[1], pg="1")]},
                           {"1": (0, 1, 2, 3)})
    res = runner.invoke(app, [str(prefix)])
    assert res.exit_code == 1, res.output
    assert res.output.count("[missing-rank]") == 3 and "makespan" not in res.output
    assert "rank 1: no file, but rank 0 node 2 ('coll2') is a collective on group 1" in res.output
    assumed = runner.invoke(app, [str(prefix), "--absent-peers", "assume"])
    assert assumed.exit_code == 0, assumed.output
    assert "[partial-group]" in assumed.output and "([1, 2, 3])" in assumed.output
    assert assumed.output.index("[partial-group]") < assumed.output.index("makespan")
    unchecked = runner.invoke(app, [str(prefix), "--no-validate"])
    assert unchecked.exit_code == 3 and "deadlock" in unchecked.output


def test_the_comm_group_file_is_read_once_for_validation_and_replay(tmp_path, monkeypatch):
    """Validation and the replay share one read of comm_group.json (on a 131,072-rank set it was
    read three times: validation, the groups, the feeders)."""
    import json

    import chakra_tools.core.graph as graph
    from chakra_tools.replay import replay_rankset

    ranks = {r: [comp(1, us=5), coll(2, 1 << 20, deps=[1], pg="7")] for r in range(4)}
    prefix = write_rankset(tmp_path, ranks)
    (tmp_path / "comm_group.json").write_text(json.dumps({"7": [0, 1, 2, 3]}))
    reads = []
    real = graph.read_comm_groups
    monkeypatch.setattr(graph, "read_comm_groups", lambda path: reads.append(path) or real(path))
    import chakra_tools.core.validate as validate
    import chakra_tools.replay.api as api

    monkeypatch.setattr(api, "read_comm_groups", graph.read_comm_groups)
    monkeypatch.setattr(validate, "read_comm_groups", graph.read_comm_groups)
    result = replay_rankset(prefix)
    assert len(reads) == 1 and result.makespan_ns > 0
    assert [(c["pg"], c["ranks"]) for c in result.collectives] == [("7", [0, 1, 2, 3])]
