"""A what-if is set against the run that was measured as the change it makes, never as an error.

`trace-replay RUN --network-fit NET --bandwidth inter-node=x3` on a capture printed "error -59.5%:
measured 857 ms, predicted 348 ms": the capture's own window against a replay on links three times
faster, labelled as the replay's error. The same comparison on the links as they were is the
replay's error and keeps that name."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from chakra_tools.cli.replay import app as replay_app
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.measured import Measured
from chakra_tools.core.model import Metadata

from _util import coll, comp


def _measured_rankset(tmp_path):
    """Two ranks: compute, a 4 MiB all-reduce, compute; each file carries the window it measured."""
    nodes = [comp(1, us=1000, start=100), coll(2, 4 << 20, (1,), start=1200, us=20_000),
             comp(3, 1000, (2,), start=21_300)]
    meta = Metadata(attrs=Measured((100_000, 22_300_000)).attrs())
    RankSet({r: Graph(nodes, rank=r, metadata=meta) for r in range(2)}, {}).write(tmp_path, "t")
    return tmp_path / "t"


def test_a_what_if_reads_as_the_change_it_makes_and_a_replay_as_its_error(tmp_path):
    prefix = _measured_rankset(tmp_path)
    run = CliRunner()
    same = run.invoke(replay_app, [str(prefix)])
    assert same.exit_code == 0, same.output
    assert "\nerror " in same.output and "against the captured run" not in same.output
    faster = run.invoke(replay_app, [str(prefix), "--bandwidth", "0=x4"])
    assert faster.exit_code == 0, faster.output
    assert "what-if (0=x4) against the captured run:" in faster.output
    assert "the change, not an error" in faster.output and "\nerror " not in faster.output
    assert "mean |change| over ranks" in faster.output
    doc = json.loads(run.invoke(replay_app, [str(prefix), "--bandwidth", "0=x4", "--json"]).output)
    assert doc["fidelity"]["what_if"] == "0=x4" and doc["fidelity"]["headline"]["what_if"] == "0=x4"
    plain = json.loads(run.invoke(replay_app, [str(prefix), "--json"]).output)
    assert "what_if" not in plain["fidelity"]
    assert doc["makespan_ns"] < plain["makespan_ns"]  # the what-if did change the links
