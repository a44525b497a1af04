"""What each collective kind costs beyond the links, fitted to the probe's sweep of every kind
over sizes (step 3 of clusterfit.py's fit): a floor per round at each level, from the
latency-bound sizes, and an efficiency per size, from the bandwidth-bound ones, each priced by
the library's own algorithm on the fitted fabric (library.py)."""

from __future__ import annotations

from statistics import fmean, median

from chakra_tools.core.model import CommType
from chakra_tools.core.timings import undisturbed

from .fabric import Fabric, Level
from .library import KindCost, LibraryBackend

EFFICIENCY_RANGE = (1 / 3, 3.0)

#: the kinds gloo runs as rings of one share per round (reduce-scatter as an all-reduce)
RING_KINDS = ("ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER")
#: the kinds whose floor is per peer (KindCost.per_peer): gloo's all-to-all, one round in which
#: each member sends to every other
PER_PEER_KINDS = ("ALL_TO_ALL",)


def fit_kinds(fabric: Fabric, library: str, collectives, reduce: float) -> dict[str, KindCost]:
    """Each kind's floors and efficiency from the probe's `collectives` (core/probe.py's samples)
    on `fabric`, priced by `library`'s algorithms with the reduction's `reduce` ns per byte."""
    by_kind: dict[str, list] = {}
    for c in collectives:
        by_kind.setdefault(c.kind, []).append(c)
    # ring kinds send alike in every round (one share to the next rank): their rounds' floors
    # are pooled, three kinds' repetitions steadier than one's; the others keep their own
    modelled = {kind: _modelled(fabric, library, kind, samples, reduce) for kind, samples in by_kind.items()}
    pooled: dict[int, list[float]] = {}
    for kind in RING_KINDS:
        for level, xs in _round_times(modelled.get(kind, []), by_kind.get(kind, [])).items():
            pooled.setdefault(level, []).extend(xs)
    ring_floors = _floors(fabric, pooled, ())
    kinds = {}
    for kind, samples in sorted(by_kind.items()):
        floors = ring_floors if kind in RING_KINDS else _kind_floors(fabric, modelled[kind], samples, ring_floors)
        kinds[kind] = KindCost(floors, *_efficiency(modelled[kind], samples, floors), per_peer=kind in PER_PEER_KINDS)
    return kinds


def _modelled(fabric: Fabric, library: str, kind: str, samples, reduce: float) -> list[tuple]:
    """Per sample: (latency part, bytes part, measured (`undisturbed`), floors it pays at each
    level (`floor_units`), outermost level its ranks span). The bytes part of a sample timed alone
    after an idle pause is what its bytes take past the bucket of the outermost link it crosses,
    which carries the rest at once: a 4 or 16 KiB all-to-all there took its rounds' floors, not its
    bytes' time (0.5 ms, where 16 KiB take 1.3 ms at 100 Mbit/s); counted as bandwidth-bound, its
    repetitions were left out of the floors, which then priced a 4-rank all-to-all's round at
    0.97 ms (now 1.08) where such calls take 1.2-1.6 ms on average on the bed, and a mixture of
    experts at 2x2 @500 Mbit/s came out 11-12% short in four of eight benchmark runs (now 6-11%,
    three of the four within 10%)."""
    free = Fabric(tuple(Level(lv.name, lv.npus, lv.latency_ns, 0.0, lv.shared) for lv in fabric.levels))
    full_model = LibraryBackend(NoCompute(), fabric, library, {}, reduce)
    free_model = LibraryBackend(NoCompute(), free, library, {}, reduce)
    unfitted = KindCost(per_peer=kind in PER_PEER_KINDS)  # how its rounds pay floors, none fitted yet
    rows = []
    for c in samples:
        full = full_model.collective_ns(int(CommType[kind]), c.size, c.ranks)
        base = free_model.collective_ns(int(CommType[kind]), c.size, c.ranks)
        units = full_model.floor_units(int(CommType[kind]), c.size, c.ranks, unfitted)
        spans = max(0, max((fabric.level_between(c.ranks[0], r) for r in c.ranks), default=0))
        ridden = fabric.levels[spans].burst_ns if c.timed_alone else 0.0
        rows.append((base, max(0.0, full - base - ridden), undisturbed(c.ns), units, spans))
    return rows


