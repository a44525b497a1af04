"""Each trace-visualize command is one call of the API: the same files from Python as from the
command line."""

from __future__ import annotations

from typer.testing import CliRunner

from chakra_tools.cli.visualize import app
from chakra_tools.visualize.drawing import write_graph
from chakra_tools.visualize.report import write_report
from chakra_tools.visualize.select import Selection
from chakra_tools.visualize.sources import load_events
from chakra_tools.visualize.timeline import write_timeline

runner = CliRunner()


def cli(*args):
    res = runner.invoke(app, [*map(str, args), "--no-progress"] if args[0] in ("graph", "timeline") else list(map(str, args)))
    assert res.exit_code == 0, res.output


def test_graph_timeline_and_report_from_python_equal_the_commands(tiny, replay_json, tmp_path):
    cli("graph", tiny, "-o", tmp_path / "cli.graphml", "--rank", "1")
    doc = write_graph(tiny, tmp_path / "api.graphml", Selection(ranks=(1,)))
    assert (tmp_path / "api.graphml").read_bytes() == (tmp_path / "cli.graphml").read_bytes()
    assert doc["ranks"] == [1] and doc["nodes"] == 5

    cli("timeline", replay_json, "-o", tmp_path / "cli.json", "--flows", "cross-rank", "--window", "0:50us")
    written = write_timeline(load_events(replay_json).narrow(None, "cross-rank"), tmp_path / "api.json",
                             window_ns=(0, 50_000))
    assert (tmp_path / "api.json").read_bytes() == (tmp_path / "cli.json").read_bytes()
    assert written["events_written"] > 0

    cli("report", tiny, replay_json, "-o", tmp_path / "cli.html")
    write_report([load_events(tiny), load_events(replay_json)], tmp_path / "api.html")
    assert (tmp_path / "api.html").read_bytes() == (tmp_path / "cli.html").read_bytes()
