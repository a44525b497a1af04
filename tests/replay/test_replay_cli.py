"""trace-replay on the command line: the table, --json, --out, --timeline, --manifest."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from chakra_tools.cli.replay import app
from chakra_tools.core.chrome_trace import load
from chakra_tools.replay.fidelity import compare_with_manifest, format_comparison

from _util import coll, comp, write_rankset

runner = CliRunner()


@pytest.fixture()
def astra(shared_fixtures):
    a = shared_fixtures / "astra-sim"
    return [str(a / "all_reduce_4npus_1MB"), "--network", str(a / "configs/Ring_4npus.yml"),
            "--system", str(a / "configs/Ring_4chunks.json")]


def test_table(astra):
    res = runner.invoke(app, astra)
    assert res.exit_code == 0, res.output
    assert "makespan 43.000 us" in res.output
    assert "finish us" in res.output and "idle us" in res.output  # one unit per column, in the header
    # the four ranks finish alike: one row for them, not four
    assert [line.split()[:2] for line in res.output.splitlines() if "-" in line.split()[0]] == [["0-3", "43.000"]]


def test_ranks_that_differ_keep_their_own_rows():
    from chakra_tools.replay.result import ReplayResult

    r = ReplayResult()
    r.makespan_ns = 3000
    r.ranks = [{"rank": k, "finish_ns": f, "compute_ns": 0, "exposed_comm_ns": 0, "overlap_ns": 0, "idle_ns": 0,
                "nodes": 1} for k, f in ((0, 1000), (1, 1000), (2, 3000), (3, 1000), (5, 1000))]
    firsts = [line.split()[0] for line in r.table().splitlines()[1:-1]]
    assert firsts == ["0-1", "2", "3", "5"]  # a gap in the ranks breaks a run too


def test_json_out_and_timeline(astra, tmp_path):
    out, tl = tmp_path / "r.json", tmp_path / "tl.json"
    res = runner.invoke(app, astra + ["--json", "--out", str(out), "--timeline", str(tl)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc == json.loads(out.read_text())
    assert [(r["rank"], r["finish_ns"], r["compute_ns"], r["exposed_comm_ns"]) for r in doc["ranks"]] == [
        (i, 43_000, 0, 43_000) for i in range(4)]
    assert {"makespan_ns", "ranks", "collectives", "events", "deps", "critical_path", "config"} <= set(doc)
    assert doc["collectives"][0]["comm_type"] == "ALL_REDUCE"
    assert doc["config"]["network"]["dims"][0]["topology"] == "Ring"
    trace = load(tl)
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == 4 and {e["pid"] for e in slices} == {0, 1, 2, 3}
    assert all(e["dur"] == 43.0 for e in slices)
    assert sum(e["ph"] == "s" for e in trace["traceEvents"]) == 3  # last arriver -> the others


def test_manifest_comparison(tmp_path):
    prefix = write_rankset(tmp_path, {0: [comp(1, us=100), coll(2, 1 << 16, deps=(1,))],
                                      1: [comp(1, us=100), coll(2, 1 << 16, deps=(1,))]})
    man = tmp_path / "manifest.json"
    man.write_text(json.dumps({"captured_steps": [1], "ranks": [
        {"rank": 0, "step_times_ns": [900_000, 110_000]}, {"rank": 1, "step_times_ns": [900_000, 100_000]}]}))
    res = runner.invoke(app, [str(prefix), "--manifest", str(man), "--json"])
    assert res.exit_code == 0, res.output
    fid = json.loads(res.output)["fidelity"]
    pred = fid["ranks"][0]["predicted_ns"]
    assert pred > 100_000
    assert fid["ranks"][0]["measured_ns"] == 110_000 and fid["ranks"][1]["measured_ns"] == 100_000
    assert fid["ranks"][1]["error"] == pytest.approx((pred - 100_000) / 100_000, abs=1e-6)
    text = runner.invoke(app, [str(prefix), "--manifest", str(man)]).output
    assert "mean |error|" in text
    assert "--as-captured replays it as it ran" in text  # the hint, on the network model only
    assert "--as-captured replays" not in runner.invoke(
        app, [str(prefix), "--manifest", str(man), "--as-captured"]).output


def test_compare_with_manifest_by_hand():
    doc = {"ranks": [{"rank": 0, "finish_ns": 3_000}, {"rank": 1, "finish_ns": 2_400}]}
    man = {"ranks": [{"rank": 0, "captured_steps": [2, 3], "step_times_ns": [5, 5, 1_000, 1_000]},
                     {"rank": 1, "captured_steps": [2, 3], "step_times_ns": [5, 5, 1_000, 1_000]}]}
    cmp = compare_with_manifest(doc, man)
    assert [r["error"] for r in cmp["ranks"]] == [0.5, 0.2]
    assert cmp["mean_abs_error"] == pytest.approx(0.35)
    assert "35.0%" in format_comparison(cmp)


def test_bad_inputs_are_one_line_errors(tmp_path, astra):
    res = runner.invoke(app, [str(tmp_path / "nothing")])
    assert res.exit_code == 2 and "no trace files" in res.output
    res = runner.invoke(app, astra + ["--offload", "0"])
    assert res.exit_code == 2 and "not a Switch dimension" in res.output
    res = runner.invoke(app, astra + ["--limits", "gpu=2"])
    assert res.exit_code == 2 and "unknown lane" in res.output


def test_deadlock_exits_3_with_the_blocked_nodes(tmp_path):
    from _util import recv, send

    prefix = write_rankset(tmp_path, {0: [send(1, dst=1, size=8, tag=1)], 1: [recv(1, src=0, size=8, tag=2)]})
    res = runner.invoke(app, [str(prefix)])  # validation finds the unmatched pair first
    assert res.exit_code == 1 and "[unmatched-send]" in res.output
    res = runner.invoke(app, [str(prefix), "--no-validate"])
    assert res.exit_code == 3
    assert "deadlock" in res.output and "recv waits for a send from rank 0 tag 2" in res.output


def test_the_command_is_one_call_of_the_api(shared_fixtures, tmp_path):
    """What `trace-replay --out` writes, the public API writes too: options -> SystemSpec and
    modes, replay_rankset, write; and the document reads back typed."""
    from chakra_tools.core.replaydoc import read_replay_result
    from chakra_tools.replay import AS_CAPTURED, Scales, SystemSpec, replay_rankset

    a = shared_fixtures / "astra-sim"
    net, sysj = a / "configs/Ring_4npus.yml", a / "configs/Ring_4chunks.json"
    cli_out, api_out = tmp_path / "cli.json", tmp_path / "api.json"
    res = runner.invoke(app, [str(a / "all_reduce_4npus_1MB"), "--network", str(net), "--system", str(sysj),
                              "--scale", "comm=2", "--as-captured", "--out", str(cli_out)])
    assert res.exit_code == 0, res.output
    spec = SystemSpec(net, sysj, scales=Scales(comm=2.0))
    replay_rankset(a / "all_reduce_4npus_1MB", spec, modes=AS_CAPTURED).write(api_out)
    assert api_out.read_text() == cli_out.read_text()
    doc = read_replay_result(api_out)
    assert doc.makespan_ns == 86_000 and {e.work for e in doc.events} == {"comm"}


def test_a_short_implementation_list_is_said_once(tmp_path, shared_fixtures):
    """Ring_4chunks.json (one implementation each) on a 2-D network: trace-replay warns that a
    collective over every NPU spans dimension 0 only, as in ASTRA-sim, and replays it so."""
    a = shared_fixtures / "astra-sim"
    net = tmp_path / "grid.yml"
    net.write_text("topology: [ Ring, Switch ]\nnpus_count: [ 2, 2 ]\nbandwidth: [ 50, 25 ]\nlatency: [ 500, 700 ]\n")
    prefix = write_rankset(tmp_path, {r: [coll(1, 1 << 20)] for r in range(4)})
    res = runner.invoke(app, [str(prefix), "--network", str(net), "--system", str(a / "configs/Ring_4chunks.json")])
    assert res.exit_code == 0, res.output
    [line] = [x for x in res.output.splitlines() if "[implementation-dims]" in x]
    assert line.startswith(f"warning: {a / 'configs/Ring_4chunks.json'}: all-reduce-implementation, ")
    assert line.count("Ring_4chunks.json") == 1 and "name 1 of the network's 2 dimensions" in line
    assert "makespan 24.620 us" in res.output  # each ring of dimension 0 alone: 518bd51 ends every rank at 24,620 ns
    plain = runner.invoke(app, [str(prefix), "--network", str(net)])
    assert "implementation-dims" not in plain.output and "the first 1 only" not in plain.output
