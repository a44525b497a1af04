"""A script that ends inside the capture window: the profiler stops with the step after its last
one still open (the teardown after the loop), and that range is in both traces. The manifest
lists only the finished steps; the conversion keeps only those (examples/collectives.py under
`--active 4` with 5 steps replayed 27% slow: 20 ms of barrier and teardown in the graph)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "capture"))
from capture_helpers import EXAMPLES, run_capture  # noqa: E402

from chakra_tools.convert.run import convert, inputs_from_run  # noqa: E402
from chakra_tools.core.etio import TraceReader  # noqa: E402
from chakra_tools.core.measured import Measured  # noqa: E402


def test_the_step_the_scripts_end_cut_short_is_not_converted(tmp_path):
    pytest.importorskip("torch")
    run = run_capture(["--active", "4", "-o", "run", "--", str(EXAMPLES / "mlp.py"), "--steps", "4"],
                      cwd=tmp_path, folder=tmp_path / "run")
    assert run.code == 0, run.stderr[-2000:]
    assert run.manifest["captured_steps"] == [2, 3]
    assert "ProfilerStep#4" in {n["name"] for n in run.host(0)["nodes"]}  # cut short, but recorded
    report = convert(inputs_from_run(tmp_path / "run"), tmp_path / "et", executor="serial")
    reader = TraceReader(next(f for f in report.files if f.suffix == ".et"))
    names = {n.name for n in reader}
    assert {"ProfilerStep#2", "ProfilerStep#3"} <= names and "ProfilerStep#4" not in names
    measured = Measured.from_metadata(reader.metadata, "rank 0")
    assert len(measured.steps_ns) == 2
