"""A cluster's network fitted to the probe's measurements: latency and bandwidth within a machine
and between machines, and what each collective kind costs beyond them.

The probe (core/probe.py) measured messages between two ranks of one machine and of two machines
over a sweep of sizes, and every collective kind over the same sweep. The fit, in three steps:

1. Each level's link from its messages: the cost per byte is the slope between the two largest
   sizes (where the rate shows, past any burst a shaped link lets through at line rate), the
   latency the least of what the two smallest sizes take beyond their bytes.
2. The reduction's cost per byte, from the probe's local additions (the same slope).
3. Per collective kind, on the library's own algorithm over that fabric (library.py; the fit is
   kindfit.py): an efficiency per size, read on the sizes timed back to back whose bytes take
   most of the modelled time and no less than their rounds' floors (modelled over measured bytes
   time, a size's repetitions at their lower quartile: core/timings.py; within [1/3, 3]; a call
   between two sizes interpolated, so a 256 KiB call gets what the probe's 256 KiB calls got,
   not what 4 MiB ones did); and a floor per
   round for each level, from the time per round of the other sizes (latency-bound calls, which
   on a shared host take what waking the members takes, not what the links do) on the groups
   spanning that level: the world for rounds between machines, one machine's ranks for rounds
   within it (pooled over the ring kinds, whose rounds are alike). Between
   machines, the mean of every repetition's rounds: a round there waits for its receiver to
   wake, on the test bed mostly in well under a millisecond, now and then in steps of 3-4 ms,
   and a job pays every wait; within a machine, where calls up to 1 MiB count as
   latency-bound and their copies would set a mean, the median (a capture's own calls there may
   set it instead: jobfloors.py). A kind whose rounds cross different levels (a broadcast's
   tree) and that was not measured on one machine's ranks takes
   the rings' floor within a machine, at most its own mean round; its rounds between machines
   take the rest of its calls. An all-to-all's floor is per peer (its one round's time over the
   n-1 others each member sends to), so it carries to another number of ranks.
4. A shaped uplink's burst, from messages after an idle spell to a waiting receiver: the bytes
   they did not take their rate's time for passed at once (a token bucket, kept as time at the
   rate so a what-if at another rate scales it as a shaper would). And the window a send gets
   ahead of its receive, from the probe's late receives: what they still took beyond their
   link's latency is the part that waited for the receive; the burst carried part of the rest.

Where the probe ran on one machine, the network between machines is unknown: the fit says so and
a replay that needs it (more machines than one) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from statistics import fmean, median
from typing import Any, Mapping

from chakra_tools.core.errors import InputError
from chakra_tools.core.model import CommType
from chakra_tools.core.placement import Placement, placement_in_files
from chakra_tools.core.probe import ProbeResult, read_probe
from chakra_tools.core.timings import undisturbed

from .fabric import Fabric, Level
from .kindfit import NoCompute, fit_kinds
from .library import P2P, KindCost, LibraryBackend, floors_changed, library_of
from .links import LinkChange, changed_fabric

#: what calibrate says where the capture cannot tell latency from bandwidth
ONE_SIZE_WARNING = (
    "warning: every collective kind in this capture comes in one message size, so latency and bandwidth "
    "cannot be told apart: the bandwidth below is a guess, and a prediction at another bandwidth or "
    "scale priced on it will be far off. Measure the links instead: run the probe under the job's own "
    "launcher (torchrun ... -m chakra_tools.capture.probe --out PROBE) and calibrate with --probe PROBE "
    "(docs/howto/what-if.md).")

INTRA, INTER = "intra-node", "inter-node"


@dataclass(frozen=True)
class ClusterFit:
    """The fitted network: the fabric (sized to the probe's job), the library whose algorithms it
    was fitted with, each kind's cost, the reduction's cost per byte. `inter_known`: whether the
    probe crossed machines."""

    fabric: Fabric
    library: str
    kinds: Mapping[str, KindCost]
    reduce_ns_per_byte: float
    inter_known: bool = True
    rows: tuple[dict, ...] = field(default_factory=tuple)
    #: what a send gets ahead of a late receive (bytes; None where the probe did not measure it)
    p2p_window_bytes: int | None = None

    @property
    def ranks_per_node(self) -> int:
        return self.fabric.levels[0].npus

    def backend(self, world: int, base, changes: tuple[LinkChange, ...] = ()) -> LibraryBackend:
        """A backend for `world` ranks, `ranks_per_node` per machine (as many machines as that
        takes), each link as `changes` say (a latency the floors too), the rest as `base` says."""
        sized = self.fabric.sized(world)
        fabric, kinds = changed_fabric(sized, changes), floors_changed(self.kinds, sized, changes)
        if fabric.levels[-1].npus > 1 and not self.inter_known:
            raise InputError(f"{world} ranks at {self.ranks_per_node} per machine span "
                             f"{fabric.levels[-1].npus} machines, but the probe ran on one: the network "
                             "between machines was not measured (probe a multi-node launch)")
        return LibraryBackend(base, fabric, self.library, kinds, self.reduce_ns_per_byte, self.p2p_window_bytes,
                              probed_nodes=self.fabric.levels[-1].npus, carried_over=sharing_carried(sized, fabric))

    def priced(self, probe: ProbeResult, changes: tuple[LinkChange, ...] = ()) -> list[dict]:
        """Each collective `probe` measured against this fit's price for it on as many ranks (with
        `changes`, the links as they say): `error` against its undisturbed time, `mean_error`
        against its repetitions' mean (what a job of latency-bound calls pays). The fit's own
        probe, or one on another cluster, checks how the model carries (bench/collectives_check.py)."""
        backend = self.backend(len(probe.hosts), NoCompute(), changes)
        rows = []
        for c in sorted(probe.collectives, key=lambda c: c.kind):
            predicted = backend.collective_ns(int(CommType[c.kind]), c.size, c.ranks)
            measured, mean = undisturbed(c.ns), fmean(c.ns)
            rows.append({"kind": c.kind, "ranks": len(c.ranks), "size": c.size, "measured_ns": measured,
                         "min_ns": min(c.ns), "max_ns": max(c.ns), "mean_ns": mean, "predicted_ns": predicted,
                         "error": (predicted - measured) / measured if measured else 0.0,
                         "mean_error": (predicted - mean) / mean if mean else 0.0})
        return rows

    def network_yaml(self, npus: int) -> str:
        """The fabric as an ASTRA-sim analytical network of `npus` NPUs: a FullyConnected
        dimension per machine, a Switch across machines. ASTRA-sim gives every NPU its own link
        per dimension, so a machine's shared uplink is written as its rate split among the
        machine's ranks, and a Switch's latency is per hop (two per message)."""
        fabric = self.fabric.sized(npus)
        topo, counts, bws, lats = [], [], [], []
        for i, lv in enumerate(fabric.levels):
            switch = i == len(fabric.levels) - 1
            per_npu = lv.bandwidth_bytes_per_s / (self.ranks_per_node if lv.shared else 1)
            topo.append("Switch" if switch else "FullyConnected")
            counts.append(str(lv.npus))
            bws.append(f"{min(per_npu / (1 << 30), 1e9):.6g}")
            lats.append(f"{lv.latency_ns / (2 if switch else 1):.6g}")
        return ("# ASTRA-sim analytical network fitted by trace-convert calibrate --probe "
                "(chakra_tools/replay/clusterfit.py)\n"
                f"# levels: {', '.join(lv.name for lv in fabric.levels)}; "
                "trace-replay --network-fit prices the library's own algorithms on them\n"
                f"topology: [ {', '.join(topo)} ]\n"
                f"npus_count: [ {', '.join(counts)} ]\n"
                f"bandwidth: [ {', '.join(bws)} ]  # GB/s per NPU (1 GB = 2**30 bytes)\n"
                f"latency: [ {', '.join(lats)} ]  # ns per hop\n")

    def to_dict(self) -> dict[str, Any]:
        return {"library": self.library, "reduce_ns_per_byte": self.reduce_ns_per_byte,
                "inter_known": self.inter_known,
                "levels": [{"name": lv.name, "npus": lv.npus, "latency_ns": lv.latency_ns,
                            "ns_per_byte": lv.ns_per_byte, "shared": lv.shared, "burst_ns": lv.burst_ns,
                            "shared_efficiency": lv.shared_efficiency}
                           for lv in self.fabric.levels],
                "kinds": {k: c.to_dict() for k, c in sorted(self.kinds.items())},
                "p2p_window_bytes": self.p2p_window_bytes, "rows": list(self.rows)}


#: a shared link's rate changed by this factor or more, either way, carries the capture's sharing
#: loss past where it was read, where calls lost at least `SHARING_LOSS_SAID` of the rate to each
#: other (less moves a what-if by less than the bed's noise)
SHARING_RATE_SPAN = 2.0
SHARING_LOSS_SAID = 0.05


def sharing_carried(fitted: Fabric, target: Fabric) -> tuple[str, ...]:
    """What a replay on `target` prices from the capture unmeasured: each shared level where calls
    lost some of the rate to each other in the capture (`Level.shared_efficiency`, read at the
    capture's rate) and a what-if changed that rate `SHARING_RATE_SPAN` times or more. On the test
    bed FSDP with 79-80% came out 8-9% long at twice the capture's rate (-3.7% had it lost
    nothing), and -4.0% and +3.8% at half of it (-16.4% for the first had it lost nothing)."""
    notes = []
    for before, after in zip(fitted.levels, target.levels):
        if not before.shared or before.shared_efficiency > 1 - SHARING_LOSS_SAID or after.ns_per_byte <= 0:
            continue
        factor = before.ns_per_byte / after.ns_per_byte
        if 1 / SHARING_RATE_SPAN < factor < SHARING_RATE_SPAN:
            continue
        notes.append(f"calls sharing the {before.name} links got {before.shared_efficiency:.0%} of their rate "
                     f"together in the capture; at {factor:.3g}x that rate what they lose is carried over "
                     f"unmeasured (on the test bed FSDP with 79-80% came out 8-9% long at twice the capture's "
                     f"rate, 4% short to 4% long at half of it)")
    return tuple(notes)


def fit_cluster(rankset: str | Any, probe_path: str | Any) -> ClusterFit:
    """The probe's fit, checked against the capture it is to price: both must place as many
    ranks on each machine (where the rank set records its hosts)."""
    probe = read_probe(probe_path)
    cluster = fit_probe(probe)
    place = placement_in_files(rankset)
    if place is not None and place.ranks_per_node not in (None, cluster.ranks_per_node):
        raise InputError(f"{rankset}: its ranks ran {place.ranks_per_node} per machine, but the probe "
                         f"{probe.source} ran {cluster.ranks_per_node} per machine: probe with the job's own "
                         "launcher (same --nproc-per-node)")
    if place is not None and not place.contiguous:
        raise InputError(f"{rankset}: its ranks are not placed in rank order on its machines "
                         f"({[list(n) for n in place.nodes]}); the fitted fabric assumes torchrun's placement")
    return cluster


def cluster_lines(cluster: ClusterFit) -> list[str]:
    """The fitted network as text: a line per level, per kind, and the probe's worst rows."""
    lines = [f"network measured by the probe ({cluster.library}'s algorithms on it):"]
    for lv in cluster.fabric.levels:
        rate = lv.bandwidth_bytes_per_s
        shared = ", shared by the machine's ranks" if lv.shared else ""
        if lv.shared_efficiency < 1:
            shared += f" ({lv.shared_efficiency:.0%} of it to calls sharing it, in the capture)"
        burst = f", a burst of {lv.burst_ns / 1e6:.3g} ms at that rate after idle" if lv.burst_ns > 0 else ""
        lines.append(f"  {lv.name:<11} {lv.npus:>3} per unit: latency {lv.latency_ns / 1000:.1f} us, "
                     f"{rate * 8 / 1e6:.4g} Mbit/s ({rate / 1e9:.4g} GB/s){shared}{burst}")
    if not cluster.inter_known:
        lines.append("  inter-node: not measured (the probe ran on one machine)")
    for kind, c in sorted(cluster.kinds.items()):
        floors = ", ".join(f"{lv.name} {f / 1e6:.3g}" for lv, f in zip(cluster.fabric.levels, c.floors_ns))
        unit = "peer" if c.per_peer else "round"
        lines.append(f"  {kind:<15} efficiency {c.efficiency:.3f}, floor per {unit} (ms): {floors or 'none'}")
    if cluster.p2p_window_bytes is not None:
        lines.append(f"  a send gets {cluster.p2p_window_bytes / 1024:.0f} KiB ahead of its receive; the rest waits "
                     "until the receive is posted")
    if cluster.rows:
        errors = sorted(abs(r["error"]) for r in cluster.rows)
        lines.append(f"  the probe's {len(errors)} measurements on it: median |error| {median(errors):.1%}, "
                     f"max {errors[-1]:.1%}")
    return lines


