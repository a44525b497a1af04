"""What each rank runs its nodes on, and how many at once: the replayer's lanes and per-rank state.

A node takes a lane by its kind (core.lanes: host op, GPU kernel, collective, ...), one lane of
each kind per rank as ASTRA-sim has them, or one per recorded thread and device stream
(`Resources.per`); each lane holds a limited number of nodes in flight, and the rest wait in the
order the feeder handed them out (engine.py's `_issue`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from chakra_tools.core.errors import InputError
from chakra_tools.core.lanes import COMM, COMPUTE, HOST, LANES, MEM, OTHER
from chakra_tools.core.lanes import lane_of as core_lane_of
from chakra_tools.core.model import NodeType
from chakra_tools.feed.feeder import ETFeeder
from chakra_tools.feed.info import NodeInfo

_NLANES = len(LANES)
_UNLIMITED = 1 << 62

#: ASTRA-sim's per-rank limits; 0 = unlimited
DEFAULT_LIMITS = {"host": 1, "compute": 1, "comm": 1, "recv": 0, "mem": 0, "other": 0}


#: core.lanes' lane by (node type, is_cpu_op), as a table: this runs once per replayed node
_LANE_OF = {(int(t), cpu): core_lane_of(t, cpu) for t in NodeType for cpu in (False, True)}
#: the same with memory nodes on the communication slot, as ASTRA-sim issues them
_SLOT_OF = {key: COMM if lane == MEM else lane for key, lane in _LANE_OF.items()}
#: both as lists indexed by node type * 2 + is_cpu_op, for the compiled kernel (_kernel.c)
LANE_TABLE = [_LANE_OF.get((t, cpu), OTHER) for t in range(len(NodeType)) for cpu in (False, True)]
SLOT_TABLE = [_SLOT_OF.get((t, cpu), OTHER) for t in range(len(NodeType)) for cpu in (False, True)]


def lane_of(info: NodeInfo) -> int:
    return _LANE_OF.get((info.type, info.is_cpu_op), OTHER)


def _slot_of(info: NodeInfo) -> int:
    return _SLOT_OF.get((info.type, info.is_cpu_op), OTHER)


def _whose_call(info: NodeInfo) -> object:
    """Under `Resources.calls` "group": a collective's process group, or the sends' own key (None:
    the rank's communication lane, as memory nodes on the communication slot)."""
    return info.pg_name if info.type == _COLL else _SEND if info.type == _SEND else None


def parse_limits(text: str | None) -> dict[str, int]:
    """`"compute=2,comm=0"` over the defaults (0 = unlimited)."""
    limits = dict(DEFAULT_LIMITS)
    for part in filter(None, (text or "").split(",")):
        k, _, v = part.partition("=")
        limits[k.strip()] = int(v)
    Resources(limits)  # refuses a lane it does not know
    return limits


#: Resources.per values: one lane per kind (ASTRA-sim), or per recorded thread and stream
LANE_SPLITS = ("kind", "stream")
#: Resources.calls values: a rank's collectives share one communication lane (ASTRA-sim), or each
#: process group has its own and sends take none (gloo: `LibraryBackend.call_lanes`)
CALL_LANES = ("rank", "group")
_SEND = int(NodeType.COMM_SEND_NODE)
_COLL = int(NodeType.COMM_COLL_NODE)


@dataclass(frozen=True)
class Resources:
    """What each rank runs its nodes on, and how many at once.

    `limits`: nodes in flight per lane (0 = unlimited; `DEFAULT_LIMITS` are ASTRA-sim's).
    `per`: "kind" gives each rank one lane of each kind (ASTRA-sim's model: one host thread, one
    GPU compute queue, one comm queue); "stream" gives it one host lane per recorded thread (the
    `tid` attribute) and one compute or comm lane per device stream (`stream`), each with the
    kind's limit, as a GPU program runs: two streams' kernels overlap, the main thread and
    autograd's run side by side. Nodes without the attribute share their kind's lane.
    `memory_on_comm`: memory loads and stores take the communication slot (ASTRA-sim issues them
    as communication: they wait for each other and for collectives under `comm`'s limit; their
    events still say `mem`); False gives them the `mem` lane of their own.
    `calls`: "rank" puts a rank's collectives and sends on its one communication lane; "group"
    gives each process group a lane of `comm`'s limit and sends a lane without one, as gloo runs
    them: a ProcessGroupGloo's collectives queue for that group's own worker threads, while a send
    goes out from the calling thread at once (ProcessGroupGloo::send), beside them.
    """

    limits: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    per: str = "kind"
    memory_on_comm: bool = True
    calls: str = "rank"

    def __post_init__(self) -> None:
        if self.per not in LANE_SPLITS:
            raise InputError(f"--lanes {self.per!r}: use " + " or ".join(LANE_SPLITS))
        if self.calls not in CALL_LANES:
            raise InputError(f"calls {self.calls!r}: use " + " or ".join(CALL_LANES))
        unknown = set(self.limits) - set(LANES)
        if unknown:
            raise InputError(f"unknown lane {sorted(unknown)[0]!r} in --limits; lanes: {', '.join(LANES)}")

    def caps(self) -> list[int]:
        """Per lane kind, its capacity (unlimited as a large number)."""
        lim = {**DEFAULT_LIMITS, **self.limits}
        return [lim[name] or _UNLIMITED for name in LANES]


@dataclass
class RankState:
    """Per-rank state: its feeder, its resources (a lane kind and occupancy each), deferred nodes,
    collective counters. Resources 0..5 are the lane kinds; "stream" adds one per (kind, key)."""

    rank: int
    feeder: ETFeeder
    kind_caps: list[int]
    split: bool = False  # one resource per recorded thread / stream
    memory_on_comm: bool = True
    by_group: bool = False  # one comm resource per process group, sends on one without a limit
    caps: list[int] = field(default_factory=list)
    busy: list[int] = field(default_factory=list)
    deferred: list[list[int]] = field(default_factory=list)
    lane_freed_by: list[int] = field(default_factory=list)
    keyed: dict[tuple, int] = field(default_factory=dict)  # (lane, tid or stream) -> resource
    coll_seq: dict[str, int] = field(default_factory=dict)
    #: collective node -> its place among the rank's calls on its group, given as it leaves the
    #: feeder (program order), not as it starts: a call waiting for its lane must not swap places
    #: with a later one that found a lane free (gloo and NCCL match calls in the order they are made)
    seq_of: dict[int, int] = field(default_factory=dict)
    freed_by: dict[int, tuple[int, int]] = field(default_factory=dict)  # node -> (event, time) that freed it
    live: dict[int, tuple[int, int]] = field(default_factory=dict)  # node -> (event, resource) in flight
    n_deferred: int = 0

    def __post_init__(self) -> None:
        for lane in range(_NLANES):
            self._add(lane)
        if not self.split and not self.by_group:  # resources 0..5 are the lanes: no lookup on the hot path
            self.resource = _slot_of if self.memory_on_comm else lane_of

    def _add(self, lane: int, cap: int | None = None) -> int:
        self.caps.append(self.kind_caps[lane] if cap is None else cap)
        self.busy.append(0)
        self.deferred.append([])
        self.lane_freed_by.append(-1)
        return len(self.caps) - 1

    def resource(self, info: NodeInfo) -> int:
        """The resource `info` runs on (with `split`: its thread's or stream's lane; with
        `by_group`: its process group's, or the sends')."""
        lane = _slot_of(info) if self.memory_on_comm else lane_of(info)
        if self.by_group:
            key = _whose_call(info) if lane == COMM else None
        else:
            key = info.tid if lane == HOST else info.stream if lane in (COMPUTE, COMM) else None
        if key is None:
            return lane
        res = self.keyed.get((lane, key))
        if res is None:
            res = self.keyed[(lane, key)] = self._add(lane, _UNLIMITED if key == _SEND else None)
        return res
