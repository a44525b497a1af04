"""A network calibrated from a capture: ASTRA-sim configs fitted to the capture's own communication.

The default network (a 50 GB/s, 500 ns switch) is another machine's. This module measures the
machine the capture ran on from the capture itself and writes it as ordinary ASTRA-sim files
(`network.yml`, `system.json`) that `trace-replay --network/--system` and ASTRA-sim both read, and
the user can edit.

What is measured: every collective instance (the i-th collective of a process group on each of
its members) and every matched send/receive, each timed as `--comm calibrated` times it
(calibrate.py: each member's time after the last one arrived, arrivals and completions from the
recorded timeline of recorded.py: a rank arrives when it entered the c10d call, and gloo's
worker may take it up a millisecond later, which is the call's time), the waiting taken out; an instance's figure is the longest of its
members' (it is over when the last member returns, and the model charges every member one
figure). Instances of one (kind, group, size) form a *bucket*, whose figure is their mean: what
a step pays on average, the slow instances of a loaded host included (gloo on 2 busy cores has
instances ten times the median; the report shows median, min and max beside the mean).

What is fitted: the three numbers of the analytical model that cost communication: a dimension's
`latency` (ns per hop), its `bandwidth`, and the system's `local-mem-bw` (the reduction of a
received message: 3 accesses per byte). Not the endpoint delay: the model (as ASTRA-sim) charges
it on dimensions other than the first only, and ASTRA-sim refuses a dimension of one NPU
(`npus_count ... should be larger than 1`, NetworkParser.cc) that would make the ranks' ring the
second; so a collective costs, beyond its bytes, only its messages' latency, and gloo's fixed cost
per collective (about 0.4 ms on 2 busy cores, where a send pays 0.1 ms) is shared out as latency;
the per-kind fit (`fit_kind_latencies`, our replay only) gives each kind its own.
The model is affine in the three, so each bucket's coefficients are read off the model itself
(`probe`): whatever algorithm, topology and group size the configs say, the fit is in the
replay's own terms. They are fitted by non-negative least squares over the instances, in time:
the replay charges every instance its bucket's figure, and a step is the sum of what it charges,
so the fit makes that sum right (weighed by each instance's hops, the latency's coefficient:
one latency for every kind leaves the plain sum 1-13% short on a gloo sweep; the per-kind fit
makes it exact). (Fitting the relative error of each bucket, all weighing the
same, came out 27-72% short of the capture's communication on gloo: its instances vary tenfold,
and that minimum sits near the fastest buckets; the job replayed -28% to -54% off.) The latency
is always fitted; the per-byte costs only where the instances need them by the Bayesian
information criterion, the instances' spread about their buckets' means as the noise: a capture
of 24-448-byte messages fitted a 1 MB/s link to noise, and its network then priced another
capture's 66 KiB all-reduces at +924% of that job's step.

Assumptions, stated once: one Ring dimension with the ring algorithm for every collective (gloo's
algorithms are rings; a 2-rank capture cannot tell a ring from a switch); one chunk per
collective; a bucket with one size cannot separate latency from bandwidth (the fit report says
which kinds have one size only).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean, median
from typing import Iterable, Sequence

from chakra_tools.core.errors import InputError
from chakra_tools.core.model import CommType
from chakra_tools.feed.info import NodeInfo

from .backend import AnalyticalBackend
from .clusterfit import ClusterFit, fit_cluster
from .commsamples import CommSample, comm_samples
from .jobfloors import with_job_floors
from .library import P2P
from .lsq import nonnegative_least_squares
from .config import MAX_RATE, MIN_BANDWIDTH, Dim, NetworkConfig, SystemConfig

#: the unknowns, in this order: latency (ns per hop), ns per byte on a link, reduction ns per byte
PARAMS = ("latency_ns", "link_ns_per_byte", "reduce_ns_per_byte")
#: GB/s as ASTRA-sim reads it (1 GB = 2**30 bytes) per byte/ns
_GBPS_PER_BYTE_NS = 1e9 / (1 << 30)


# --------------------------------------------------------------------------------------------
# the model, probed
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NetworkFit:
    """The fitted parameters: ns per hop, ns per byte on a link, reduction ns per byte."""

    latency_ns: float
    link_ns_per_byte: float
    reduce_ns_per_byte: float

    @property
    def bandwidth_gbps(self) -> float:
        """The link bandwidth in ASTRA-sim's GB/s, within what config.py accepts."""
        return _gbps(self.link_ns_per_byte)

    @property
    def local_mem_bw_gbps(self) -> float:
        """`local-mem-bw` for the reduction cost (collectives.PhaseContext.reduce: bytes per ns),
        within what config.py accepts."""
        if self.reduce_ns_per_byte <= 1 / MAX_RATE:
            return float(MAX_RATE)
        return max(MIN_BANDWIDTH, 1 / self.reduce_ns_per_byte)

    def network(self, npus: int) -> NetworkConfig:
        return NetworkConfig((Dim("Ring", npus, self.bandwidth_gbps, self.latency_ns),), "calibrated")

    def system(self) -> SystemConfig:
        return SystemConfig(local_mem_bw_gbps=self.local_mem_bw_gbps, source="calibrated")

    def backend(self, npus: int) -> AnalyticalBackend:
        return AnalyticalBackend(self.network(npus), self.system())


