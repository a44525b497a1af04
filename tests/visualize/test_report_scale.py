"""trace-visualize report for a scaled run (visualize/whatif.py): the prediction of a rank set
rescaled by trace-convert scale, replayed on a network trace-convert calibrate fitted, against the
measured step of a run at the target scale; and the fit itself, read typed from fit.json.

The inputs are made by the real commands (calibrate, scale) from a small timed DDP-like 2-rank
capture written here; the run at the target scale is a trace-capture manifest written here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chakra_tools.convert.scale import scale
from chakra_tools.core.errors import InputError
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import CommType, Metadata, Node, NodeType as T, make_attr, make_attrs
from chakra_tools.replay import compare_with_manifest, replay
from chakra_tools.replay.calfile import format_calibration, read_calibration, write_calibration
from chakra_tools.replay.netfit import calibrate
from chakra_tools.replay.spec import SystemSpec
from chakra_tools.visualize.report import render_html, report_data
from chakra_tools.visualize.sources import load_events
from chakra_tools.visualize.whatif import whatif_data

T0_US = 1_000_000
STEP_US = 10_000
SIZES = (4096, 1 << 20)  # two all-reduce sizes: the fit separates latency from bandwidth


def ddp_rank(r: int, steps: int = 2) -> Graph:
    """Per step: the step node (exclusive 3 ms, of which 2 ms the host waits for the all-reduce),
    forward 2 ms, the gradient all-reduce (pg 1), the optimizer after it."""
    nodes, nid = [], 1
    windows = []
    for s in range(steps):
        t = T0_US + s * STEP_US
        size = SIZES[s % 2]
        coll_us = 300 + size // 2000 + 50 * r
        nodes += [
            Node(nid, f"ProfilerStep#{s}", T.COMP_NODE, start_time_micros=t, duration_micros=3000,
                 attrs=make_attrs(is_cpu_op=True, tid=1, duration_ns=3_000_000)),
            Node(nid + 1, "aten::mm", T.COMP_NODE, (nid,), start_time_micros=t + 100, duration_micros=2000,
                 attrs=make_attrs(is_cpu_op=True, tid=1)),
            Node(nid + 2, "gloo:all_reduce", T.COMM_COLL_NODE, (nid + 1,), start_time_micros=t + 2100,
                 duration_micros=coll_us,
                 attrs=make_attrs(comm_type=CommType.ALL_REDUCE, comm_size=size, pg_name="1", is_cpu_op=False,
                                  group_size=2)),
            Node(nid + 3, "Optimizer.step#SGD.step", T.COMP_NODE, (nid + 2,), start_time_micros=t + 4200,
                 duration_micros=500, attrs=make_attrs(is_cpu_op=True, tid=1)),
        ]
        windows += [t * 1000, (t + 4700) * 1000]
        nid += 4
    groups = {"1": {"ranks": [0, 1], "torch_name": "0", "desc": "default_pg"}}
    meta = Metadata(attrs={"rank": make_attr("rank", r), "world_size": make_attr("world_size", 2),
                           "process_groups": make_attr("process_groups", json.dumps(groups)),
                           "profiler_steps_ns": make_attr("profiler_steps_ns", windows),
                           "measured_window_ns": make_attr("measured_window_ns", [windows[0], windows[-1]])})
    return Graph(nodes, rank=r, metadata=meta)


def target_run(folder: Path, ranks: int, step_ns=(6_000_000, 6_400_000)) -> Path:
    """A trace-capture manifest of a run at `ranks`: two captured steps, rank r starting 10 µs
    after rank r-1."""
    folder.mkdir(parents=True)
    doc = {"status": "ok", "world_size": ranks, "backend": "gloo", "captured_steps": [0, 1],
           "ranks": [{"rank": r, "status": "ok", "step_times_ns": list(step_ns),
                      "step_starts_unix_ns": [10_000 * r, 10_000 * r + step_ns[0]]} for r in range(ranks)]}
    (folder / "manifest.json").write_text(json.dumps(doc))
    return folder


@pytest.fixture
def scaled_set(tmp_path):
    """(the 2-rank capture, its network folder, the set scaled to 4 ranks)."""
    RankSet({r: ddp_rank(r) for r in (0, 1)}, {"1": (0, 1)}).write(tmp_path / "cap", "trace", record_world=True)
    net = tmp_path / "net"
    net.mkdir()
    write_calibration(calibrate(tmp_path / "cap", npus=4), net)
    scale(tmp_path / "cap", 4, tmp_path / "dp4")
    return tmp_path / "cap", net, tmp_path / "dp4"


def test_prediction_against_a_real_run_at_the_target_is_what_the_replay_api_computes(scaled_set, tmp_path):
    cap, net, dp4 = scaled_set
    run = target_run(tmp_path / "run4", 4)
    data = whatif_data([dp4], fit=net, measured=run)
    (pred,) = data["predictions"]
    cal = calibrate(cap, npus=4)
    # the report's prediction is trace-replay --network-fit's: the same backend, the same figure
    doc = replay(dp4, SystemSpec(kind_fit=net).backend(4), record_events=False).to_dict(events=False)
    job = compare_with_manifest(doc, run / "manifest.json")["job"]
    assert pred["scaled_from"] == {"dp": 2, "batch": "per-rank", "steps": 2, "tp": 1, "pp": 1} and pred["ranks"] == 4
    assert pred["predicted_step_ns"] == job["predicted_ns"] == pytest.approx(doc["makespan_ns"] / 2, abs=1)
    window = 30_000 + 6_000_000 + 6_400_000  # rank 3 starts 30 µs late; the window to its 2nd step's end
    assert pred["measured"]["measured_ns"] == job["measured_ns"] == pytest.approx(window / 2, abs=1)
    assert pred["measured"]["error"] == job["error"] and pred["notes"] == []
    # and as ASTRA-sim runs it on the files calibrate wrote, against the same run
    on_files = SystemSpec(network=net / "network.yml", system=net / "system.json").backend(4)
    by_files = compare_with_manifest(replay(dp4, on_files, record_events=False).to_dict(events=False),
                                     run / "manifest.json")["job"]
    assert pred["network_file"] == {"network": str(net / "network.yml"), "predicted_step_ns": by_files["predicted_ns"],
                                    "error": by_files["error"]}
    assert pred["network"].startswith(f"trace-replay --network-fit {net / 'fit.json'}")
    # the fit is calibrate's, read back from fit.json typed: every number equal
    assert data["fit"]["buckets"] == cal.rows and data["fit"]["kinds"] == cal.kinds
    assert data["fit"]["fit"]["latency_ns"] == cal.fit.latency_ns and data["fit"]["npus"] == 4
    assert data["fit"]["file"] == str(net / "fit.json")

    sets = [load_events(dp4)]
    assert sets[0].label == "scaled" and "scaled from 2 to 4 ranks" in sets[0].notes[0]
    assert "comparison" not in report_data(sets, data)  # copied times are not measured ones
    html = render_html(sets, whatif=data)
    # the page leads with the prediction and its error, before anything the copied times show
    headline = html[html.index('data-headline="prediction"'):]
    assert f'{job["predicted_ns"] / 1e6:.3f} ms' in headline[:300] and f'{100 * job["error"]:+.1f}%' in headline[:600]
    assert html.index('data-headline="prediction"') < html.index('class="card">scaled')
    assert html.index('id="whatif"') < html.index('id="breakdown"')
    section = html[html.index('id="whatif"'):html.index('id="network-fit"')]
    for text in (f'{job["predicted_ns"] / 1e6:.3f}', f'{job["measured_ns"] / 1e6:.3f}', f'{100 * job["error"]:+.1f}%',
                 "2 → 4 ranks (per-rank batch)"):
        assert text in section, text
    fit_part = html[html.index('id="network-fit"'):]
    assert f"latency <b>{cal.fit.latency_ns:.0f} ns</b>" in fit_part
    per_kind = fit_part[fit_part.index('data-chart="fit-per-kind"'):]
    assert f'<td>{cal.per_kind["ALL_REDUCE"].latency_ns:.0f}</td>' in per_kind[:per_kind.index("</table>")]
    residuals = fit_part[fit_part.index('data-chart="fit-residuals"'):]
    residuals = residuals[:residuals.index("</table>")]
    assert residuals.count("<tr>") == 1 + len(cal.rows) == 3  # header + one row per (kind, size)
    for row in cal.rows:
        assert f'<td>{row["size"]}</td>' in residuals and f'{100 * row["error"]:+.1f}%' in residuals
        assert f'<td>{row["predicted_ns"] / 1e3:.1f}</td>' in residuals


def test_without_a_measured_run_the_report_says_the_scaled_files_keep_none(scaled_set):
    _, net, dp4 = scaled_set
    (pred,) = whatif_data([dp4], fit=net)["predictions"]
    assert pred["measured"] is None and pred["steps"] == 2
    assert pred["predicted_step_ns"] == pred["makespan_ns"] / 2
    assert any("keep no measured window" in n and "4 rank(s)" in n for n in pred["notes"])
    html = render_html([load_events(dp4)], whatif=whatif_data([dp4], fit=net))
    assert "keep no measured window" in html and "<td>none</td>" in html
    (bare,) = whatif_data([dp4])["predictions"]  # no network: nothing predicted, and it says why
    assert bare["predicted_step_ns"] is None and "give --fit NET" in bare["notes"][0]


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["fit"].pop("latency_ns"), "fit.latency_ns"),
    (lambda d: d["buckets"][0].update(error="big"), "buckets[0].error"),
    (lambda d: d["kinds"]["ALL_REDUCE"].update(separable=1), "kinds.ALL_REDUCE.separable"),
    (lambda d: d.update(version=7), "version"),
])
def test_a_malformed_fit_json_is_refused_naming_the_file_and_field(scaled_set, edit, field):
    _, net, _ = scaled_set
    doc = json.loads((net / "fit.json").read_text())
    edit(doc)
    (net / "fit.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match=re.escape(f"{net / 'fit.json'}: {field}: expected")):
        read_calibration(net)


def test_fit_json_round_trips_to_the_same_calibration(scaled_set):
    cap, net, _ = scaled_set
    cal = calibrate(cap, npus=4)
    back = read_calibration(net / "fit.json")
    assert back.fit == cal.fit and back.rows == cal.rows and back.kinds == cal.kinds and back.npus == 4
    assert format_calibration(back) == format_calibration(cal)


def _cli(*args):
    return subprocess.run([sys.executable, "-c", "from chakra_tools.cli.main import visualize_main; visualize_main()",
                           *map(str, args)], capture_output=True, text=True)


def test_cli_report_of_a_scaled_run(scaled_set, tmp_path):
    _, net, dp4 = scaled_set
    run = target_run(tmp_path / "run4", 4)
    proc = _cli("report", dp4, "--fit", net, "--measured", run, "-o", tmp_path / "r.html", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["whatif"] == json.loads(json.dumps(whatif_data([dp4], fit=net, measured=run)))
    assert 'id="network-fit"' in (tmp_path / "r.html").read_text()
    # the report and trace-replay, asked the same question, give the same answer
    replayed = subprocess.run([sys.executable, "-c", "from chakra_tools.cli.main import replay_main; replay_main()",
                               str(dp4), "--network-fit", str(net), "--json"], capture_output=True, text=True)
    assert replayed.returncode == 0, replayed.stderr
    (pred,) = doc["whatif"]["predictions"]
    assert pred["makespan_ns"] == json.loads(replayed.stdout)["makespan_ns"]
    (net / "fit.json").write_text(json.dumps({**json.loads((net / "fit.json").read_text()), "npus": "four"}))
    bad = _cli("report", dp4, "--fit", net, "-o", tmp_path / "r2.html")
    assert bad.returncode == 2 and str(net / "fit.json") in bad.stderr and "npus" in bad.stderr
    assert "Traceback" not in bad.stderr
    missing = _cli("report", dp4, "--measured", tmp_path / "nowhere", "-o", tmp_path / "r3.html")
    assert missing.returncode == 2 and "no manifest.json" in missing.stderr


def test_trace_replay_prints_the_predicted_step_the_report_leads_with(scaled_set, tmp_path):
    # the capture on the fitted network (its own profiler steps) and its scaled copy (the steps
    # it was made from): one figure, the makespan over the captured steps, in both places
    cap, net, dp4 = scaled_set
    for rankset in (cap, dp4):
        report = json.loads(_cli("report", rankset, "--fit", net, "-o", tmp_path / "r.html", "--json").stdout)
        (pred,) = report["whatif"]["predictions"]
        out = subprocess.run([sys.executable, "-c", "from chakra_tools.cli.main import replay_main; replay_main()",
                              str(rankset), "--network-fit", str(net)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        line = next(x for x in out.stdout.splitlines() if x.startswith("predicted step "))
        assert f"{pred['predicted_step_ns'] / 1e6:.3f} ms" in line and "the 2 captured steps" in line


@pytest.mark.slow
def test_real_ddp_capture_scaled_to_one_rank(tmp_path):
    """examples/ddp.py captured on 2 gloo ranks, calibrated, scaled to 1: the report's prediction
    is the replay API's, the old degree's all-reduce waits left the step nodes, and without a
    1-rank run the report says there is no measured step."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "capture"))
    from capture_helpers import EXAMPLES, LAUNCH_2, run_capture

    from chakra_tools.convert.run import convert, inputs_from_run

    run = run_capture(["--active", "3", "--out", str(tmp_path / "run"), "--", *LAUNCH_2,
                       str(EXAMPLES / "ddp.py"), "--steps", "5"], cwd=tmp_path, folder=tmp_path / "run", timeout=300)
    assert run.code == 0, run.stderr[-3000:]
    convert(inputs_from_run(run.folder), tmp_path / "et")
    (tmp_path / "net").mkdir()
    cal = write_calibration(calibrate(tmp_path / "et"), tmp_path / "net")
    report = scale(tmp_path / "et", 1, tmp_path / "dp1")
    waited = max(report.waits_ns, key=report.waits_ns.get)  # the faster rank, which waited for the other
    assert report.waits_ns[waited] > 0
    before = RankSet.load(tmp_path / "et")[waited]
    after = RankSet.load(tmp_path / "dp1")[0]
    # the converter took DDP's wait for the all-reduce out of the ops it lay in (the step nodes,
    # mostly), scale reports it and keeps it
    assert sum(n.attr("collective_wait_ns") or 0 for n in before.nodes.values()) == report.waits_ns[waited]
    assert sum(n.attr("collective_wait_ns") or 0 for n in after.nodes.values()) == report.waits_ns[0]
    (pred,) = whatif_data([tmp_path / "dp1"], fit=tmp_path / "net")["predictions"]
    doc = replay(tmp_path / "dp1", SystemSpec(kind_fit=tmp_path / "net").backend(2),
                 record_events=False).to_dict(events=False)
    assert pred["makespan_ns"] == doc["makespan_ns"] and pred["steps"] == 3
    assert pred["measured"] is None and "keep no measured window" in pred["notes"][0]


