"""A cluster's network fitted to the probe's measurements: latency and bandwidth within a machine
and between machines, and what each collective kind costs beyond them.

The probe (core/probe.py) measured messages between two ranks of one machine and of two machines
over a sweep of sizes, and every collective kind over the same sweep. The fit, in three steps:

1. Each level's link from its messages: the cost per byte is the slope between the two largest
   sizes (where the rate shows, past any burst a shaped link lets through at line rate), the
   latency what the smallest size takes beyond its bytes.
2. The reduction's cost per byte, from the probe's local additions (the same slope).
3. Per collective kind, on the library's own algorithm over that fabric (library.py): a fixed
   cost per call and an efficiency, the least squares fit of the measured medians in relative
   terms (every size weighs the same), the efficiency kept within [1/3, 3] and the cost >= 0.

Where the probe ran on one machine, the network between machines is unknown: the fit says so and
a replay that needs it (more machines than one) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Any, Mapping

from chakra_tools.core.errors import InputError
from chakra_tools.core.model import CommType
from chakra_tools.core.placement import Placement
from chakra_tools.core.probe import ProbeResult

from .fabric import Fabric, Level
from .library import P2P, KindCost, LibraryBackend, library_of

INTRA, INTER = "intra-node", "inter-node"
EFFICIENCY_RANGE = (1 / 3, 3.0)


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

    @property
    def ranks_per_node(self) -> int:
        return self.fabric.levels[0].npus

    def backend(self, world: int, base) -> LibraryBackend:
        """A backend for `world` ranks, `ranks_per_node` per machine (as many machines as that
        takes), compute and memory as `base` says."""
        fabric = self.fabric.sized(world)
        if fabric.levels[-1].npus > 1 and not self.inter_known:
            raise InputError(f"{world} ranks at {self.ranks_per_node} per machine span "
                             f"{fabric.levels[-1].npus} machines, but the probe ran on one: the network "
                             "between machines was not measured (probe a multi-node launch)")
        return LibraryBackend(base, fabric, self.library, dict(self.kinds), self.reduce_ns_per_byte)

    def to_dict(self) -> dict[str, Any]:
        return {"library": self.library, "reduce_ns_per_byte": self.reduce_ns_per_byte,
                "inter_known": self.inter_known,
                "levels": [{"name": lv.name, "npus": lv.npus, "latency_ns": lv.latency_ns,
                            "ns_per_byte": lv.ns_per_byte, "shared": lv.shared} for lv in self.fabric.levels],
                "kinds": {k: {"overhead_ns": c.overhead_ns, "efficiency": c.efficiency}
                          for k, c in sorted(self.kinds.items())},
                "rows": list(self.rows)}


def cluster_from_dict(doc: Any, source: str) -> ClusterFit:
    """The ClusterFit `to_dict` wrote (fit.json's "cluster"); InputError naming the field."""
    def bad(where: str, want: str) -> InputError:
        return InputError(f"{source}: cluster.{where}: expected {want}")

    def number(obj: Any, key: str, where: str, least: float = 0.0) -> float:
        v = obj.get(key) if isinstance(obj, dict) else None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not least <= v < 1e18:
            raise bad(f"{where}{key}", f"a number >= {least:g}")
        return float(v)

    if not isinstance(doc, dict):
        raise bad("", "an object")
    library = doc.get("library")
    if library_of(library) is None:
        raise bad("library", "gloo")
    levels = []
    for i, lv in enumerate(doc.get("levels") or []):
        npus = number(lv, "npus", f"levels[{i}].", 1)
        if not npus.is_integer():
            raise bad(f"levels[{i}].npus", "an integer")
        levels.append(Level(str(lv.get("name", f"level {i}")), int(npus), number(lv, "latency_ns", f"levels[{i}]."),
                            number(lv, "ns_per_byte", f"levels[{i}]."), bool(lv.get("shared", False))))
    if not levels:
        raise bad("levels", "at least one level")
    kinds = {}
    for k, c in (doc.get("kinds") or {}).items():
        kinds[str(k)] = KindCost(number(c, "overhead_ns", f"kinds.{k}."), number(c, "efficiency", f"kinds.{k}.", 1e-6))
    rows = doc.get("rows") or []
    return ClusterFit(Fabric(tuple(levels)), library_of(library), kinds,
                      number(doc, "reduce_ns_per_byte", ""), bool(doc.get("inter_known", True)),
                      tuple(r for r in rows if isinstance(r, dict)))


# -- the fit -------------------------------------------------------------------------------------

def _slope_and_floor(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(ns per byte, ns at zero bytes) of (size, time) points: the slope between the two largest
    sizes, the floor what the smallest size takes beyond its bytes (never below zero)."""
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
    levels = (Level(INTRA, k, *intra), Level(INTER, nodes, *(inter or (0.0, 0.0)), shared=True))
    reduce = _slope_and_floor([(r.size, median(r.ns)) for r in probe.reduce])[0] if len(probe.reduce) > 1 else 0.0
    fabric = Fabric(levels)
    kinds: dict[str, KindCost] = {P2P: KindCost()}
    rows: list[dict] = []
    by_kind: dict[str, list] = {}
    for c in probe.collectives:
        by_kind.setdefault(c.kind, []).append(c)
    for kind, samples in sorted(by_kind.items()):
        kinds[kind] = _kind_cost(fabric, library, kind, samples, reduce)
    backend = LibraryBackend(_NoCompute(), fabric, library, kinds, reduce)
    for kind, samples in sorted(by_kind.items()):
        for c in samples:
            predicted = backend.collective_ns(int(CommType[kind]), c.size, c.ranks)
            measured = median(c.ns)
            rows.append({"kind": kind, "ranks": len(c.ranks), "size": c.size, "measured_ns": measured,
                         "min_ns": min(c.ns), "max_ns": max(c.ns), "predicted_ns": predicted,
                         "error": (predicted - measured) / measured if measured else 0.0})
    return ClusterFit(fabric, library, kinds, reduce, inter is not None, tuple(rows))


def _kind_cost(fabric: Fabric, library: str, kind: str, samples: list, reduce: float) -> KindCost:
    """The fixed cost and efficiency of one kind: measured = cost + latency part + bytes part /
    efficiency + reduction, per sample (its median). The two are read where each shows: the
    efficiency from the sizes whose bytes take most of the modelled time (least squares in time,
    so the largest weigh most: their rate is what a bandwidth-bound job pays), the cost from the
    others (the median of what they take beyond the model, never below 0; small messages on busy
    hosts vary several-fold, and the median is what a job pays per call)."""
    free = Fabric(tuple(Level(lv.name, lv.npus, lv.latency_ns, 0.0, lv.shared) for lv in fabric.levels))
    full_model = LibraryBackend(_NoCompute(), fabric, library, {}, reduce)
    free_model = LibraryBackend(_NoCompute(), free, library, {}, reduce)
    rows = []
    for c in samples:
        full = full_model.collective_ns(int(CommType[kind]), c.size, c.ranks)
        base = free_model.collective_ns(int(CommType[kind]), c.size, c.ranks)
        rows.append((base, full - base, median(c.ns)))
    large = [r for r in rows if r[1] >= r[0] + r[1] - r[1] and r[1] >= 0.5 * (r[0] + r[1]) and r[1] > 0]
    small = [r for r in rows if r not in large]
    cost, x = 0.0, 1.0
    for _ in range(2):
        if small:
            cost = max(0.0, median(m - base - x * b for base, b, m in small))
        if large:
            x = sum(b * (m - base - cost) for base, b, m in large) / sum(b * b for _, b, _ in large)
            x = min(1 / EFFICIENCY_RANGE[0], max(1 / EFFICIENCY_RANGE[1], x))
    return KindCost(cost, 1 / x)


class _NoCompute:
    """The base a communication-only LibraryBackend needs (no compute, scales of 1)."""

    class _Scales:
        comm = 1.0

    scales = _Scales()
    system = None

    def describe(self) -> dict:
        return {}