def _bound(b: float, m: float, floors: float = 0.0) -> bool:
    """Bandwidth-bound: its bytes take half of what it measured and no less than its rounds'
    `floors` (ns in all), as a round takes the larger of the two; else its rounds wait on floors,
    and what they took past them is not the rate (a 16 KiB all-gather at 200 Mbit/s, 0.68 ms of
    bytes a round and a 0.98 ms floor, read as efficiency 0.58, priced the call at 50 Mbit/s 55%
    over what it took)."""
    return b > 0 and b >= 0.5 * m and b >= floors


def _paid(units: dict[int, int], floors: tuple[float, ...]) -> float:
    """ns of `floors` (by level) a call pays, `units` of them at each level (`floor_units`)."""
    return sum(n * floors[min(lv, len(floors) - 1)] for lv, n in units.items()) if floors else 0.0


def _round_times(rows: list[tuple], samples, inner: tuple[float, ...] | None = None) -> dict[int, list[float]]:
    """level -> every repetition of the latency-bound sizes of the groups spanning that level,
    per round (on a busy host each varies several-fold: the median of them all is steadier
    than that of a few sizes' medians). `rows`: `_modelled` of `samples`. A call whose rounds
    cross different levels (a broadcast's tree: its first round within a machine) counts each
    round at the spanned level, or, given the `inner` levels' floors, only what is left of it
    once its inner rounds have taken theirs."""
    out: dict[int, list[float]] = {}
    for (base, b, m, units, level), c in zip(rows, samples):
        if _bound(b, m):
            continue
        n = max(1, sum(units.values()))
        ahead = {lv: u for lv, u in units.items() if lv < level} if inner is not None else {}
        if ahead and units.get(level):
            own = units[level]
            out.setdefault(level, []).extend(
                max(0.0, x - sum(u * min(inner[lv], x / n) for lv, u in ahead.items())) / own for x in c.ns)
        else:
            out.setdefault(level, []).extend(x / n for x in c.ns)
    return out


def _kind_floors(fabric: Fabric, rows: list[tuple], samples, rings: tuple[float, ...]) -> tuple[float, ...]:
    """A kind's floors where its calls' rounds may cross different levels (a broadcast's tree).
    A level it was not measured on alone takes the rings' floor there, but no more than the
    kind's own rounds take on average (on the test bed a broadcast's whole tree of 3 rounds
    took 0.3-0.5 ms, the rings' round within a machine 0.63); then the rounds between machines
    are what their calls took beyond their rounds within."""
    alone = _round_times(rows, samples)
    floors = list(_floors(fabric, alone, rings))
    outer = len(floors) - 1
    if alone.get(outer):
        for lv in range(outer):
            if not alone.get(lv):
                floors[lv] = min(floors[lv], median(alone[outer]))
        split = _round_times(rows, samples, tuple(floors))
        floors[outer] = _floors(fabric, {outer: split[outer]}, tuple(floors))[outer]
    return tuple(floors)


def _floors(fabric: Fabric, times: dict[int, list[float]], fallback: tuple[float, ...]) -> tuple[float, ...]:
    """The floor of each level: the median of its round times, the mean of them between
    machines (the module's docstring says why); a level none measured takes `fallback`'s, else
    the next level out's, else 0."""
    outer = len(fabric.levels) - 1
    floors: list[float | None] = [(fmean if i == outer and i > 0 else median)(times[i]) if times.get(i) else None
                                  for i in range(len(fabric.levels))]
    for i in range(len(floors) - 1, -1, -1):
        if floors[i] is None:
            floors[i] = fallback[i] if i < len(fallback) else (floors[i + 1] if i + 1 < len(floors) else 0.0)
    return tuple(float(f) for f in floors)


def _efficiency(rows: list[tuple], samples, floors: tuple[float, ...]) -> tuple[float, tuple]:
    """(efficiency, by size) of the bandwidth-bound sizes on the whole job (module docstring; the
    kind's `floors` by level say which are), not those timed alone after a pause: a shaper's
    bucket carried their bytes (a 16 KiB all-to-all at 100 Mbit/s: efficiency 3, pricing 32 KiB
    under its bytes), and the replay gives it itself."""
    world = max((r[4] for r in rows), default=0)
    low, high = EFFICIENCY_RANGE
    by_size = tuple(sorted((c.size, min(high, max(low, b / max(m - base, 1.0))))
                           for (base, b, m, units, lv), c in zip(rows, samples)
                           if _bound(b, m, _paid(units, floors)) and lv == world and not c.timed_alone))
    return (median(e for _, e in by_size) if by_size else 1.0), by_size


class NoCompute:
    """The base a communication-only LibraryBackend needs (no compute, scales of 1)."""

    class _Scales:
        comm = 1.0

    scales = _Scales()
    system = None

    def describe(self) -> dict:
        return {}