def test_a_model_parallel_job_scaled_says_which_degrees_it_kept(scaled_set, tmp_path):
    """A tp 2 x dp 2 set (tensor-parallel all-reduces on {0, 1} and {2, 3}, gradients on {0, 2}
    and {1, 3}) scaled to one replica: the report says 4 ranks with tp 2 kept became 2."""
    _, net, _ = scaled_set

    def rank(r):
        return [Node(1, "mm", T.COMP_NODE, duration_micros=100, attrs=make_attrs(is_cpu_op=False)),
                Node(2, "tp", T.COMM_COLL_NODE, (1,), attrs=make_attrs(
                    comm_type=CommType.ALL_REDUCE, comm_size=4096, pg_name="2" if r < 2 else "3", is_cpu_op=False)),
                Node(3, "dp", T.COMM_COLL_NODE, (2,), attrs=make_attrs(
                    comm_type=CommType.ALL_REDUCE, comm_size=1 << 20, pg_name=str(4 + r % 2), is_cpu_op=False))]
    RankSet({r: Graph(rank(r), rank=r) for r in range(4)},
            {"1": (0, 1, 2, 3), "2": (0, 1), "3": (2, 3), "4": (0, 2), "5": (1, 3)}).write(tmp_path / "tp2dp2", "t")
    report = scale(tmp_path / "tp2dp2", 1, tmp_path / "tp2")
    assert (report.tp, report.old_dp, report.lone_dropped) == (2, 2, {0: 1, 1: 1})
    data = whatif_data([tmp_path / "tp2"], fit=net)
    (pred,) = data["predictions"]
    assert pred["scaled_from"] == {"dp": 2, "batch": "per-rank", "steps": None, "tp": 2, "pp": 1} and pred["ranks"] == 2
    sets = [load_events(tmp_path / "tp2")]
    assert "scaled from 4 to 2 ranks" in sets[0].notes[0]
    html = render_html(sets, whatif=data)
    assert "4 (tp 2 kept) → 2 ranks (per-rank batch)" in html[html.index('id="whatif"'):]
