"""Collectives priced as the library that ran them does them, on the cluster's fabric.

ASTRA-sim runs each collective with the algorithm its system file names, dimension by dimension
(a ring within each machine, then across machines). A captured job's collectives ran as its
library does them, and on a hierarchy the two differ: gloo's all-reduce is one flat ring over the
group's ranks in rank order, which crosses each machine boundary once each way in every step.
So a capture is replayed with its own library's algorithms, each the rounds of messages it sends
(algorithms.py).

Each kind also has a `KindCost` fitted by calibration: a floor per round (the least one round
takes, however small its messages: waking the members that wait for them, which no link
explains; measured, it does not add to a bandwidth-bound round's time but hides behind it, so a
round costs the larger of the two: a 256 KiB all-reduce on 8 ranks at 500 Mbit/s is
latency-bound, 14 rounds of 32 KiB each shorter than the floor, and the same on 4 ranks is not;
an all-to-all's floor is per peer, its round waking each member for every other's message)
and an efficiency (how far the kind's traffic falls short of the links' rate: many flows on one
shaped link lose some to each other).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from chakra_tools.core.model import CommType
from chakra_tools.feed.info import NodeInfo

from .algorithms import IN_FLIGHT, LIBRARIES, WORKERS_OWNED_BY, Round, peers_per_member, ring_all_reduce
from .fabric import Fabric
from .links import latency_factors

P2P = "SEND_RECV"


@dataclass(frozen=True)
class KindCost:
    """What calibration fitted for one kind beyond the links: the least ns a round of its
    algorithm takes, and the links' rate this kind's traffic reaches (1.0: the full rate)."""

    #: the floor of a round by the outermost level it crosses (index 0: within a machine; a
    #: level past the end has the last one's): a tensor-parallel all-reduce within a machine
    #: does not wait what a ring between machines does
    floors_ns: tuple[float, ...] = ()
    efficiency: float = 1.0
    #: (call size, efficiency) where the probe measured it, by size: a link's rate as a call of
    #: that size sees it (a 256 KiB all-reduce gets what 4 MiB ones do not, as nccl-tests' bus
    #: bandwidth varies with size); between two sizes in proportion to log size, beyond them the
    #: nearest; `efficiency` where none was measured
    by_size: tuple[tuple[int, float], ...] = ()
    #: the floor is per peer a member sends to in the round, not per round: an all-to-all's one
    #: round wakes each member for every other's message (on the test bed 150-240 us a peer at 4,
    #: 6 and 8 ranks alike, where a floor per round, fitted on 4, priced 8 ranks' small calls at
    #: half what they took)
    per_peer: bool = False

    def to_dict(self) -> dict:
        return {"floors_ns": list(self.floors_ns), "efficiency": self.efficiency,
                "by_size": [list(p) for p in self.by_size], "per_peer": self.per_peer}

    def efficiency_at(self, size: int) -> float:
        pts = self.by_size
        if not pts:
            return self.efficiency
        if size <= pts[0][0]:
            return pts[0][1]
        if size >= pts[-1][0]:
            return pts[-1][1]
        i = bisect.bisect_right([p[0] for p in pts], size)
        (s0, e0), (s1, e1) = pts[i - 1], pts[i]
        w = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
        return e0 + w * (e1 - e0)

    def floors_paid(self, fabric: Fabric, msgs) -> tuple[int, int]:
        """(the outermost level a round of `msgs` crosses on `fabric`, -1 for none; how many of
        this kind's floors it pays there: one, or per peer its busiest member sends to)."""
        crossed = max((fabric.level_between(s, d) for s, d, _ in msgs if s != d), default=-1)
        return crossed, peers_per_member(msgs) if self.per_peer else 1

    def floor_at(self, level: int) -> float:
        """The floor of a round whose outermost crossing is `level` (0 where none was fitted)."""
        return self.floors_ns[min(level, len(self.floors_ns) - 1)] if self.floors_ns else 0.0

    def with_floors_scaled(self, factors: Mapping[int, float], levels: int) -> "KindCost":
        """This cost on a fabric of `levels` levels with the floor at each level of `factors`
        multiplied by its factor (a what-if on that level's latency)."""
        if not self.floors_ns or not factors:
            return self
        return replace(self, floors_ns=tuple(self.floor_at(i) * factors.get(i, 1.0) for i in range(levels)))

    def floor_of(self, fabric: Fabric, msgs) -> float:
        """This kind's floor for a round of `msgs` on `fabric`."""
        if not self.floors_ns:
            return 0.0
        crossed, units = self.floors_paid(fabric, msgs)
        return self.floor_at(crossed) * units if crossed >= 0 else 0.0


def floors_changed(kinds: Mapping[str, KindCost], fabric: Fabric, changes) -> dict[str, KindCost]:
    """`kinds` with their floors as the --latency `changes` to `fabric` make them: a level's time at
    no bytes is its link's latency or the rings' floor there, whichever is more, and a change to
    it scales every kind's floor there alike (links.latency_factors)."""
    ring = kinds.get("ALL_REDUCE", KindCost())
    factors = latency_factors(fabric, changes, [max(lv.latency_ns, ring.floor_at(i))
                                                for i, lv in enumerate(fabric.levels)])
    return {k: c.with_floors_scaled(factors, len(fabric.levels)) for k, c in kinds.items()}


def library_of(name: str | None) -> str | None:
    """The library a backend name stands for, where its algorithms are modelled here (gloo;
    "cpu:gloo,cuda:nccl" reads as gloo for CPU jobs)."""
    if not name:
        return None
    parts = [p.split(":")[-1].strip().lower() for p in name.split(",")]
    return next((p for p in parts if p in LIBRARIES), None)


@dataclass
class LibraryBackend:
    """A feed.Backend whose communication is the library's algorithms on `fabric`; compute and
    memory as `base` (an AnalyticalBackend: its scales, roofline and memory) says. Every member
    of a collective starts at the last one's arrival: gloo's rings advance in lock step."""

    base: object
    fabric: Fabric
    library: str = "gloo"
    kinds: Mapping[str, KindCost] = field(default_factory=dict)
    reduce_ns_per_byte: float = 0.0
    #: bytes a send gets ahead of its receive (the probe's late receives); past them it waits for
    #: the receive to be posted (timing.Modelled.eager_send_ns). None: every send is eager
    p2p_window_bytes: int | None = None
    #: the machines the probe ran on (None: no probe's fit): a kind whose cost is per peer (an
    #: all-to-all's flows grow with the machines) is extrapolated on more (`extrapolated`)
    probed_nodes: int | None = None
    #: what this backend prices from the capture past where it was read, said after a replay
    #: (`extrapolated`; `clusterfit.sharing_carried`)
    carried_over: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.system = self.base.system
        self.lane_limits = {"comm": IN_FLIGHT.get(self.library, 1)}
        self.call_lanes = WORKERS_OWNED_BY.get(self.library, "rank")
        self._algorithms = LIBRARIES[self.library]
        self._cache: dict = {}
        self._priced: dict[float, Fabric] = {}  # efficiency -> the fabric at it
        self._for_calls: dict[tuple[str, int], Fabric] = {}  # (kind, size) -> its fabric
        self._link_free: dict[tuple, int] = {}  # a shared link -> when its queued messages are through
        self._tokens: dict[tuple, int] = {}  # a shared link -> its bucket when its queue last emptied (ns of rate)
        self._beyond: dict[str, int] = {}  # per-peer kind -> the most machines a call of it spanned past the probe's

    def compute_ns(self, rank: int, info: NodeInfo) -> int:
        return self.base.compute_ns(rank, info)

    def memory_ns(self, rank: int, info: NodeInfo, now_ns: int) -> int:
        return self.base.memory_ns(rank, info, now_ns)

    def _fabric(self, kind: str, size: int) -> Fabric:
        """The fabric at this kind's efficiency for calls of `size` (bytes cost 1/efficiency more),
        looked up once per kind and size (every pipeline send asks)."""
        fab = self._for_calls.get((kind, size))
        if fab is None:
            eff = round(self.kinds.get(kind, KindCost()).efficiency_at(size), 6)
            fab = self._priced.get(eff)
            if fab is None:
                fab = self._priced[eff] = self.fabric if eff == 1.0 else Fabric(tuple(
                    replace(lv, ns_per_byte=lv.ns_per_byte / eff) for lv in self.fabric.levels))
            self._for_calls[(kind, size)] = fab
        return fab

    def _rounds_of(self, kind: CommType, size: int, ranks: Sequence[int]) -> list[Round]:
        return self._algorithms.get(kind, ring_all_reduce)(tuple(sorted(ranks)), size)

    def floor_units(self, comm_type: int, size: int, ranks: Sequence[int], cost: KindCost) -> dict[int, int]:
        """How many of `cost`'s floors the library's algorithm for this call pays at each level
        (`KindCost.floors_paid`, round by round)."""
        units: dict[int, int] = {}
        for msgs, _ in self._rounds_of(CommType(comm_type), size, ranks):
            level, n = cost.floors_paid(self.fabric, msgs)
            if level >= 0:
                units[level] = units.get(level, 0) + n
        return units

    def _scaled(self, ns: float) -> int:
        scale = self.base.scales.comm
        return int(ns) if scale == 1.0 else max(0, round(ns * scale))

    def p2p_ns(self, src: int, dst: int, size: int) -> int:
        if src == dst:
            return 0
        key = (P2P, src, dst, size)
        ns = self._cache.get(key)
        if ns is None:
            cost = self.kinds.get(P2P, KindCost())
            ns = self._cache[key] = self._scaled(max(cost.floor_of(self.fabric, [(src, dst, size)]),
                                                     self._fabric(P2P, size).message_ns(src, dst, size)))
        return ns

    def _p2p_parts(self, src: int, dst: int, size: int) -> tuple[int, int, float]:
        """(the level a message crosses, the ns its bytes keep that level's link busy, its floor)."""
        lv = self.fabric.level_between(src, dst)
        return (lv, self._scaled(size * self._fabric(P2P, size).levels[lv].ns_per_byte),
                self.kinds.get(P2P, KindCost()).floor_of(self.fabric, [(src, dst, size)]))

    def p2p_call(self, src: int, dst: int, size: int) -> tuple[int, dict[tuple, int], int]:
        """A message as `_call` gives a collective (sharing.SharedUplinks runs both alike): its
        ns alone (`p2p_ns`), ns each shared link it crosses is busy carrying its bytes, and the
        part no bucket shortens (its floor, or its link's latency where that is more)."""
        key = (P2P, src, dst, size, "call")
        got = self._cache.get(key)
        if got is None:
            links = self.fabric.uplinks(src, dst)
            loads: dict[tuple, int] = {}
            waking = 0.0
            if links:
                lv, busy, floor = self._p2p_parts(src, dst, size)
                loads = {link: busy for link in links}
                waking = max(floor, self.fabric.levels[lv].latency_ns)
            got = self._cache[key] = (self.p2p_ns(src, dst, size), loads, self._scaled(waking))
        return got

    def p2p_finish_ns(self, src: int, dst: int, size: int, now_ns: int) -> int:
        """When a message sent at `now_ns` arrives, after the traffic already on the shared links
        it crosses (its machine's uplink out, the peer's in; `_share`): two pipeline stages'
        sends leaving one machine at once take twice as long, as they did on the test bed. A
        message within a machine, or on a level of per-rank links, takes its time alone."""
        links = self.fabric.uplinks(src, dst)
        if not links:
            return now_ns + self.p2p_ns(src, dst, size)
        lv, bytes_ns, floor = self._p2p_parts(src, dst, size)
        through = max(self._share(link, now_ns, bytes_ns)[0] for link in links)
        return max(now_ns + self._scaled(floor), through + self._scaled(self.fabric.levels[lv].latency_ns))

    def _share(self, link: tuple, now: int, busy: int) -> tuple[int, int]:
        """When `busy` ns of new traffic on `link` from `now` is through: after what the link
        still carries (first in, first out). Work-conserving, which matters more than who goes
        first: sharing the rate with the newcomer without delaying the traffic already there
        (whose end was given when it started) let a stream of calls through faster than the
        link (a tensor-parallel job's gradient all-reduces came out 19-28% short). A shaped
        link (`Level.burst_ns`) refills its bucket while idle and lets that much through at
        once; while it sends at its rate the bucket earns what it spends. Returns the end and
        the ns of the traffic the bucket let through at once."""
        free = self._link_free.get(link, 0)
        start = max(now, free)
        burst = self.fabric.levels[link[1]].burst_ns
        spent = 0
        if burst > 0:
            tokens = min(int(burst), self._tokens.get(link, int(burst)) + max(0, now - free))
            spent = min(tokens, busy)
            self._tokens[link] = tokens - spent
        self._link_free[link] = start + busy - spent
        return start + busy - spent, spent

    def collective_ns(self, comm_type: int, size: int, ranks: Sequence[int],
                      involved_dim: Sequence[bool] | None = None) -> int:
        if len(ranks) <= 1:
            return 0
        return self._call(comm_type, size, tuple(ranks))[0]

    def collective_finish_ns(self, comm_type: int, size: int, ranks: Sequence[int],
                             involved_dim: Sequence[bool] | None, arrivals_ns: Sequence[int]) -> list[int]:
        """When the call ends for its members, all starting at the last arrival: its time alone,
        or later where the shared links it crosses still carry earlier traffic (another group's
        collective, pipeline sends): each link carries its bytes after what it already had
        (`_share`). Two data-parallel groups of a tensor-parallel job all-reduce across the
        same uplinks at once; priced alone, each took half the time it did on the test bed."""
        now = max(arrivals_ns)
        if len(ranks) <= 1:
            return [now] * len(ranks)
        alone, loads, waking = self._call(comm_type, size, tuple(ranks))
        shared = [self._share(link, now, busy) for link, busy in loads.items()]
        # what a shaped uplink let through at once the call did not wait for, on its slowest link
        # alike; its floor-bound rounds stay
        saved = min((spent for _, spent in shared), default=0)
        end = now + max(alone - saved, waking)
        for through, _ in shared:
            end = max(end, through)
        return [end] * len(ranks)

    def _call(self, comm_type: int, size: int, ranks: tuple[int, ...]) -> tuple[int, dict[tuple, int], int]:
        """One pass over the call's rounds, cached: its ns alone (each round the larger of its
        floor and its messages, plus the reduction), ns each shared link is busy carrying its bytes
        at the link's rate, and the sum of its rounds' floors: the members' own time, which however
        fast a shaper's bucket lets the bytes go no call takes less than. Two calls in flight
        overlap their floors: on the test bed at 500 Mbit/s a reduce-scatter and an all-gather
        whose rounds are floor-bound alone ended within 6-8 ms of each other's start, where taking
        turns on their floors gave 10. A kind's efficiency is what a call gets of the link alone
        (the probe's calls, one at a time): it lengthens the call, not what the call keeps the link
        busy, so calls in flight together get the link's rate less what the capture shows they lose
        together (`Level.shared_efficiency`, sharefit.py), not their efficiencies alone stacked.
        Stacked, a data-parallel job with two 1 MiB all-reduces in flight (0.87 alone in its probe)
        replayed its own capture 9.6% long, which the sharing fit, which only slows calls, could
        not mend, and came out 14% long on twice the machines; so, the fit reads 94%, the capture
        replays within 0.1% and the what-if +4%."""
        key = (comm_type, size, ranks)
        got = self._cache.get(key)
        if got is None:
            kind = CommType(comm_type)
            fab = self._fabric(kind.name, size)
            cost = self.kinds.get(kind.name, KindCost())
            if cost.per_peer and self.probed_nodes:
                self._note_beyond(kind.name, ranks)
            total = waking = 0.0
            carried: dict[tuple, int] = {}
            priced: dict = {}
            for msgs, reduced in self._rounds_of(kind, size, ranks):
                for s, d, b in msgs:
                    for link in fab.uplinks(s, d):
                        carried[link] = carried.get(link, 0) + b
                if msgs not in priced:
                    priced[msgs] = (cost.floor_of(fab, msgs), fab.round_ns(msgs))
                floor, bytes_ns = priced[msgs]
                total += max(floor, bytes_ns) + reduced * self.reduce_ns_per_byte
                waking += floor  # however fast its bytes go (a shaper's bucket), a round takes its floor
            got = self._cache[key] = (self._scaled(total),
                                      {link: self._scaled(b * self.fabric.levels[link[1]].ns_per_byte)
                                       for link, b in carried.items()}, self._scaled(waking))
        return got

    def notes(self) -> list[str]:
        return []

    def _note_beyond(self, kind: str, ranks: Sequence[int]) -> None:
        outer = len(self.fabric.levels) - 1
        nodes = len({self.fabric.unit(r, outer) for r in ranks})
        if nodes > self.probed_nodes:
            self._beyond[kind] = max(nodes, self._beyond.get(kind, 0))

    def extrapolated(self) -> list[str]:
        """After a replay: the kinds it priced past what the probe measured, once each, and what
        it carried over from the capture (`carried_over`). An all-to-all on more machines than
        the probe's puts more flows on each uplink, and what they get of it was not measured: on
        the test bed 512 KiB all-to-alls on 3 and 4 machines took 12-25% longer than the fit on 2
        priced them (docs/validation.md)."""
        return [f"{kind.lower().replace('_', '-')} calls here span up to {n} machines, the probe measured "
                f"them on {self.probed_nodes}: with more flows on each uplink, what they get of its rate is "
                f"extrapolated (on the test bed large all-to-alls on 3-4 machines ran 12-25% longer than so "
                f"predicted)" for kind, n in sorted(self._beyond.items())] + list(self.carried_over)

    def unused_scales(self) -> list[str]:
        return self.base.unused_scales()

    def describe(self) -> dict:
        return {**self.base.describe(), "collectives": f"{self.library} (library algorithms)",
                "fabric": self.fabric.describe(), "reduce_ns_per_byte": self.reduce_ns_per_byte,
                "kinds": {k: c.to_dict() for k, c in sorted(self.kinds.items())}}
