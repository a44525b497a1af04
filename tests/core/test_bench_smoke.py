"""bench/bench_core.py runs end to end (on a tiny trace), so the benchmark cannot rot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_core.py"


def test_bench_core_runs_on_a_small_trace():
    pytest.importorskip("chakra.src.third_party.utils.protolib")
    out = subprocess.run([sys.executable, str(BENCH), "--nodes", "2000"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "2,000 nodes" in text
    for row in ("ours: write", "ours: streaming read", "ours: validate", "reference: mlc-chakra",
                "ratio ours/reference", "streaming read memory"):
        assert row in text, row