def _gbps(ns_per_byte: float) -> float:
    if ns_per_byte <= 0:
        return float(MAX_RATE)
    return min(MAX_RATE, max(MIN_BANDWIDTH, _GBPS_PER_BYTE_NS / ns_per_byte))


class KindPriced:
    """A backend (feed.Backend) that prices each collective kind, and send/receive, on a network
    of its own, and everything else on `shared`. One Ring with one latency cannot hold gloo's
    costs: a collective pays a fixed ~1 ms a send does not (0.2 ms), so a network fitted to a
    capture of collectives overcharged a 2-rank pipeline's sends. The per-kind fit
    (`fit_kind_latencies`: a latency per kind, the byte costs shared; `Calibration.per_kind`)
    holds both; it exists in our replay only, since ASTRA-sim's configs have one network for
    every kind (network.yml keeps the shared fit)."""

    def __init__(self, shared: AnalyticalBackend, kinds: dict[str, AnalyticalBackend]):
        self.shared, self.kinds = shared, kinds
        self.system = shared.system

    def _for(self, comm_type: int) -> AnalyticalBackend:
        return self.kinds.get(CommType(comm_type).name, self.shared)

    def compute_ns(self, rank: int, info: NodeInfo) -> int:
        return self.shared.compute_ns(rank, info)

    def memory_ns(self, rank: int, info: NodeInfo, now_ns: int) -> int:
        return self.shared.memory_ns(rank, info, now_ns)

    def p2p_ns(self, src: int, dst: int, size: int) -> int:
        return self.kinds.get(P2P, self.shared).p2p_ns(src, dst, size)

    def collective_ns(self, comm_type: int, size: int, ranks: Sequence[int],
                      involved_dim: Sequence[bool] | None = None) -> int:
        return self._for(comm_type).collective_ns(comm_type, size, ranks, involved_dim)

    def collective_finish_ns(self, comm_type: int, size: int, ranks: Sequence[int],
                             involved_dim: Sequence[bool] | None, arrivals_ns: Sequence[int]) -> list[int]:
        return self._for(comm_type).collective_finish_ns(comm_type, size, ranks, involved_dim, arrivals_ns)

    def notes(self) -> list[str]:
        return self.shared.notes()

    def unused_scales(self) -> list[str]:
        return self.shared.unused_scales()

    def describe(self) -> dict:
        return {**self.shared.describe(),
                "per_kind": {k: {"latency_ns": b.network.dims[0].latency_ns,
                                 "bandwidth_gbps": b.network.dims[0].bandwidth_gbps,
                                 "local_mem_bw_gbps": b.system.local_mem_bw_gbps}
                             for k, b in sorted(self.kinds.items())}}


#: probing values: large enough that the model's truncation to whole ns is negligible
_BIG_LATENCY = 1e6
_SLOW = MIN_BANDWIDTH


def model_ns(fit: NetworkFit, kind: str, group: tuple[int, ...], size: int, npus: int) -> int:
    """What the replay charges for one instance on the network `fit` describes."""
    backend = fit.backend(npus)
    if kind == P2P:
        return backend.p2p_ns(group[0], group[1], size)
    return backend.collective_ns(int(CommType[kind]), size, group)


def probe(kind: str, group: tuple[int, ...], size: int, npus: int) -> tuple[float, tuple[float, ...]]:
    """(constant, coefficient per PARAMS) of the model's time for one instance: the model is
    affine in the three, so each coefficient is a difference of two evaluations.

    >>> c, (lat, link, red) = probe("ALL_REDUCE", (0, 1), 4096, 2)  # ring of 2: 2 messages of 2 KiB, 1 reduced
    >>> round(lat, 3), round(link), round(red)
    (2.0, 4096, 6144)
    """
    t0 = model_ns(NetworkFit(0.0, 0.0, 0.0), kind, group, size, npus)
    slow_link = 1 / (_SLOW / _GBPS_PER_BYTE_NS)
    return t0, ((model_ns(NetworkFit(_BIG_LATENCY, 0.0, 0.0), kind, group, size, npus) - t0) / _BIG_LATENCY,
                (model_ns(NetworkFit(0.0, slow_link, 0.0), kind, group, size, npus) - t0) / slow_link,
                (model_ns(NetworkFit(0.0, 0.0, 1 / _SLOW), kind, group, size, npus) - t0) * _SLOW)


