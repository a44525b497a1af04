"""bench/whatif_check.py's options for checking a job and clusters of one's own: what it reads,
and what it refuses before it builds a cluster (no root, no torch needed for these)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import whatif_check as W  # noqa: E402


def test_clusters_and_jobs_are_read():
    assert W.parse_cluster("4x2@250") == (4, 2, 250.0)
    assert W.parse_clusters("3x2@150, 2x2@62.5") == [(3, 2, 150.0), (2, 2, 62.5)]
    assert W.parse_job("mine=--layers 4 --tp 2") == ("mine", ["--layers", "4", "--tp", "2"])
    for bad in ("4x2", "0x2@100", "4x2@0", "four"):
        with pytest.raises(argparse.ArgumentTypeError, match="NODESxRANKS@MBIT"):
            W.parse_cluster(bad)
    for bad in ("=--layers 4", "--layers 4", "a b=--tp 2"):
        with pytest.raises(argparse.ArgumentTypeError, match="NAME=ARGS"):
            W.parse_job(bad)


@pytest.mark.parametrize("argv, message", [
    (["--targets", "4x1@100"], "1 ranks a node where the capture has 2"),
    (["--job", "odd=--tp 3", "--targets", "4x2@100"], "job odd: tp 3 x pp 1 does not divide"),
    (["--jobs", "nope"], "unknown job 'nope'"),
])
def test_what_cannot_be_checked_is_refused_before_anything_runs(argv, message):
    done = subprocess.run([sys.executable, str(BENCH / "whatif_check.py"), *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and message in done.stderr, done.stderr
