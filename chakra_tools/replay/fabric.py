"""A cluster's network as levels of a hierarchy, and what a round of simultaneous messages costs on it.

Ranks sit in a hierarchy of units: level 0 joins the ranks of one machine (its memory, NVLink,
loopback), level 1 joins machines (each machine's link to the switch), and so on. A rank's
address is its coordinate per level, innermost first (rank r of k per machine is (r % k, r // k):
torchrun's placement, and ASTRA-sim's multi-dimensional addresses). A message between two ranks
crosses the *outermost* level where their addresses differ: two ranks of different machines talk
over the machines' links, whatever their places inside.

A level's link is either the members' own (`shared` False: every rank has its link, as ASTRA-sim's
dimensions and a GPU cluster's one NIC per GPU) or the unit's, shared by all of its members'
messages (a machine with one uplink: the flows that leave it at once split its rate). A link is
full duplex: what a unit sends and what it receives are separate.

A *round* is a set of messages sent at once (one step of a ring, an all-to-all). Each message
takes its level's latency plus its bytes at that level's rate, except that on a shared level its
unit's link carries every byte that crosses it in that round, in and out, so the message ends when
the busier of its two ends has carried them all (the bottleneck's fair share: equal messages on a
shared link end together). The round ends with its last message.

>>> f = Fabric((Level("intra-node", 4, 1000, 0.1), Level("inter-node", 2, 20000, 80.0, shared=True)))
>>> f.address(5), f.level_between(1, 2), f.level_between(1, 5)
((1, 1), 0, 1)
>>> f.round_ns([(1, 5, 1000), (2, 6, 1000)])   # two flows share node 0's uplink: 20 us + 2000 B x 80 ns
180000
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from math import prod
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Level:
    """One level of the hierarchy: `npus` units of the level below per unit of this one, the
    latency of one message across it (ns) and its link's cost per byte (ns), and whether the link
    belongs to the unit (shared by its ranks) or to each rank. `burst_ns`: a shaped link's token
    bucket, as the time its rate takes to earn it: after an idle spell that much traffic passes
    at line rate (a cloud NIC's or `tc tbf`'s burst; 0 on a plain link). Kept in time, not
    bytes, so a faster link of the same shaper passes proportionally more. `shared_efficiency`:
    the share of a shared link's rate that two calls keeping it busy together get (TCP flows
    through one shaper lose some to each other; 1: none lost), read off a capture (sharefit.py)."""

    name: str
    npus: int
    latency_ns: float
    ns_per_byte: float
    shared: bool = False
    burst_ns: float = 0.0
    shared_efficiency: float = 1.0

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return 1e9 / self.ns_per_byte if self.ns_per_byte > 0 else float("inf")


@dataclass(frozen=True)
class Fabric:
    levels: tuple[Level, ...]

    @property
    def npus(self) -> int:
        return prod(lv.npus for lv in self.levels)

    def address(self, rank: int) -> tuple[int, ...]:
        out = []
        for lv in self.levels:
            out.append(rank % lv.npus)
            rank //= lv.npus
        return tuple(out)

    def level_between(self, a: int, b: int) -> int:
        """The outermost level where ranks a and b differ (-1 for the same rank)."""
        x, y = self.address(a), self.address(b)
        for i in range(len(x) - 1, -1, -1):
            if x[i] != y[i]:
                return i
        return -1

    def unit(self, rank: int, level: int) -> tuple[int, ...]:
        """The unit whose link a message of `rank` across `level` uses: its coordinates at that
        level and above (rank 5 of 4 per machine, across level 1: machine (1,))."""
        return self.address(rank)[level:]

    def uplinks(self, src: int, dst: int) -> tuple[tuple, ...]:
        """The shared links a message from `src` to `dst` crosses, as keys: its level's link out
        of src's unit and into dst's (none within one rank, or on a level of per-rank links).

        >>> Fabric((Level("intra-node", 2, 0, 1.0), Level("inter-node", 2, 0, 8.0, shared=True))).uplinks(1, 2)
        (('out', 1, (0,)), ('in', 1, (1,)))
        """
        if src == dst:
            return ()
        lv = self.level_between(src, dst)
        if not self.levels[lv].shared:
            return ()
        return ("out", lv, self.unit(src, lv)), ("in", lv, self.unit(dst, lv))

    def message_ns(self, src: int, dst: int, size: int) -> int:
        """One message alone."""
        return self.round_ns([(src, dst, size)])

    def round_ns(self, messages: Iterable[tuple[int, int, int]]) -> int:
        """The time of a round of simultaneous (src, dst, bytes) messages."""
        msgs = [(s, d, b, self.level_between(s, d), self.uplinks(s, d)) for s, d, b in messages if s != d]
        loads: dict[tuple, int] = defaultdict(int)
        for _, _, b, _, links in msgs:
            for link in links:
                loads[link] += b
        end = 0.0
        for s, d, b, lv, links in msgs:
            level = self.levels[lv]
            carried = max(loads[link] for link in links) if links else b
            end = max(end, level.latency_ns + carried * level.ns_per_byte)
        return int(end)

    def with_level(self, index: int, **changes) -> "Fabric":
        levels = list(self.levels)
        levels[index] = replace(levels[index], **changes)
        return Fabric(tuple(levels))

    def sized(self, world: int) -> "Fabric":
        """This fabric grown (or cut) to hold `world` ranks: the inner levels kept, the outermost
        level given as many units as it takes (more machines of the same kind)."""
        inner = prod(lv.npus for lv in self.levels[:-1])
        outer = max(1, -(-world // inner))
        return self.with_level(len(self.levels) - 1, npus=outer) if outer != self.levels[-1].npus else self

    def describe(self) -> list[dict]:
        return [{"name": lv.name, "npus": lv.npus, "latency_ns": lv.latency_ns,
                 "bandwidth_gbps": lv.bandwidth_bytes_per_s / (1 << 30), "shared": lv.shared}
                for lv in self.levels]


def fabric_of_network(dims: Sequence, hops: Sequence[int]) -> Fabric:
    """ASTRA-sim's dimensions as a fabric: each NPU its own link per dimension (not shared), a
    message paying its dimension's latency once per hop (`hops[i]`: 1 on a Ring or FullyConnected
    dimension, 2 through a Switch) and its bytes at the dimension's rate (1 GB = 2**30 bytes)."""
    return Fabric(tuple(Level(f"dim {i}", d.npus, d.latency_ns * h, 1 / d.bytes_per_ns)
                        for i, (d, h) in enumerate(zip(dims, hops))))