# --------------------------------------------------------------------------------------------
# the fit
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Bucket:
    """The instances of one kind, group and size; `ns`, what the fit aims at, is their mean."""

    kind: str
    group: tuple[int, ...]
    size: int
    samples_ns: tuple[float, ...]
    where: str

    @property
    def ns(self) -> float:
        return fmean(self.samples_ns)


def buckets(samples: Iterable[CommSample]) -> list[Bucket]:
    """Samples grouped by (kind, group, size), in a stable order."""
    by: dict[tuple, list[CommSample]] = defaultdict(list)
    for s in samples:
        by[(s.kind, s.group, s.size)].append(s)
    return [Bucket(k, g, size, tuple(s.ns for s in v), v[0].where)
            for (k, g, size), v in sorted(by.items(), key=lambda kv: (kv[0][0], len(kv[0][1]), kv[0][2], kv[0][1]))]


def fit_network(rows: Sequence[Bucket], npus: int) -> NetworkFit:
    """Non-negative least squares over the instances of `rows`, in time: a bucket of n instances
    weighs sqrt(n) on its mean (the same minimum as each instance's own residual), in units of
    the mean instance so that the sums compare at any scale. A parameter is fitted only where
    the instances ask for it (`nonnegative_least_squares`'s criterion, with the spread of each
    bucket's instances about its mean as the noise)."""
    system, spread, count = _weighted_system(rows, npus, lambda b, coeffs: coeffs)
    # the latency is always fitted: every message pays it, and it carries the total (the
    # residuals, each weighed by its latency coefficient, the hops, sum to zero)
    return NetworkFit(*nonnegative_least_squares(system, spread=spread, count=count, keep=(0,)))


def fit_kind_latencies(rows: Sequence[Bucket], npus: int) -> dict[str, NetworkFit]:
    """One latency per kind, the per-byte costs shared: {kind: its network}. gloo's fixed cost
    differs by kind (a collective ~1 ms, a send 0.2 ms, both on 2 busy cores), which one latency
    cannot hold; a byte costs the same whatever moves it, and fitting it per kind extrapolated
    noise (a kind seen at 200 bytes alone priced a 66 KiB all-reduce at +1,031% of a job's
    step). Fitted as `fit_network`, every kind's latency kept."""
    kinds = sorted({b.kind for b in rows if b.ns > 0})
    if not kinds:
        return {}
    column = {k: i for i, k in enumerate(kinds)}
    n = len(kinds)

    def expand(b: Bucket, coeffs: tuple[float, ...]) -> list[float]:
        lat = [0.0] * n
        lat[column[b.kind]] = coeffs[0]
        return [*lat, *coeffs[1:]]

    system, spread, count = _weighted_system(rows, npus, expand)
    x = nonnegative_least_squares(system, spread=spread, count=count, keep=tuple(range(n)))
    return {k: NetworkFit(x[column[k]], x[n], x[n + 1]) for k in kinds}


def _weighted_system(rows: Sequence[Bucket], npus: int, columns) -> tuple[list, float, int]:
    """The least-squares rows of `rows` (`columns(bucket, (latency, link, reduce) coefficients)`
    lays a bucket's coefficients out), the instances' spread about their means, their count."""
    timed = [b for b in rows if b.ns > 0]
    if not timed:
        raise InputError("no timed collective or send/receive to fit a network to")
    count = sum(len(b.samples_ns) for b in timed)
    unit = sum(b.ns * len(b.samples_ns) for b in timed) / count
    system = []
    for b in timed:
        const, coeffs = probe(b.kind, b.group, b.size, npus)
        w = len(b.samples_ns) ** 0.5 / unit
        system.append(([c * w for c in columns(b, coeffs)], (b.ns - const) * w))
    spread = sum((t - b.ns) ** 2 for b in timed for t in b.samples_ns) / unit ** 2
    return system, spread, count


# --------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------

