"""A probed cluster's floor within a machine, as the job's own calls there paid it.

The probe times each collective alone, after an idle pause, its members waiting for it: a small
call within a machine then takes about its median round, and the fit (clusterfit.py) prices the
rounds within a machine at the median of the probe's. In the job the same calls have a tail the
probe's quiet calls do not show: on the test bed a mixed tp 2 x pp 2 job's 64 KiB all-reduces
within a machine take their median, 0.6-0.75 ms, in every capture, but a quarter of them 2-5 ms
(the ranks' threads woken late beside the job's other work), and the job pays their mean,
1.0-1.6 ms, some 24 times a step on its critical path. Between machines the fit already takes the
mean of the probe's rounds; within a machine it cannot, since its repetitions there mix
latency- and bytes-bound sizes whose copies would set a mean.

So where the capture holds calls within one machine (`MIN_CALLS` or more of a kind), they set
that kind's floor within a machine: the one under which the model's mean for those calls is
their measured mean (each timed as `--comm calibrated` times it, commsamples.py), each call
counted at most `CLIP` times their median. A few calls record far more than they cost: in a
tensor-parallel job whose 256 KiB all-reduces within a machine ran beside 512 KiB gradient
all-reduces between machines, a tenth of them took 6-188 ms against a 1.05 ms median, and their
plain mean (13 ms) made the job +33% to +35% on other clusters; clipped, +1% to +4%. Pooled as
the fit pools them: the ring kinds together (their rounds are alike), any other on its own.
Left out, what the tail costs is blamed on the next thing the calibration fits to the capture's
own step, the uplink's share (sharefit.py): a tensor-parallel capture at 300 Mbit/s was given
85% of its uplink for it, and came out +9.9% at 100 Mbit/s where it is -3.0% with its floors.
Over the benchmark's kept runs (docs/validation.md) tensor parallel went 3.2% -> 2.3% and the
mix 5.4% -> 5.1%; jobs without calls within a machine are unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from statistics import fmean, median
from typing import Sequence

from chakra_tools.core.model import CommType

from .clusterfit import ClusterFit
from .kindfit import RING_KINDS, NoCompute
from .commsamples import CommSample
from .library import KindCost

#: the fewest calls of a kind within a machine that set its floor there
MIN_CALLS = 8
#: a call counts at most this many times its kind's median: past that it waited for something
#: else (the replay models that wait where it lies)
CLIP = 8.0
#: the model's mean is matched to the calls' within this share, in at most this many steps
TOLERANCE, ROUNDS = 0.005, 4


def with_job_floors(cluster: ClusterFit, samples: Sequence[CommSample], world: int) -> tuple[ClusterFit, dict]:
    """`cluster` with each kind's floor within a machine set from the capture's calls there
    (`samples`, on `world` ranks placed as the cluster places them), and what was set: {kinds
    (comma-joined): {"calls", "probe_ns", "job_ns"}} (empty where nothing was)."""
    fabric = cluster.fabric.sized(world)
    within: dict[str, list[CommSample]] = {}
    for s in samples:  # collectives (a send's kind is no CommType) within one machine
        if s.kind in CommType.__members__ and len(set(s.group)) > 1 \
                and all(fabric.level_between(s.group[0], r) <= 0 for r in s.group):
            within.setdefault("RING" if s.kind in RING_KINDS else s.kind, []).append(s)
    kinds, changed = dict(cluster.kinds), {}
    for pool, calls in sorted(within.items()):
        names = [k for k in (RING_KINDS if pool == "RING" else (pool,)) if kinds.get(k, KindCost()).floors_ns]
        if len(calls) < MIN_CALLS or not names:
            continue
        old = floor = kinds[names[0]].floor_at(0)
        paid = _paid([s.ns for s in calls])
        for _ in range(ROUNDS):  # a round bound by its bytes does not follow its floor: step again
            priced, units = _priced(replace(cluster, kinds=kinds), calls, world)
            if units <= 0 or abs(paid - priced) <= TOLERANCE * paid:
                break
            floor = max(0.0, floor + (paid - priced) / units)
            for k in names:
                kinds[k] = replace(kinds[k], floors_ns=(floor, *kinds[k].floors_ns[1:]))
        if floor != old:
            changed[",".join(names)] = {"calls": len(calls), "probe_ns": old, "job_ns": floor}
    return replace(cluster, kinds=kinds), changed


def _paid(ns: list[float]) -> float:
    """What the calls cost the job: their mean, each at most `CLIP` times their median."""
    cap = CLIP * median(ns)
    return fmean(min(x, cap) for x in ns)


def _priced(cluster: ClusterFit, calls: Sequence[CommSample], world: int) -> tuple[float, float]:
    """The model's mean for `calls` on `cluster`, and the mean number of floors within a machine
    each pays."""
    backend = cluster.backend(world, NoCompute())
    prices, units = [], []
    for s in calls:
        kind = int(CommType[s.kind])
        prices.append(backend.collective_ns(kind, s.size, s.group))
        units.append(backend.floor_units(kind, s.size, s.group, cluster.kinds.get(s.kind, KindCost())).get(0, 0))
    return fmean(prices), fmean(units)
