"""The HTML report: numbers that add up, a page that renders in headless Chromium with no
network, and screenshots kept under test-artifacts/visualize/."""

from __future__ import annotations

import math
import re

from chakra_tools.core.chrome_trace import load
from chakra_tools.visualize import analysis
from chakra_tools.visualize.report import report_data, write_report
from chakra_tools.visualize.captured import from_capture
from chakra_tools.visualize.sources import from_replay, load_events

from .conftest import ARTIFACTS


def _count(dom: str) -> int:
    m = re.search(r'<span id="ranks-drawn" data-count="(\d+)">(\d+) ranks? drawn</span>', dom)
    assert m, "the page's script ran and filled the summary line"
    assert m.group(1) == m.group(2)
    return int(m.group(1))


def _no_network(html: str) -> None:
    urls = set(re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)""", html))
    assert not urls, f"the report must be self-contained, found {urls}"
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in html


def test_breakdown_adds_up_to_each_ranks_finish(tiny):
    es = load_events(tiny)
    for r, b in analysis.breakdown(es).items():
        # the bar the report draws: from the run's start to the rank's, then its work and gaps
        assert b["start_ns"] + b["compute_ns"] + b["exposed_comm_ns"] + b["idle_ns"] == b["finish_ns"], f"rank {r}"
    # rank 1: host 10us, gemm 31 + 15, all-reduce 20 + recv 5, nothing overlaps, starts at 100us
    assert analysis.breakdown(es)[1] == {"start_ns": 0, "finish_ns": 81_000, "compute_ns": 46_000,
                                         "exposed_comm_ns": 25_000, "overlap_ns": 0, "idle_ns": 10_000}


def test_top_operators_comm_volume_and_critical_path(tiny):
    es = load_events(tiny)
    top = analysis.top_operators(es)
    assert top[0] == {"name": "sm80_gemm", "total_ns": 91_000, "count": 4, "kind": "compute",
                      "share": 91_000 / 141_000}
    vol = {(v["kind"], v["group"]): (v["count"], v["bytes"]) for v in analysis.comm_volume(es)}
    assert vol == {("ALL_REDUCE", "ranks 0-1"): (2, 8 << 20), ("SEND", "point-to-point"): (1, 1024),
                   ("RECV", "point-to-point"): (1, 1024)}
    path = [(e.rank, e.node_id) for e in analysis.critical_path(es)]
    # the last event is rank 1's %5 (ends 181us); its latest dependency is the recv, which waited
    # for rank 0's send, which followed rank 0's all-reduce...
    assert path[-1] == (1, 5) and path[-2] == (1, 4)
    assert path[0][1] == 1


def test_report_json_compares_measured_and_simulated(tiny, replay_json):
    data = report_data([load_events(tiny), from_replay(replay_json)])
    assert [s["times"] for s in data["sources"]] == ["converted", "simulated"]
    cmp = {c["rank"]: c for c in data["comparison"]}
    assert cmp[0]["measured_ns"] == 81_000 and cmp[0]["simulated_ns"] == 88_001
    assert abs(cmp[0]["error"] - 7_001 / 81_000) < 1e-12
    assert [(p["rank"], p["node_id"]) for p in data["sources"][1]["critical_path"]] == [(0, 2), (0, 3), (1, 5)]


def test_report_renders_side_by_side(tiny, replay_json, tmp_path, chromium):
    out = write_report([load_events(tiny), from_replay(replay_json)], tmp_path / "report.html")
    html = out.read_text()
    _no_network(html)
    dom = chromium(out, ARTIFACTS / "report-side-by-side.png", size="1400,1800")
    assert _count(dom) == 2
    charts = re.findall(r'data-chart="breakdown" data-times="(\w+)" data-ranks-drawn="(\d+)"', dom)
    assert charts == [("converted", "2"), ("simulated", "2")]
    assert 'id="comparison"' in dom
    assert (ARTIFACTS / "report-side-by-side.png").stat().st_size > 10_000


def test_report_of_a_captured_run_renders(dlrm_kineto, tmp_path, chromium):
    es = from_capture(dlrm_kineto)
    calls = [e for f in sorted(dlrm_kineto.iterdir()) for e in load(f)["traceEvents"]
             if e.get("ph") == "X" and e.get("name") == "nccl:all_reduce"]
    assert all(c["args"]["Input type"] == ["float"] for c in calls)
    want = (len(calls), sum(4 * math.prod(c["args"]["Input Dims"][0]) for c in calls))
    vol = {v["kind"]: (v["count"], v["bytes"]) for v in analysis.comm_volume(es)}
    assert vol["ALL_REDUCE"] == want and want[0] == 24
    out = write_report([es], tmp_path / "report.html", title="DLRM, 8 ranks (param fixture)")
    _no_network(out.read_text())
    dom = chromium(out, ARTIFACTS / "report-dlrm-8-ranks.png")
    assert _count(dom) == 8
    ranks = re.findall(r'<g class="bar-row" data-rank="(\d+)"', dom)
    assert ranks == [str(r) for r in range(8)]
    top = re.findall(r'<g class="bar" data-value="([0-9.e-]+)"', dom)
    assert len(top) >= 10
    assert "ncclKernel_SendRecv" in dom


def test_a_replayed_cpu_run_lists_its_host_ops_among_the_top_operators(tmp_path):
    """A replayed CPU job with a METADATA node: that node is not device compute (it used to be
    guessed so, and the host ops then vanished from the simulated top operators)."""
    from chakra_tools.core.graph import Graph, RankSet
    from chakra_tools.core.model import CommType, Node, NodeType as T, make_attrs
    from chakra_tools.replay import AnalyticalBackend, default_network, replay

    graphs = {r: Graph([Node(1, "process_group:init", T.METADATA_NODE),
                        Node(2, "aten::mm", T.COMP_NODE, (1,), duration_micros=50, attrs=make_attrs(is_cpu_op=True)),
                        Node(3, "gloo:all_reduce", T.COMM_COLL_NODE, (2,),
                             attrs=make_attrs(comm_type=CommType.ALL_REDUCE, comm_size=4096, is_cpu_op=False))],
                       rank=r) for r in (0, 1)}
    RankSet(graphs, {}).write(tmp_path, "cpu")
    replay(tmp_path / "cpu", AnalyticalBackend(default_network(2))).write(tmp_path / "r.json")
    names = {row["name"] for row in analysis.top_operators(from_replay(tmp_path / "r.json"))}
    assert {"aten::mm", "gloo:all_reduce"} <= names
