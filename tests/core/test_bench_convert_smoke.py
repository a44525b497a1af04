"""bench/bench_convert.py runs end to end on a small real trace, so the benchmark cannot rot, and
it says whether the compiled loops were in use (a ratio measured without them would mislead)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_convert.py"


def test_bench_convert_runs_and_prints_the_ratios(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("chakra.src.converter.pytorch_converter")
    out = subprocess.run([sys.executable, str(BENCH), "--quick", "--workdir", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    from chakra_tools.convert.hotloops import COMPILED
    assert f"compiled loops (chakra_tools/*/_hotloops.c): {'yes' if COMPILED else 'NO'}" in text
    assert re.search(r"ours, pure Python .*host only: [\d.]+ s", text)
    for label in ("host + device", "host only, like for like"):
        assert re.search(rf"ratio \({re.escape(label)}\): [\d.]+x faster .* of its peak memory", text), label
