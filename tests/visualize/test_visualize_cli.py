"""trace-visualize on the command line: each subcommand's output and its --json, and errors that
name the problem."""

from __future__ import annotations

import json

import networkx as nx
from typer.testing import CliRunner

from chakra_tools.cli.visualize import app, parse_time
from chakra_tools.core.chrome_trace import load

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_help_lists_the_four_commands():
    r = run("--help")
    assert r.exit_code == 0
    for cmd in ("graph", "timeline", "report", "summary"):
        assert cmd in r.output


def test_graph_graphml_json(tiny, tmp_path):
    out = tmp_path / "g.graphml"
    r = run("graph", tiny, "-o", out, "--json", "--no-progress")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert (doc["nodes"], doc["edges"], doc["ranks"], doc["format"]) == (10, 10, [0, 1], "graphml")
    g = nx.read_graphml(out)
    assert (g.number_of_nodes(), g.number_of_edges()) == (10, 10)


def test_graph_filters_on_the_command_line(tiny, tmp_path):
    r = run("graph", tiny, "-o", tmp_path / "g.dot", "--rank", "1", "--around", "1:4", "--radius", "1", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["nodes"] == 3
    text = (tmp_path / "g.dot").read_text()
    assert '"1:3"' in text and '"1:4"' in text and '"1:5"' in text and '"0:' not in text
    r = run("graph", tiny, "-o", tmp_path / "c.dot", "--kind", "coll", "--kind", "send", "--json")
    assert json.loads(r.output)["nodes"] == 3


def test_graph_refuses_to_draw_big_graphs(tiny, tmp_path):
    r = runner.invoke(app, ["graph", str(tiny), "-o", str(tmp_path / "g.svg"), "--max-nodes", "4"])
    assert r.exit_code == 2
    assert "10 nodes" in r.output and "--around" in r.output
    assert not (tmp_path / "g.svg").exists()


def test_graph_unknown_format(tiny, tmp_path):
    r = runner.invoke(app, ["graph", str(tiny), "-o", str(tmp_path / "g.png")])
    assert r.exit_code == 2 and "unknown graph format 'png'" in r.output


def test_timeline_gzip_window_and_split(tiny, tmp_path):
    r = run("timeline", tiny, "-o", tmp_path / "t.json", "--gzip", "--json", "--no-progress")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert (doc["events"], doc["flows"], doc["ranks"]) == (10, 8, 2)
    assert (tmp_path / "t.json").read_bytes()[:2] == b"\x1f\x8b"
    # the window 40us..62us of the run holds the all-reduces (41-61), the p2p pair (61-66) and
    # rank 1's first gemm (10-41); rank 0's ends at 40, where the window starts
    r = run("timeline", tiny, "-o", tmp_path / "w.json", "--window", "40us:62us", "--json")
    names = sorted(e["name"] for e in load(tmp_path / "w.json")["traceEvents"] if e["ph"] == "X")
    assert names == ["nccl:all_reduce"] * 2 + ["nccl:recv", "nccl:send", "sm80_gemm"]
    r = run("timeline", tiny, "-o", tmp_path / "s.json.gz", "--max-events", "4", "--json")
    files = json.loads(r.output)["files"]
    assert [f.rsplit("/", 1)[1] for f in files] == [f"s.part-000{i}.json.gz" for i in (1, 2, 3)]


def test_timeline_flow_choices(tiny, tmp_path):
    r = run("timeline", tiny, "-o", tmp_path / "t.json", "--flows", "cross-rank", "--json")
    assert json.loads(r.output)["flows"] == 2
    r = run("timeline", tiny, "-o", tmp_path / "t.json", "--flows", "none", "--rank", "0", "--json")
    assert (json.loads(r.output)["flows"], json.loads(r.output)["ranks"]) == (0, 1)


def test_timeline_of_a_replay_result(replay_json, tmp_path):
    r = run("timeline", replay_json, "-o", tmp_path / "r.json", "--json")
    doc = json.loads(r.output)
    assert (doc["events"], doc["flows"], doc["source"]) == (6, 5, "simulated")


def test_report_and_json(tiny, replay_json, tmp_path):
    out = tmp_path / "r.html"
    r = run("report", tiny, replay_json, "-o", out, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [s["times"] for s in doc["sources"]] == ["converted", "simulated"]
    assert len(doc["comparison"]) == 2
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_summary_text_and_json(tiny):
    r = run("summary", tiny, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert "COMM_COLL" in json.dumps(doc) and doc["nodes"] == 10
    r = run("summary", tiny)
    assert r.exit_code == 0 and "rank" in r.output


def test_missing_input_is_one_clear_line(tmp_path):
    r = runner.invoke(app, ["timeline", str(tmp_path / "nope"), "-o", str(tmp_path / "t.json")])
    assert r.exit_code == 2
    assert r.output.startswith("error: ") and "nope" in r.output


def test_parse_time():
    assert parse_time("1.5ms") == 1_500_000 and parse_time("250") == 250_000 and parse_time("2s") == 2 * 10**9
