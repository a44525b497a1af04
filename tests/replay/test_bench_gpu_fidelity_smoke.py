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
