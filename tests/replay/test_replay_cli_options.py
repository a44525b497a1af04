"""trace-replay's what-if and capture options on tiny rank sets, each against hand-computed ns.

Units: 1 GB/s moves one byte per ns; the roofline is num_ops / min(bw * num_ops / bytes, peak).
"""

from __future__ import annotations

import json

import pytest

from typer.testing import CliRunner

from chakra_tools.cli.replay import app
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.rankfiles import write_comm_groups
from chakra_tools.core.model import Node, NodeType, make_attrs

from _util import coll, comp, write_rankset

runner = CliRunner()


def replay_json(*args) -> dict:
    res = runner.invoke(app, [*map(str, args), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def finish(doc) -> dict[int, int]:
    return {r["rank"]: r["finish_ns"] for r in doc["ranks"]}


def test_memory_pool_serialises_loads_of_all_ranks(tmp_path):
    """MEMORY_POOL (examples/configs/memory_pool.json): 800 ns + 256,000 B / 256 GB/s = 1,800 ns
    a load, one pool port, so the second rank's load waits for the first."""
    load = lambda i: Node(i, "load", NodeType.MEM_LOAD_NODE, attrs=make_attrs(tensor_size=256_000))
    prefix = write_rankset(tmp_path, {0: [load(1)], 1: [load(1)]})
    doc = replay_json(prefix, "--memory", "examples/configs/memory_pool.json")
    assert sorted(finish(doc).values()) == [1_800, 3_600]


def test_roofline_with_overrides_and_scale(tmp_path):
    # 1e9 flop over 1e6 B: intensity 1000 flop/B, 1000 GB/s -> 1e15 > peak 1e12: compute bound, 1 ms
    # 1e9 flop over 1e10 B: 0.1 flop/B -> 1e11 flop/s: memory bound, 10 ms
    prefix = write_rankset(tmp_path, {0: [comp(1, us=7, num_ops=10**9, tensor_size=10**6),
                                          comp(2, us=7, deps=(1,), num_ops=10**9, tensor_size=10**10)]})
    doc = replay_json(prefix, "--roofline", "--peak-tflops", 1, "--mem-bw-gbps", 1000)
    assert finish(doc) == {0: 1_000_000 + 10_000_000}
    measured = replay_json(prefix)  # without the roofline: the recorded 7 µs each
    assert finish(measured) == {0: 14_000}
    halved = replay_json(prefix, "--scale", "compute=0.5")
    assert finish(halved) == {0: 7_000}
    bad = runner.invoke(app, [str(prefix), "--scale", "gpu=2"])
    assert bad.exit_code != 0 and "--scale" in bad.output


def test_align_recorded_keeps_the_skew_between_ranks(tmp_path):
    a = Node(1, "a", NodeType.COMP_NODE, start_time_micros=100, duration_micros=5, attrs=make_attrs(is_cpu_op=False))
    b = Node(1, "b", NodeType.COMP_NODE, start_time_micros=150, duration_micros=5, attrs=make_attrs(is_cpu_op=False))
    prefix = write_rankset(tmp_path, {0: [a], 1: [b]})
    assert finish(replay_json(prefix)) == {0: 5_000, 1: 5_000}
    assert finish(replay_json(prefix, "--align", "recorded")) == {0: 5_000, 1: 55_000}
    assert runner.invoke(app, [str(prefix), "--align", "sideways"]).exit_code != 0


def test_host_gaps_keep_python_time_between_host_ops(tmp_path):
    ops = [Node(1, "h1", NodeType.COMP_NODE, start_time_micros=0, duration_micros=2, attrs=make_attrs(is_cpu_op=True)),
           Node(2, "h2", NodeType.COMP_NODE, (1,), start_time_micros=10, duration_micros=2,
                attrs=make_attrs(is_cpu_op=True))]
    prefix = write_rankset(tmp_path, {0: ops})
    assert finish(replay_json(prefix)) == {0: 4_000}
    assert finish(replay_json(prefix, "--host-gaps")) == {0: 12_000}  # the 8 µs gap is kept


def test_resolve_data_only_ignores_control_dependencies(tmp_path):
    nodes = [comp(1, us=50), Node(2, "c", NodeType.COMP_NODE, ctrl_deps=(1,), duration_micros=1,
                                  attrs=make_attrs(is_cpu_op=True))]
    prefix = write_rankset(tmp_path, {0: nodes})
    both = replay_json(prefix)
    data = replay_json(prefix, "--resolve", "data")
    start = lambda doc: next(e["start_ns"] for e in doc["events"] if e["node_id"] == 2)
    assert start(both) == 50_000 and start(data) == 0
    assert runner.invoke(app, [str(prefix), "--resolve", "nothing"]).exit_code != 0


def test_comm_group_file_given_on_the_command_line(tmp_path):
    """A group of ranks 0 and 2 only: rank 1 does not take part, so it finishes at once."""
    rs = RankSet({r: Graph([coll(1, 1 << 20, pg="5")] if r != 1 else [comp(1, us=1)], rank=r) for r in range(3)})
    rs.write(tmp_path / "ranks", "t")
    write_comm_groups(tmp_path / "groups.json", {"5": [0, 2]})
    doc = replay_json(tmp_path / "ranks" / "t", "--comm-group", tmp_path / "groups.json")
    [c] = {(c["pg"], c["bytes"]) for c in doc["collectives"]}
    assert c == ("5", 1 << 20)
    f = finish(doc)
    assert f[1] == 1_000 and f[0] == f[2] > 1_000
    missing = runner.invoke(app, [str(tmp_path / "ranks" / "t")])
    assert missing.exit_code != 0  # group 5 is unknown without the file


def test_comm_calibrated_and_host_time_timeline_replay_the_recorded_step(tmp_path):
    """Rank 1's step (exclusive 305 µs, recorded first) hides its wait for rank 0's send at
    300 µs; re-timed and calibrated, the replay takes the recorded 630 µs again."""
    from test_calibrated import pipeline_stage_ranks

    prefix = write_rankset(tmp_path, pipeline_stage_ranks())
    assert finish(replay_json(prefix))[1] == 325_000
    assert finish(replay_json(prefix, "--comm", "calibrated", "--host-time", "timeline"))[1] == 630_000
    for flag, value in (("--host-time", "wall"), ("--comm", "guessed")):
        bad = runner.invoke(app, [str(prefix), flag, value])
        assert bad.exit_code != 0 and flag in bad.output


def test_as_captured_is_the_three_capture_modes_and_each_can_be_overridden(tmp_path):
    from test_calibrated import pipeline_stage_ranks

    prefix = write_rankset(tmp_path, pipeline_stage_ranks())
    three = replay_json(prefix, "--comm", "calibrated", "--host-time", "timeline", "--align", "recorded")
    assert finish(replay_json(prefix, "--as-captured")) == finish(three)
    assert finish(replay_json(prefix, "--as-captured", "--host-time", "ops")) == finish(
        replay_json(prefix, "--comm", "calibrated", "--align", "recorded"))
    assert finish(replay_json(prefix, "--as-captured", "--host-time", "ops"))[1] != finish(three)[1]


def test_the_python_api_takes_the_same_modes(tmp_path):
    from test_calibrated import pipeline_stage_ranks

    from chakra_tools.replay import AS_CAPTURED, AnalyticalBackend, CaptureModes, default_network, replay
    from chakra_tools.core.errors import InputError

    prefix = write_rankset(tmp_path, pipeline_stage_ranks())
    backend = AnalyticalBackend(default_network(2))
    api = replay(prefix, backend, modes=AS_CAPTURED)
    assert {r["rank"]: r["finish_ns"] for r in api.to_dict()["ranks"]} == finish(replay_json(prefix, "--as-captured"))
    with pytest.raises(InputError, match="--comm 'guessed'"):
        replay(prefix, backend, modes=CaptureModes(comm="guessed"))


def test_memory_slot_option(tmp_path):
    """Two independent 10 us loads: one after the other on the communication slot (the default,
    as ASTRA-sim), side by side with --memory-slot own; anything else is refused."""
    loads = [Node(i, f"load{i}", NodeType.MEM_LOAD_NODE, duration_micros=10) for i in (1, 2)]
    prefix = write_rankset(tmp_path, {0: loads})

    def makespan(*args):
        res = runner.invoke(app, [str(prefix), "--json", *args])
        assert res.exit_code == 0, res.output
        return json.loads(res.output)["makespan_ns"]

    assert makespan() == 20_000 and makespan("--memory-slot", "own") == 10_000
    bad = runner.invoke(app, [str(prefix), "--memory-slot", "pool"])
    assert bad.exit_code != 0 and "comm or own" in bad.output


def test_a_network_beside_recorded_communication_is_named_as_mostly_unused(tmp_path):
    """--as-captured takes communication from the record; a --network beside it prices only what
    the record lacks, and the command says so instead of ignoring it silently."""
    prefix = write_rankset(tmp_path, {0: [comp(1, us=5)], 1: [comp(1, us=5)]})
    res = CliRunner().invoke(app, [str(prefix), "--as-captured", "--network", "examples/configs/ring_4npus.yml"])
    assert res.exit_code == 0, res.output
    assert "takes communication from the capture's record" in res.output and "--comm model" in res.output
    quiet = CliRunner().invoke(app, [str(prefix), "--network", "examples/configs/ring_4npus.yml"])
    assert "capture's record" not in quiet.output
