"""bench/bench_gpu_fidelity.py runs end to end on the shared GPU pairs, so it cannot rot (its
goal is asserted by tests/replay/test_gpu_semantics.py, not here: a benchmark's exit code)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_gpu_fidelity.py"


def test_bench_gpu_fidelity_prints_every_pair(shared_fixtures):
    proc = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("dlrm", "resnet", "linear", "simple_add"):
        assert name in proc.stdout
    assert "mean |job error| as captured" in proc.stdout
    # the modelled baseline: DLRM's 8 ranks with their NCCL calls priced on the V100s' NVLink
    dlrm = next(line for line in proc.stdout.splitlines() if line.startswith("dlrm"))
    assert "NVLink2" in dlrm and "modelled baseline on the machine's network" in proc.stdout
    baseline = [t for t in dlrm.split() if t.endswith("%")][2]
    assert abs(float(baseline.rstrip("%"))) < 10.0


def test_bench_gpu_fidelity_field_replays_each_device_trace_of_a_folder(shared_fixtures):
    """--field DIR: every Kineto trace of a folder on its own, as captured (HTA's rank 0 of a
    2-rank NCCL job with its peer assumed); a file that is no device trace is named, not fatal."""
    proc = subprocess.run([sys.executable, str(BENCH), "--field", str(shared_fixtures / "hta")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split()[0]: [t for t in line.split() if t.endswith("%")]
            for line in proc.stdout.splitlines() if "kineto" in line and "%" in line}
    captured, *rest = rows["nccl_metadata_kineto.json.gz"]
    assert abs(float(captured.rstrip("%"))) < 2.0
    assert "simple_add_host_et.json.gz" in proc.stdout and "not replayed: " in proc.stdout
    assert " within 5%; median |error| " in proc.stdout
