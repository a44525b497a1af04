"""What repeated timings of one thing say it takes, where the host they ran on was shared.

The probe repeats each call and a capture repeats each training step; the calibration reads
both here, one way."""

from __future__ import annotations

from statistics import quantiles
from typing import Sequence


def undisturbed(times: Sequence[float]) -> float:
    """What repeated timings of one thing say it takes: their lower quartile. Noise on a shared
    host only lengthens a run (a rank descheduled, a TCP flow stalled), so the median follows the
    noise wherever half the repetitions were hit: a probe's 256 KiB all-to-alls took 22, 24, 31, 48
    and 50 ms, and the job's own ran like the fast ones. The fastest alone would trust one lucky
    run; the quartile needs a quarter of them.

    >>> undisturbed([22.4, 50.4, 47.5, 23.8, 30.8])
    23.8
    >>> undisturbed([5.0])
    5.0
    """
    if len(times) < 2:
        return float(times[0])
    return quantiles(times, n=4, method="inclusive")[0]
