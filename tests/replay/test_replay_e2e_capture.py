"""Fidelity (b) end to end: trace-capture an example, trace-convert it, replay it, compare the
predicted step time with the one the capture measured (manifest.json).

The single-process MLP runs by default (about 15 s); the multi-rank examples (DDP over gloo,
pipeline send/recv, tensor parallel, every collective kind) are slow tests. Each capture is
replayed twice: with the default network model, and as captured (`--as-captured`: calibrated
communication, host time from the recorded timeline, ranks starting at their recorded offsets),
the replay meant to reproduce the capture's own step time. Measured errors are printed
(`pytest -s`) and in docs/validation.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
AS_CAPTURED = ("--as-captured",)  # = --comm calibrated --host-time timeline --align recorded


def _capture(tmp_path: Path, script_args: list[str]) -> tuple[Path, Path, dict]:
    """trace-capture and trace-convert `script_args`: (run folder, rank set, environment)."""
    pytest.importorskip("torch")
    for tool in ("trace-capture", "trace-convert", "trace-replay"):
        if not (BIN / tool).exists():
            pytest.skip(f"{tool} not installed in {BIN}")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    run, conv = tmp_path / "run", tmp_path / "conv"
    cap = subprocess.run([str(BIN / "trace-capture"), "--out", str(run), "--", *script_args],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert cap.returncode == 0, cap.stderr[-2000:]
    cv = subprocess.run([str(BIN / "trace-convert"), "pytorch", str(run), "-o", str(conv)],
                        env=env, capture_output=True, text=True, timeout=300)
    assert cv.returncode == 0, cv.stderr[-2000:]
    return run, conv, env


def _replay(run: Path, conv: Path, env: dict, *replay_args: str) -> dict:
    rp = subprocess.run([str(BIN / "trace-replay"), str(conv), "--manifest", str(run / "manifest.json"),
                         "--json", *replay_args], env=env, capture_output=True, text=True, timeout=300)
    assert rp.returncode == 0, rp.stderr[-2000:]
    doc = json.loads(rp.stdout)
    fid = doc["fidelity"]
    job = fid.get("job", fid["step"])["error"]
    print(f"\n{run.parent.name} {replay_args}: per-rank errors "
          f"{[round(r['error'] * 100, 1) for r in fid['ranks']]}%, step error {fid['step']['error'] * 100:.1f}%, "
          f"job error {job * 100:.1f}%")
    return doc


def _job_error(doc: dict) -> float:
    fid = doc["fidelity"]
    return fid.get("job", fid["step"])["error"]


def _two_ranks(tmp_path: Path, example: str, steps: int) -> tuple[dict, dict]:
    """A 2-rank example captured once, replayed with the default model and as captured."""
    run, conv, env = _capture(tmp_path, ["torchrun", "--standalone", "--nproc-per-node", "2", example, "--steps", str(steps)])
    return _replay(run, conv, env), _replay(run, conv, env, *AS_CAPTURED)


def test_mlp_capture_convert_replay(tmp_path):
    run, conv, env = _capture(tmp_path, ["examples/mlp.py", "--steps", "6"])
    doc = _replay(run, conv, env)
    fid = doc["fidelity"]
    assert len(fid["ranks"]) == 1 and fid["ranks"][0]["steps"] == 2
    assert doc["ranks"][0]["compute_ns"] > 0
    # the headline: the captured window against the makespan (0.9% measured here; loose for a
    # loaded machine). Not the mean step time: that leaves out the profiler's work between the
    # captured steps, which the window and the trace hold; on a loaded CI machine that gap grew
    # to three quarters of a step (step figure +75.6%, window -0.4%)
    assert fid["headline"]["basis"] == "job"
    assert abs(_job_error(doc)) < 0.25
    captured = _replay(run, conv, env, *AS_CAPTURED)  # one process: the recorded timeline itself
    # host time telescopes to the traced window: the replay is that span, to the rounding
    from chakra_tools.core.graph import RankSet
    from chakra_tools.core.measured import Measured

    start, end = Measured.from_metadata(RankSet.load(conv)[0].metadata).window_ns
    assert captured["makespan_ns"] == pytest.approx(end - start, rel=0.005)
    # against the manifest's wall-clock steps: 0.0% to 3% measured here; a loaded machine has
    # stretched the profiler's own step handling, outside every op, to 13% once
    assert abs(_job_error(captured)) < 0.25


# Multi-rank: as captured, the job error measured on this machine is within 5% (docs/validation.md);
# the bounds are loose for a loaded machine, and the default model's is looser still.

@pytest.mark.slow
def test_ddp_capture_convert_replay(tmp_path):
    model, captured = _two_ranks(tmp_path, "examples/ddp.py", 6)
    assert len(model["collectives"]) >= 2 and {c["comm_type"] for c in model["collectives"]} == {"ALL_REDUCE"}
    assert abs(model["fidelity"]["step"]["error"]) < 1.0
    assert abs(_job_error(captured)) < 0.15


@pytest.mark.slow
def test_pipeline_capture_convert_replay(tmp_path):
    model, captured = _two_ranks(tmp_path, "examples/pipeline.py", 6)
    assert len(model["deps"]) > 0
    assert abs(model["fidelity"]["step"]["error"]) < 1.0
    assert abs(_job_error(captured)) < 0.15


@pytest.mark.slow
@pytest.mark.parametrize("example", ["examples/tensor_parallel.py", "examples/collectives.py"])
def test_collective_examples_replayed_as_captured(tmp_path, example):
    _, captured = _two_ranks(tmp_path, example, 6)
    assert len(captured["collectives"]) >= 6
    assert abs(_job_error(captured)) < 0.15