@dataclass
class Calibration:
    """A fitted network and how well it fits: per bucket, per kind, and one figure."""

    fit: NetworkFit
    npus: int
    rows: list[dict]
    kinds: dict[str, dict]
    files: dict[str, str] = field(default_factory=dict)
    replay: dict | None = None
    #: kind -> its network in the per-kind fit (`fit_kind_latencies`); empty in a fit.json
    #: written before it was kept
    per_kind: dict[str, NetworkFit] = field(default_factory=dict)
    #: the network the probe measured (clusterfit.py), which prices communication where present
    cluster: "ClusterFit | None" = None
    #: how much of a shared uplink's rate the capture's calls got together (sharefit.SharingFit)
    sharing: dict | None = None
    #: the floors within a machine the capture's own calls there set (jobfloors.py): {kinds:
    #: {"calls", "probe_ns", "job_ns"}}; printed, the cluster's kinds price them
    job_floors: dict | None = None

    @property
    def one_size(self) -> bool:
        """Whether no kind the capture showed came in two sizes: latency and bandwidth are then
        not told apart, and the fit's bandwidth is a guess."""
        return bool(self.kinds) and not any(k["separable"] for k in self.kinds.values())

    def kind_priced(self, npus: int, base: AnalyticalBackend | None = None) -> "KindPriced":
        """A backend for `npus` ranks pricing each kind the capture showed with its own latency
        (`per_kind`) and any other on the shared fit; compute as `base` says (default: the
        shared fit's)."""
        shared = base or self.fit.backend(npus)
        return KindPriced(shared, {k: AnalyticalBackend(f.network(npus), f.system(), shared.memory, shared.scales)
                                   for k, f in self.per_kind.items()})

    @property
    def median_abs_error(self) -> float:
        return median(abs(r["error"]) for r in self.rows) if self.rows else 0.0

    def to_dict(self) -> dict:
        return {"version": 1, "npus": self.npus,
                "fit": {"latency_ns": self.fit.latency_ns, "bandwidth_gbps": self.fit.bandwidth_gbps,
                        "local_mem_bw_gbps": self.fit.local_mem_bw_gbps,
                        "link_ns_per_byte": self.fit.link_ns_per_byte,
                        "reduce_ns_per_byte": self.fit.reduce_ns_per_byte},
                "median_abs_error": self.median_abs_error, "buckets": self.rows, "kinds": self.kinds,
                "per_kind": {k: {p: getattr(f, p) for p in PARAMS} for k, f in sorted(self.per_kind.items())},
                "files": self.files, "replay": self.replay, "one_size": self.one_size,
                "cluster": self.cluster.to_dict() if self.cluster is not None else None, "sharing": self.sharing,
                "job_floors": self.job_floors}


def residual_rows(rows: Sequence[Bucket], fit: NetworkFit, npus: int) -> list[dict]:
    """Per bucket: measured (median, min, max, count) against the fitted model, relative error."""
    out = []
    for b in rows:
        predicted = model_ns(fit, b.kind, b.group, b.size, npus)
        out.append({"kind": b.kind, "ranks": len(b.group), "size": b.size, "count": len(b.samples_ns),
                    "measured_ns": round(b.ns), "median_ns": round(median(b.samples_ns)),
                    "min_ns": round(min(b.samples_ns)),
                    "max_ns": round(max(b.samples_ns)), "predicted_ns": predicted,
                    "error": (predicted - b.ns) / b.ns if b.ns > 0 else 0.0, "example": b.where})
    return out


def kind_fits(rows: Sequence[Bucket], npus: int) -> dict[str, dict]:
    """Each kind fitted alone: what a network for that kind only would be, and its error; a kind
    seen at one size only cannot separate latency from bandwidth (`separable` false)."""
    out = {}
    for kind in sorted({b.kind for b in rows}):
        mine = [b for b in rows if b.kind == kind and b.ns > 0]
        if not mine:
            continue
        fit = fit_network(mine, npus)
        errs = [abs(r["error"]) for r in residual_rows(mine, fit, npus)]
        out[kind] = {"latency_ns": fit.latency_ns, "bandwidth_gbps": fit.bandwidth_gbps,
                     "sizes": len({b.size for b in mine}), "separable": len({b.size for b in mine}) > 1,
                     "median_abs_error": median(errs)}
    return out


def calibrate(path: str | Path, *, npus: int | None = None, comm_group: str | Path | None = None,
              probe: str | Path | None = None) -> Calibration:
    """Fit a network to the rank set at `path`; `npus` (default: its ranks) sizes the network
    written, so that a rank set scaled to more ranks replays on it. `probe`: the probe's folder
    or probe.json (capture/probe.py), whose per-level fit (clusterfit.py) then prices
    communication and writes the hierarchical network.yml."""
    samples = [s for s in comm_samples(path, comm_group) if len(set(s.group)) > 1]  # a 1-rank group crosses no network
    world = max((r for s in samples for r in s.group), default=0) + 1
    npus = max(npus or 0, world)
    rows = buckets(samples)
    if not any(b.ns > 0 for b in rows):
        raise InputError(f"{path}: no timed collective or send/receive between two ranks or more to fit "
                         "a network to (a single-rank capture has none)")
    fit = fit_network(rows, world)
    cluster, job_floors = None, {}
    if probe is not None:
        cluster, job_floors = with_job_floors(fit_cluster(path, probe), samples, world)
    return Calibration(fit, npus, residual_rows(rows, fit, world), kind_fits(rows, world),
                       per_kind=fit_kind_latencies(rows, world), cluster=cluster, job_floors=job_floors or None)
