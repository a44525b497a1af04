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

import json
from collections import defaultdict, deque
from dataclasses import dataclass, field
from itertools import combinations
from math import log
from pathlib import Path
from statistics import fmean, median
from typing import Iterable, Sequence

from chakra_tools.core.errors import InputError
from chakra_tools.core.commit import Staged
from chakra_tools.core.etio import atomic_output
from chakra_tools.core.graph import RankSet
from chakra_tools.core.model import CommType, Node, NodeType
from chakra_tools.feed.info import NodeInfo

from .backend import AnalyticalBackend
from .calibrate import calibrated_ns
from .clusterfit import ONE_SIZE_WARNING, ClusterFit, cluster_from_dict, cluster_lines, fit_cluster
from .config import MAX_RATE, MIN_BANDWIDTH, Dim, NetworkConfig, SystemConfig
from .recorded import node_ns, read_rankset

P2P = "SEND_RECV"
#: the unknowns, in this order: latency (ns per hop), ns per byte on a link, reduction ns per byte
PARAMS = ("latency_ns", "link_ns_per_byte", "reduce_ns_per_byte")
#: GB/s as ASTRA-sim reads it (1 GB = 2**30 bytes) per byte/ns
_GBPS_PER_BYTE_NS = 1e9 / (1 << 30)


@dataclass(frozen=True)
class CommSample:
    """One collective or send/receive instance: its kind, the ranks in it (send: source,
    destination), its `comm_size`, the longest of its members' calibrated times, where it is."""

    kind: str
    group: tuple[int, ...]
    size: int
    ns: float
    where: str


# --------------------------------------------------------------------------------------------
# samples from a rank set
# --------------------------------------------------------------------------------------------

def comm_samples(path: str | Path, comm_group: str | Path | None = None) -> list[CommSample]:
    """Every timed collective and send/receive of the rank set at `path`, waits taken out."""
    rs = RankSet.load(path, comm_group)
    timelines = read_rankset(path)
    ends = {r: (t.comm_start_ns, t.comm_end_ns) for r, t in timelines.items()}
    return [s for s in (*_collective_samples(rs, ends), *_p2p_samples(rs, ends)) if s is not None]


def _info(node: Node) -> NodeInfo:
    """The fields calibrate.py reads, from a full Node."""
    ns = node_ns(node)
    return NodeInfo(node.id, node.name, int(node.type), node.duration_micros, node.is_cpu_op, 0, 0,
                    node.comm_type, node.comm_size, node.comm_src, node.comm_dst, node.comm_tag,
                    node.pg_name, None, node.start_time_micros, ns or None)


def _sample(kind: str, group: tuple[int, ...], members: list[tuple[int, Node]], ends: dict) -> CommSample | None:
    """An instance's sample: the longest calibrated time of its members; None if none is timed."""
    infos = [_info(n) for _, n in members]
    known = [ends.get(r, ({}, {})) for r, _ in members]
    shares = calibrated_ns(infos, [e.get(n.id) for (_, e), (_, n) in zip(known, members)],
                           [s.get(n.id) for (s, _), (_, n) in zip(known, members)])
    if not shares:
        return None
    r0, n0 = members[0]
    size = max(n.comm_size for _, n in members)
    return CommSample(kind, group, size, max(shares), f"rank {r0} node {n0.id} {n0.name!r}")


def _collective_samples(rs: RankSet, ends: dict) -> Iterable[CommSample | None]:
    per_rank = {r: defaultdict(list) for r in rs.ranks}
    for r in rs.ranks:
        for n in rs[r].nodes.values():
            if n.type is NodeType.COMM_COLL_NODE:
                per_rank[r][n.pg_name].append(n)
    pgs = sorted({pg for seqs in per_rank.values() for pg in seqs})
    for pg in pgs:
        group = tuple(r for r in rs.group_ranks(pg) if r in per_rank)
        count = min(len(per_rank[r][pg]) for r in group)
        for i in range(count):
            members = [(r, per_rank[r][pg][i]) for r in group]
            kind = (members[0][1].comm_type or CommType.ALL_REDUCE).name
            yield _sample(kind, group, members, ends)


def _p2p_samples(rs: RankSet, ends: dict) -> Iterable[CommSample | None]:
    """Sends paired with receives on (source, destination, tag) in issue order, as validate does."""
    recvs: dict[tuple, deque] = defaultdict(deque)
    for r in rs.ranks:
        for n in rs[r].nodes.values():
            if n.type is NodeType.COMM_RECV_NODE:
                recvs[(n.comm_src, r, n.comm_tag)].append(n)
    for r in rs.ranks:
        for n in rs[r].nodes.values():
            queue = recvs.get((r, n.comm_dst, n.comm_tag)) if n.type is NodeType.COMM_SEND_NODE else None
            if queue:
                yield _sample(P2P, (r, n.comm_dst), [(r, n), (n.comm_dst, queue.popleft())], ends)


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


