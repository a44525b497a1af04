"""trace-visualize options not covered elsewhere: --ids, --name, --format, --title, --open."""

from __future__ import annotations

import json
import os
import sys

import networkx as nx
from typer.testing import CliRunner

from chakra_tools.cli.visualize import app

runner = CliRunner()


def run(*args, env=None):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False, env=env)


def test_graph_id_range_and_name_pattern(tiny, tmp_path):
    out = tmp_path / "g.xml"
    r = run("graph", tiny, "-o", out, "--format", "graphml", "--ids", "2:4", "--name", "gemm|all_reduce", "--json")
    assert r.exit_code == 0, r.output
    g = nx.read_graphml(out)
    names = sorted(d["name"] for _, d in g.nodes(data=True))
    # ids 2..4 on both ranks, then the pattern: the two gemms and the two all-reduces (not send/recv)
    assert names == ["nccl:all_reduce", "nccl:all_reduce", "sm80_gemm", "sm80_gemm"]
    assert json.loads(r.output)["format"] == "graphml"
    bad = run("graph", tiny, "-o", tmp_path / "x.graphml", "--ids", "four:five")
    assert bad.exit_code != 0


def test_report_title_and_open(tiny, tmp_path):
    out = tmp_path / "r.html"
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.py"
    browser.write_text(f"import sys; open({str(opened)!r}, 'w').write(sys.argv[1])\n")
    env = {**os.environ, "BROWSER": f"{sys.executable} {browser} %s"}
    r = run("report", tiny, "-o", out, "--title", "My <run>", "--open", env=env)
    assert r.exit_code == 0, r.output
    html = out.read_text()
    assert "<title>My &lt;run&gt;</title>" in html  # escaped, not injected
    assert opened.exists() and opened.read_text().endswith("r.html")