# -- the fit -------------------------------------------------------------------------------------

def _slope_and_floor(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(ns per byte, ns at zero bytes) of (size, time) points: the slope between the two largest
    sizes, the floor the least of what the two smallest take beyond their bytes (at least 0; behind
    a shaper small sizes ride its bucket, and the smallest alone, 1 KiB, took 49-579 us in four
    runs on the test bed, mostly waking ranks on 2 cores)."""
    points = sorted(points)
    if len(points) < 2:
        raise InputError("the probe measured one size only: latency and bandwidth cannot be told apart")
    (s1, t1), (s2, t2) = points[-2], points[-1]
    per_byte = max(0.0, (t2 - t1) / (s2 - s1)) if s2 > s1 else 0.0
    floor = max(0.0, min(t - s * per_byte for s, t in points[:2]))
    return per_byte, floor


def _link(probe: ProbeResult, same_host: bool) -> tuple[float, float] | None:
    """(latency ns, ns per byte) of the messages between ranks of one machine (`same_host`) or
    of two; None where the probe sent none."""
    points = [(s.size, median(s.one_way_ns)) for s in probe.p2p
              if (probe.hosts[s.src] == probe.hosts[s.dst]) == same_host]
    if not points:
        return None
    per_byte, latency = _slope_and_floor(points)
    return latency, per_byte


def fit_probe(probe: ProbeResult) -> ClusterFit:
    """The cluster network the probe's measurements describe (see the module's docstring)."""
    library = library_of(probe.backend)
    if library is None:
        raise InputError(f"{probe.source}: the probe ran on {probe.backend!r}; only gloo's algorithms are "
                         "modelled (library.py), so its collectives cannot be fitted")
    place = Placement.from_hosts(dict(enumerate(probe.hosts)))
    if not place.contiguous:
        raise InputError(f"{probe.source}: its ranks are not placed {place.ranks_per_node or 'evenly'} per machine "
                         f"in rank order ({len(place.nodes)} machines: {[list(n) for n in place.nodes]}); "
                         "the fabric assumes torchrun's placement")
    k, nodes = place.ranks_per_node, len(place.nodes)
    intra = _link(probe, True) or (0.0, 0.0)
    inter = _link(probe, False)
    burst = _burst(probe, inter) if inter is not None else 0.0
    levels = (Level(INTRA, k, *intra), Level(INTER, nodes, *(inter or (0.0, 0.0)), shared=True, burst_ns=burst))
    reduce = _slope_and_floor([(r.size, median(r.ns)) for r in probe.reduce])[0] if len(probe.reduce) > 1 else 0.0
    fabric = Fabric(levels)
    kinds = {P2P: KindCost(), **fit_kinds(fabric, library, probe.collectives, reduce)}
    fit = ClusterFit(fabric, library, kinds, reduce, inter is not None, (),
                     _window(probe, {True: (*intra, 0.0), False: inter and (*inter, burst)}))
    return replace(fit, rows=tuple(fit.priced(probe)))


def _passed(samples, hosts, link: tuple[float, float], same_host: bool, latencies: int) -> list[tuple[int, float]]:
    """(size, bytes that did not take the link's rate) of each bandwidth-bound sample on the
    link (`link`: latency ns, ns per byte), beyond `latencies` of its latency."""
    latency, per_byte = link
    out = []
    for s in samples:
        if (hosts[s.src] == hosts[s.dst]) != same_host or per_byte <= 0 or s.size * per_byte < 4 * latency:
            continue  # not bandwidth-bound: what it takes there is latency, not bytes
        rated = max(0.0, median(s.ns) - latencies * latency) / per_byte
        out.append((s.size, min(float(s.size), max(0.0, s.size - rated))))
    return out


def _burst(probe: ProbeResult, inter: tuple[float, float]) -> float:
    """The uplink's bucket in ns of its rate: the median of what messages after an idle spell
    did not take the rate's time for, among those the rate showed in (past the bucket); the
    largest such message where none was. 0 where the probe sent none."""
    passed = _passed(probe.idle_send, probe.hosts, inter, False, 2)  # the message and the reply
    if not passed:
        return 0.0
    shown = [free for size, free in passed if free < 0.9 * size]
    return (median(shown) if shown else max(size for size, _ in passed)) * inter[1]


def _window(probe: ProbeResult, links: Mapping[bool, tuple[float, float, float] | None]) -> int | None:
    """The bytes a send gets ahead of a late receive: each late receive took its link's latency
    and the bytes neither sent ahead nor let through by the link's bucket (`links`: same machine
    or not -> (latency ns, ns per byte, burst ns)); the median over the probe's bandwidth-bound
    late receives, at most their size. None where none was measured."""
    ahead = []
    for same, link in links.items():
        if link is None:
            continue
        latency, per_byte, burst = link
        for size, free in _passed(probe.late_recv, probe.hosts, (latency, per_byte), same, 1):
            ahead.append(min(float(size), max(0.0, free - (burst / per_byte if per_byte > 0 else 0.0))))
    return int(median(ahead)) if ahead else None