#: sums of squared residuals closer than this (relative) are a tie (rounding decides nothing):
#: one size of one kind fits latency alone and bandwidth alone exactly, and latency, first, wins
_TIE = 1e-9
#: a residual below this share of the data's own sum of squares is an exact fit
_EXACT = 1e-12


def nonnegative_least_squares(system: Sequence[tuple[Sequence[float], float]], *, spread: float = 0.0,
                              count: int | None = None, keep: tuple[int, ...] = ()) -> tuple[float, ...]:
    """The x >= 0 minimising sum((a . x - b)^2) over rows (a, b) of a few unknowns, by trying
    every set of free unknowns (the others at 0); ties go to fewer unknowns, then the earlier.

    With `count` (the observations the rows summarise) the sets are compared by the Bayesian
    information criterion, count * ln(rss / count) + free * ln(count), where rss is the rows'
    sum plus `spread` (what no parameter can explain: the observations about their rows' means).
    A bandwidth fitted to messages of 24 to 448 bytes whose times vary tenfold is noise, and a
    network that prices a megabyte at a second from it is worse than none: such an unknown stays
    at 0 (no cost) unless the observations need it. The unknowns in `keep` are free in every set
    tried (the others only where no such set has a non-negative solution).

    >>> nonnegative_least_squares([([1, 0], 2), ([0, 1], -1)])  # the second would be negative
    (2.0, 0.0)
    """
    k = len(system[0][0])
    floor = _EXACT * sum(b * b for _, b in system)  # an exact fit's rounding: all exact fits tie

    def score(x: tuple[float, ...], free: int) -> float:
        rss = _sse(system, x)
        if count is None:
            return rss
        return count * log((max(rss, floor) + spread) / count) + free * log(count)

    sets = [free for m in range(1, k + 1) for free in combinations(range(k), m)]
    for candidates in ([f for f in sets if set(keep) <= set(f)], sets):
        best, best_score = None, score((0.0,) * k, 0)
        for free in candidates:
            x = _solve_free(system, free, k)
            if x is None or min(x) < 0:
                continue
            s = score(x, len(free))
            if best is None or s < best_score - _TIE * max(1.0, abs(best_score)):
                best, best_score = x, s
        if best is not None:
            return best
    return (0.0,) * k


def _sse(system, x) -> float:
    return sum((sum(a * v for a, v in zip(row, x)) - b) ** 2 for row, b in system)


def _solve_free(system, free: tuple[int, ...], k: int) -> tuple[float, ...] | None:
    """Least squares over the `free` unknowns (normal equations); None when they are not
    determined by the rows (a singular or near-singular system). Each column is scaled to a
    largest entry of 1 first: a latency's coefficients are hops, a bandwidth's are bytes, and
    the normal equations would square the difference."""
    scale = {i: max(abs(row[i]) for row, _ in system) or 1.0 for i in free}
    m = [[sum(row[i] * row[j] for row, _ in system) / (scale[i] * scale[j]) for j in free] for i in free]
    v = [sum(row[i] * b for row, b in system) / scale[i] for i in free]
    sol = _gauss(m, v)
    if sol is None:
        return None
    x = [0.0] * k
    for i, s in zip(free, sol):
        x[i] = s / scale[i]
    return tuple(x)


def _gauss(m: list[list[float]], v: list[float]) -> list[float] | None:
    """Solve m x = v by Gaussian elimination with partial pivoting; None if singular."""
    n = len(v)
    a = [row[:] + [val] for row, val in zip(m, v)]
    scale = max((abs(x) for row in m for x in row), default=0.0) or 1.0
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(a[r][c]))
        if abs(a[p][c]) <= 1e-12 * scale:
            return None
        a[c], a[p] = a[p], a[c]
        for r in range(n):
            if r != c:
                f = a[r][c] / a[c][c]
                a[r] = [x - f * y for x, y in zip(a[r], a[c])]
    return [a[i][n] / a[i][i] for i in range(n)]


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
                "cluster": self.cluster.to_dict() if self.cluster is not None else None}


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
    cluster = fit_cluster(path, probe) if probe is not None else None
    return Calibration(fit, npus, residual_rows(rows, fit, world), kind_fits(rows, world),
                       per_kind=fit_kind_latencies(rows, world), cluster=cluster)


def network_yaml(fit: NetworkFit, npus: int) -> str:
    """The analytical network file (ASTRA-sim's format, REFERENCE §4)."""
    return ("# ASTRA-sim analytical network fitted by trace-convert calibrate (chakra_tools/replay/netfit.py)\n"
            "topology: [ Ring ]\n"
            f"npus_count: [ {npus} ]\n"
            f"bandwidth: [ {fit.bandwidth_gbps:.6g} ]  # GB/s (1 GB = 2**30 bytes)\n"
            f"latency: [ {fit.latency_ns:.6g} ]  # ns per hop\n")


