"""End to end on a captured run: trace-capture examples/mlp.py -> trace-convert -> trace-replay,
then every trace-visualize output on each stage's files (about 10 s, most of it the capture)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from chakra_tools.core.chrome_trace import load
from chakra_tools.core.graph import RankSet
from chakra_tools.visualize.drawing import graph_edges

from .conftest import ARTIFACTS, REPO

BIN = Path(sys.executable).parent


def _run(*args, cwd: Path) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(map(str, args))}: exit {r.returncode}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    d = tmp_path_factory.mktemp("e2e")
    _run(BIN / "trace-capture", "-o", d / "run", "--", REPO / "examples" / "mlp.py", "--steps", "6", cwd=d)
    _run(BIN / "trace-convert", d / "run", "-o", d / "et", cwd=d)
    _run(BIN / "trace-replay", d / "et" / "trace", "--out", d / "result.json", cwd=d)
    return d


def _viz(d: Path, *args) -> dict:
    return json.loads(_run(BIN / "trace-visualize", *args, "--json", cwd=d).stdout)


def test_timeline_of_the_captured_run_reemits_every_measured_event(pipeline):
    doc = _viz(pipeline, "timeline", "run", "-o", "measured.json.gz")
    manifest = json.loads((pipeline / "run" / "manifest.json").read_text())
    raw = load(pipeline / "run" / manifest["ranks"][0]["device_trace"])["traceEvents"]
    measured = [e for e in raw if e.get("ph") == "X" and e.get("cat") not in ("Trace", "python_function")]
    out = [e for e in load(pipeline / "measured.json.gz")["traceEvents"] if e["ph"] == "X"]
    assert doc["events"] == len(out) == len(measured) > 0
    assert sorted(round(e["dur"] * 1000) for e in out) == sorted(round(float(e["dur"]) * 1000) for e in measured)


def test_timeline_of_the_converted_rank_set_matches_its_nodes(pipeline):
    rs = RankSet.load(pipeline / "et" / "trace")
    _viz(pipeline, "timeline", "et/trace", "-o", "converted.json")
    xs = [e for e in load(pipeline / "converted.json")["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(rs[0])
    origin = min(n.start_time_micros for n in rs[0])
    for e in xs:
        node = rs[0][e["args"]["node_id"]]
        assert (round(e["ts"] * 1000), round(e["dur"] * 1000)) == \
            ((node.start_time_micros - origin) * 1000, node.duration_micros * 1000)
    assert _flows(pipeline / "converted.json") == _expected_flows(xs, [(0, s, 0, d) for s, d, _ in graph_edges(rs[0])])


def _flows(path: Path) -> list:
    events = load(path)["traceEvents"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert sorted(starts) == sorted(ends)
    return sorted(((starts[i]["pid"], starts[i]["tid"], starts[i]["ts"]), (ends[i]["pid"], ends[i]["tid"], ends[i]["ts"]))
                  for i in starts)


def _expected_flows(xs: list, deps: list) -> list:
    """One flow per dependency whose two ends were drawn on different lanes or ranks."""
    at = {(e["pid"], e["args"]["node_id"]): (e["pid"], e["tid"], e["ts"]) for e in xs}
    pairs = [(at[(sr, sn)], at[(dr, dn)]) for sr, sn, dr, dn in deps]
    return sorted((a, b) for a, b in pairs if a[:2] != b[:2])


def test_timeline_of_the_replay_result(pipeline):
    result = json.loads((pipeline / "result.json").read_text())
    doc = _viz(pipeline, "timeline", "result.json", "-o", "simulated.json")
    xs = [e for e in load(pipeline / "simulated.json")["traceEvents"] if e["ph"] == "X"]
    assert doc["events"] == len(xs) == len(result["events"])
    got = sorted((e["args"]["node_id"], round(e["ts"] * 1000), round(e["dur"] * 1000)) for e in xs)
    t0 = min(e["start_ns"] for e in result["events"])
    assert got == sorted((e["node_id"], e["start_ns"] - t0, e["end_ns"] - e["start_ns"]) for e in result["events"])
    assert _flows(pipeline / "simulated.json") == _expected_flows(xs, result["deps"])


def test_graphml_of_the_converted_rank_set(pipeline):
    rs = RankSet.load(pipeline / "et" / "trace")
    doc = _viz(pipeline, "graph", "et/trace", "-o", "g.graphml")
    g = nx.read_graphml(pipeline / "g.graphml")
    assert g.number_of_nodes() == doc["nodes"] == len(rs[0])
    assert set(g.edges) == {(f"0:{s}", f"0:{d}") for s, d, _ in rs[0].edges()}


def test_report_measured_against_simulated_renders(pipeline, chromium):
    doc = _viz(pipeline, "report", "run", "result.json", "-o", "report.html")
    assert [s["times"] for s in doc["sources"]] == ["measured", "simulated"]
    assert doc["comparison"][0]["measured_ns"] > 0 and doc["comparison"][0]["simulated_ns"] > 0
    dom = chromium(pipeline / "report.html", ARTIFACTS / "report-captured-mlp.png", size="1400,2000")
    assert re.findall(r'data-times="(\w+)" data-ranks-drawn="(\d+)"', dom) == [("measured", "1"), ("simulated", "1")]
    assert 'id="comparison"' in dom
