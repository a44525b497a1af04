"""How much of a shared uplink's rate calls in flight together get, read off the capture itself.

The probe measures each call alone. A job that keeps two calls in flight on an uplink (FSDP's
asynchronous reduce-scatter beside the next layer's all-gather; DDP's overlapping buckets) shows
what they get together, and on the test bed that is less than the whole rate: TCP flows through
one shaper lose some of it to each other (a 6-layer FSDP job with 512 KiB buckets got 85-90%, and
replayed on the probed network as if they lost nothing came out 11% short of its own measured
step). Two 512 KiB all-reduces lost 4%. How much depends on the flows and the shaper, not on a
rule, so it is measured where it shows: the capture is replayed on its own probed cluster and the
shared links' `Level.shared_efficiency` is the one under which the replay takes the step the
capture measured of itself, its longest rank against the longest rank's own window
(`longest_rank_error`; bisection: the replayed step only grows as the efficiency falls).

The step it is matched to is the capture's undisturbed one: a window of three or more profiler
steps counts each step at their lower quartile (`core/timings.py`). A busy host only lengthens
steps, and what it adds would otherwise be blamed on the links and priced into every what-if:
FSDP's captured steps of 297, 343, 359 and 292 ms (its uncaptured runs 295-304) fitted at their
median made it 72% of the uplink and the job on 4 nodes +14.7%; at their lower quartile, 84% and
+6.3%. Over eight runs of bench/whatif_check.py (156 cases) the mean error went 3.6% -> 3.3%.

It is left at 1 (nothing lost) where the capture cannot say: a rank set without the measured
windows a conversion keeps (a scaled one), a replay already as long as the capture (the model
does not make calls faster together), a job whose calls never share a link (the efficiency
then changes nothing), or a replay still short with the calls at `FLOOR`: short for another
reason, which the fit says rather than blaming the links (priced at `FLOOR` into every what-if, a
tensor- and pipeline-parallel job whose own replay was 7% short came out +29% on twice the
machines).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from chakra_tools.core.measured import Measured
from chakra_tools.core.timings import undisturbed

from .api import open_rankset, replay
from .modes import CaptureModes
from .fabric import Fabric
from .fidelity import measured_of
from .netfit import Calibration

#: the least efficiency the fit tries: a replay still short there is short for another reason
FLOOR = 0.7
#: the replay's step is matched to the capture's within this share
TOLERANCE = 0.002


@dataclass(frozen=True)
class SharingFit:
    """The efficiency fitted, the capture's own step replayed on its probed cluster against what it
    measured before and after (None where it measured nothing), the replays it took, and why."""

    efficiency: float
    error_before: float | None
    error_after: float | None
    replays: int
    reason: str

    def to_dict(self) -> dict:
        return {"efficiency": self.efficiency, "error_before": self.error_before,
                "error_after": self.error_after, "replays": self.replays, "reason": self.reason}


def typical_steps(m: Measured) -> Measured:
    """`m` with each of its profiler steps taken at their undisturbed length (the window keeps
    what lies outside them); as it is with fewer than three steps.

    >>> typical_steps(Measured((0, 620), ((10, 110), (110, 210), (210, 400), (400, 580)))).window_ns
    (0, 450)
    """
    if len(m.steps_ns) < 3:
        return m
    lengths = [end - start for start, end in m.steps_ns]
    typical = round(undisturbed(lengths)) * len(lengths)
    start, end = m.window_ns
    return replace(m, window_ns=(start, end - sum(lengths) + typical))


def longest_rank_error(rows: list[dict]) -> float:
    """The longest replayed rank's window against the longest measured one, each rank's from its own
    start (`compare_with_trace`'s rows): the replay starts every rank at once, where a capture's
    ranks start their windows apart. A pipeline's last stage starts its step while the first is
    still finishing the step before, so the job's window from the earliest start to the latest end
    held that lag too, and a 2-stage pipeline's own replay, 0.4% short of its longest rank, read
    6.9% short of it: the fit took the lag for link rate lost to sharing (80%), and the job came
    out +6.5% on its own cluster (-0.1% fitted on the ranks' own windows).

    >>> longest_rank_error([{"measured_ns": 1000, "predicted_ns": 950}, {"measured_ns": 900, "predicted_ns": 990}])
    -0.01
    """
    if not rows:
        return 0.0
    measured = max(r["measured_ns"] for r in rows)
    return (max(r["predicted_ns"] for r in rows) - measured) / measured


def with_efficiency(fabric: Fabric, efficiency: float) -> Fabric:
    """`fabric` with every shared level at `efficiency`."""
    return Fabric(tuple(replace(lv, shared_efficiency=efficiency) if lv.shared else lv for lv in fabric.levels))


def fit_sharing(path: str | Path, cal: Calibration, *, comm_group: str | Path | None = None,
                progress: Callable[[str], None] | None = None) -> tuple[Calibration, SharingFit | None]:
    """`cal` with its probed cluster's shared links at the efficiency the capture at `path` shows,
    and how it was found; `cal` itself and None where it has no probed cluster or no shared link."""
    cluster = cal.cluster
    if cluster is None or not any(lv.shared for lv in cluster.fabric.levels):
        return cal, None
    feeders, _ = open_rankset(path, comm_group)
    measured = {rank: typical_steps(m) for rank, m in measured_of(feeders).items()}
    if not measured:
        found = SharingFit(1.0, None, None, 0, "the rank set carries no measured step (a scaled set?): nothing "
                                               "lost assumed")
        return replace(cal, sharing=found.to_dict()), found
    runs = 0

    def error(efficiency: float) -> float:
        nonlocal runs
        runs += 1
        if progress is not None:
            progress(f"replaying the capture with calls sharing an uplink at {efficiency:.1%} of its rate")
        fitted = replace(cluster, fabric=with_efficiency(cluster.fabric, efficiency))
        result = replay(path, fitted.backend(cal.npus, cal.fit.backend(cal.npus)), comm_group=comm_group,
                        modes=CaptureModes(), record_events=False)
        rows = (result.compare(measured=measured) or {}).get("ranks") or []
        return longest_rank_error(rows)

    def fitted_at(efficiency: float, before: float, after: float, reason: str):
        efficiency = round(efficiency, 4)
        fabric = with_efficiency(cluster.fabric, efficiency)
        found = SharingFit(efficiency, before, after, runs, reason)
        return replace(cal, cluster=replace(cluster, fabric=fabric), sharing=found.to_dict()), found

    before = error(1.0)
    if before >= -TOLERANCE:
        return fitted_at(1.0, before, before, "the replay is not short of the capture's step")
    lowest = error(FLOOR)
    if lowest - before < TOLERANCE:
        return fitted_at(1.0, before, before, "no calls shared an uplink long enough to matter")
    if lowest < -TOLERANCE:
        return fitted_at(1.0, before, before, f"still short at {FLOOR:.0%}: not the links; nothing lost assumed")
    lo, hi, err = FLOOR, 1.0, lowest  # error(lo) >= 0 > error(hi): the step grows as efficiency falls
    while hi - lo > 0.005:
        mid = (lo + hi) / 2
        e = error(mid)
        if e >= 0:
            lo, err = mid, e
        else:
            hi = mid
        if abs(e) <= TOLERANCE:
            lo, err = mid, e
            break
    return fitted_at(lo, before, err, "fitted to the capture's own step")