def system_json(fit: NetworkFit) -> dict:
    """The system file: ring everywhere, one chunk, the fitted reduction bandwidth."""
    return {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
            "preferred-dataset-splits": 1,
            **{f"{c}-implementation": ["ring"] for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")},
            "collective-optimization": "baseline", "local-mem-bw": round(fit.local_mem_bw_gbps, 6),
            "boost-mode": 0, "roofline-enabled": 0}


def write_calibration(cal: Calibration, out_dir: str | Path) -> Calibration:
    """Write OUT/network.yml, OUT/system.json and OUT/fit.json, and for a probed cluster
    OUT/cluster.infragraph.yaml where the infragraph package is installed (the fitted fabric as an
    InfraGraph, for `trace-replay --network` and other tools); the paths go into `cal.files`."""
    out = Path(out_dir)
    if not out.is_dir():
        raise InputError(f"{out}: output folder does not exist")
    names = {"network": "network.yml", "system": "system.json", "report": "fit.json"}
    infra = _cluster_infragraph(cal)
    if infra is not None:
        names["infragraph"] = "cluster.infragraph.yaml"
    cal.files = {k: str(out / n) for k, n in names.items()}
    with Staged(out, "calibration") as staged:  # the three replaced together: one fit, never two halves
        with atomic_output(staged.path(names["network"]), "w") as f:
            f.write(cal.cluster.network_yaml(cal.npus) if cal.cluster is not None else network_yaml(cal.fit, cal.npus))
        with atomic_output(staged.path(names["system"]), "w") as f:
            json.dump(system_json(cal.fit), f, indent=1)
        with atomic_output(staged.path(names["report"]), "w") as f:
            json.dump(cal.to_dict(), f, indent=1)
        if infra is not None:
            from .infragraph import write_infragraph

            write_infragraph(infra, staged.path(names["infragraph"]))
        staged.commit(names.values())
    return cal


def _cluster_infragraph(cal: Calibration):
    """The probed cluster's fabric, sized to the calibration's ranks, as an InfraGraph (None
    without a probe, without the package, or where the probe found a level's rate too fast to
    measure: an InfraGraph link needs one)."""
    if cal.cluster is None or any(lv.ns_per_byte <= 0 for lv in cal.cluster.fabric.levels):
        return None
    try:
        from .infragraph import fabric_infragraph
        import infragraph  # noqa: F401
    except ImportError:
        return None
    return fabric_infragraph(cal.cluster.fabric.sized(cal.npus), "calibrated-cluster")


#: what each bucket row of fit.json holds, and its type (int also takes a whole float)
_ROW_FIELDS = {"kind": str, "ranks": int, "size": int, "count": int, "measured_ns": float, "median_ns": float,
               "min_ns": float, "max_ns": float, "predicted_ns": float, "error": float}
_KIND_FIELDS = {"latency_ns": float, "bandwidth_gbps": float, "sizes": int, "separable": bool,
                "median_abs_error": float}
_FIT_FIELDS = ("latency_ns", "link_ns_per_byte", "reduce_ns_per_byte")


def read_calibration(path: str | Path) -> Calibration:
    """The Calibration that `write_calibration` wrote: `path` is its fit.json or the folder that
    holds it. Every field is checked for its type; a malformed file is an InputError naming the
    file and the field (the report reads it typed, not as loose JSON)."""
    from chakra_tools.core.files import read_json

    from chakra_tools.core.commit import recover

    p = Path(path)
    file = p / "fit.json" if p.is_dir() else p
    recover(file.parent)  # a calibration killed while it replaced these files is finished first
    if not file.exists():
        raise InputError(f"{file}: no such file (a calibration folder holds the fit.json that "
                         "trace-convert calibrate writes)")
    doc = read_json(file, what="an object (the fit.json of trace-convert calibrate)")

    def bad(where: str, want: str) -> InputError:
        return InputError(f"{file}: {where}: expected {want} (not a fit.json of trace-convert calibrate?)")

    def typed(obj: dict, key: str, kind: type, where: str):
        v = obj.get(key) if isinstance(obj, dict) else None
        if kind is bool:
            ok = isinstance(v, bool)
        elif kind is int:
            ok = isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()
        elif kind is float:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
        else:
            ok = isinstance(v, kind)
        if not ok:
            raise bad(f"{where}{key}", {bool: "true or false", int: "an integer", float: "a number",
                                        str: "a string", dict: "an object", list: "a list"}[kind])
        return int(v) if kind is int else float(v) if kind is float else v

    if doc.get("version") != 1:
        raise bad("version", "1")
    fit_doc = typed(doc, "fit", dict, "")
    values = [typed(fit_doc, k, float, "fit.") for k in _FIT_FIELDS]
    if min(values) < 0:
        raise bad("fit", "non-negative parameters")
    npus = typed(doc, "npus", int, "")
    if npus < 1:
        raise bad("npus", "at least 1")
    rows = []
    for i, row in enumerate(typed(doc, "buckets", list, "")):
        if not isinstance(row, dict):
            raise bad(f"buckets[{i}]", "an object")
        rows.append({**row, **{k: typed(row, k, t, f"buckets[{i}].") for k, t in _ROW_FIELDS.items()}})
    kinds = {}
    for kind, k in typed(doc, "kinds", dict, "").items():
        if not isinstance(k, dict):
            raise bad(f"kinds.{kind}", "an object")
        kinds[kind] = {**k, **{f: typed(k, f, t, f"kinds.{kind}.") for f, t in _KIND_FIELDS.items()}}
    replay = doc.get("replay")
    if replay is not None and not (isinstance(replay, dict) and all(
            isinstance(m, dict) and all(isinstance(e, (int, float)) for e in m.values()) for m in replay.values())):
        raise bad("replay", "an object {network: {mode: error}} or null")
    files = doc.get("files") or {}
    if not isinstance(files, dict):
        raise bad("files", "an object")
    per_kind = {}
    for kind, k in typed(doc, "per_kind", dict, "").items() if "per_kind" in doc else ():
        params = [typed(k, p, float, f"per_kind.{kind}.") for p in PARAMS]
        if min(params) < 0:
            raise bad(f"per_kind.{kind}", "non-negative parameters")
        per_kind[kind] = NetworkFit(*params)
    cluster = cluster_from_dict(doc["cluster"], str(file)) if doc.get("cluster") is not None else None
    return Calibration(NetworkFit(*values), npus, rows, kinds, {k: str(v) for k, v in files.items()}, replay,
                       per_kind, cluster)


def format_calibration(cal: Calibration) -> str:
    """The fit as text: the parameters, a row per bucket, a line per kind, the per-kind fit."""
    f = cal.fit
    lines = []
    if cal.cluster is not None:
        lines += cluster_lines(cal.cluster) + ["", "the capture's own collectives, on the shared fit "
                                                   "(trace-replay --network-fit prices with the probe's network above):"]
    elif cal.one_size:
        lines.append(ONE_SIZE_WARNING)
    lines += [f"fitted network: latency {f.latency_ns:.0f} ns/hop, bandwidth {f.bandwidth_gbps:.4g} GB/s, "
             f"local-mem-bw {f.local_mem_bw_gbps:.4g} GB/s (Ring of {cal.npus}, ring algorithms)",
             f"{'kind':<15}{'ranks':>6}{'bytes':>10}{'n':>4}{'mean':>11}{'median':>11}{'min..max':>22}{'fitted':>11}"
             f"{'error':>9}"]
    for r in cal.rows:
        lines.append(f"{r['kind']:<15}{r['ranks']:>6}{r['size']:>10}{r['count']:>4}{_us(r['measured_ns']):>11}"
                     f"{_us(r['median_ns']):>11}"
                     f"{_us(r['min_ns']) + '..' + _us(r['max_ns']):>22}{_us(r['predicted_ns']):>11}"
                     f"{r['error']:>+9.1%}")
    for kind, k in cal.kinds.items():
        alone = (f"latency {k['latency_ns']:.0f} ns, bandwidth {k['bandwidth_gbps']:.4g} GB/s"
                 if k["separable"] else "one size only: latency and bandwidth not separable")
        lines.append(f"  {kind} alone: {alone}; median |error| {k['median_abs_error']:.1%}")
    lines.append(f"median |error| over {len(cal.rows)} buckets: {cal.median_abs_error:.1%}")
    if cal.per_kind:
        any_fit = next(iter(cal.per_kind.values()))
        lines.append("per-kind fit (trace-replay --network-fit; ASTRA-sim reads the shared one): latency "
                     + ", ".join(f"{k} {f.latency_ns:.0f} ns" for k, f in sorted(cal.per_kind.items()))
                     + f"; bandwidth {any_fit.bandwidth_gbps:.4g} GB/s, local-mem-bw {any_fit.local_mem_bw_gbps:.4g} GB/s")
    for net, modes in (cal.replay or {}).items():
        lines.append(f"replayed on the {net} network: " + ", ".join(f"{m} {e:+.1%}" for m, e in modes.items())
                     + " (job error against the manifest)")
    return "\n".join(lines)


def _us(ns: float) -> str:
    return f"{ns / 1000:.1f}us"
