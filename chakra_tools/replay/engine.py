"""The replayer: a deterministic discrete-event engine over every rank at once.

One `ETFeeder` per rank hands out issuable nodes; the engine issues them in ascending id onto
per-rank *lanes* with a capacity each (ASTRA-sim's default: one host op, one GPU compute op, one
GPU comm op in flight; receives exempt; memory and metadata nodes unlimited), dispatches each node
to the handler of its kind (`on_comp`, `on_coll`, `on_send`, `on_recv`, `on_mem`, `on_meta`), and
asks the backend (feed.Backend) how long things take.

- Collectives start when every rank of their group has issued them: the k-th collective a rank
  issues in a group meets the k-th of every other member (ASTRA-sim's rule; ranks that disagree
  are reported).
- Sends are eager: the data leaves at issue and arrives `p2p_ns` later, when the send finishes; a
  receive finishes at max(its issue, the arrival). They pair on (src, dst, tag) in issue order.
  With `comm="calibrated"` a send with a recorded duration is a rendezvous instead (gloo's and
  NCCL's): both halves wait for each other, then each takes its recorded share (calibrate.py).
- The kernel is a heap of `(time_ns, seq, event)` with integer nanoseconds, so equal times resolve
  in insertion order and the same input always gives the same timeline, byte for byte.

When the heap runs dry with nodes left, feeders are asked to read past their window (the node that
would unblock another rank may lie beyond it); if that does not help, `DeadlockError` names what
every rank is blocked on.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, NamedTuple, Sequence

from chakra_tools.core.errors import Diagnostic, Diagnostics, InputError
from chakra_tools.core.graph import find_rank_files, read_comm_groups
from chakra_tools.core.model import CommType, NodeType
from chakra_tools.feed.feeder import DeadlockError, ETFeeder
from chakra_tools.feed.info import NodeInfo
from chakra_tools.feed.protocol import Backend

from .calibrate import COMM_MODES, RECORDED, recorded_ns
from .result import ReplayResult

LANES = ("host", "compute", "comm", "recv", "mem", "other")
HOST, COMPUTE, COMM, RECV, MEM, OTHER = range(6)
#: ASTRA-sim's per-rank limits; 0 = unlimited
DEFAULT_LIMITS = {"host": 1, "compute": 1, "comm": 1, "recv": 0, "mem": 0, "other": 0}

_COMP, _COLL, _SEND, _RECV = (int(NodeType.COMP_NODE), int(NodeType.COMM_COLL_NODE),
                              int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE))
_MEMS = (int(NodeType.MEM_LOAD_NODE), int(NodeType.MEM_STORE_NODE))
_NLANES = len(LANES)
_UNLIMITED = 1 << 62
_ROOT = (-1, 0)
_BEGIN = -1  # heap entry: the rank begins issuing


def lane_of(info: NodeInfo) -> int:
    t = info.type
    if t == _COMP:
        return HOST if info.is_cpu_op else COMPUTE
    if t == _COLL or t == _SEND:
        return COMM
    if t == _RECV:
        return RECV
    if t in _MEMS:
        return MEM
    return OTHER


def parse_limits(text: str | None) -> dict[str, int]:
    """`"compute=2,comm=0"` over the defaults (0 = unlimited)."""
    limits = dict(DEFAULT_LIMITS)
    for part in filter(None, (text or "").split(",")):
        k, _, v = part.partition("=")
        if k.strip() not in limits:
            raise InputError(f"unknown lane {k!r} in --limits; lanes: {', '.join(LANES)}")
        limits[k.strip()] = int(v)
    return limits


#: collectives whose size legitimately differs per rank (alltoallv splits, a root's buffer)
_PER_RANK_SIZES = frozenset((int(CommType.ALL_TO_ALL), int(CommType.GATHER), int(CommType.SCATTER)))


@dataclass
class _Rank:
    """Per-rank state: its feeder, lane occupancy, deferred nodes, collective counters."""

    rank: int
    feeder: ETFeeder
    caps: list[int]
    busy: list[int] = field(default_factory=lambda: [0] * len(LANES))
    deferred: list[list[int]] = field(default_factory=lambda: [[] for _ in LANES])
    coll_seq: dict[str, int] = field(default_factory=dict)
    freed_by: dict[int, tuple[int, int]] = field(default_factory=dict)  # node -> (event, time) that freed it
    lane_freed_by: list[int] = field(default_factory=lambda: [-1] * len(LANES))
    live: dict[int, int] = field(default_factory=dict)  # node -> event index while in flight
    n_deferred: int = 0
    host_end_us: int = 0  # recorded end of the latest host op issued (for host_gaps)
    host_ns: Mapping[int, int] | None = None  # node -> host time re-timed (recorded.py)
    comm_end_ns: Mapping[int, int] = field(default_factory=dict)  # node -> recorded completion


class _Posted(NamedTuple):
    """A send or a receive issued and waiting for its other half."""

    issued_ns: int
    rank: int
    nid: int
    ev: int
    info: NodeInfo
    arrival_ns: int | None = None  # an eager send: when its data reaches the receiver


class Replayer:
    """Replay a rank set; `run()` returns a `ReplayResult`.

    `feeders` maps rank -> ETFeeder; `groups` maps pg_name -> global ranks (comm_group.json).
    `comm`: "model" costs communication with the backend; "measured" and "calibrated" take it
    from the trace's recorded times where it has them (calibrate.py), the backend elsewhere.
    `host_ns` (rank -> node -> ns: `recorded.RankTimeline.host_ns`) replaces the recorded
    duration of those host ops; `comm_end_ns` (rank -> node -> ns, `RankTimeline.comm_end_ns`)
    gives "calibrated" each communication's completion where the record's end is too late.
    """

    def __init__(self, feeders: Mapping[int, ETFeeder], backend: Backend, *,
                 groups: Mapping[str, Sequence[int]] | None = None,
                 limits: Mapping[str, int] | None = None, record_events: bool = True,
                 comm: str = "model", host_gaps: bool = False,
                 start_ns: Mapping[int, int] | None = None,
                 host_ns: Mapping[int, Mapping[int, int]] | None = None,
                 comm_end_ns: Mapping[int, Mapping[int, int]] | None = None):
        if comm not in COMM_MODES:
            raise InputError(f"unknown communication mode {comm!r}; use {', '.join(COMM_MODES)}")
        lim = {**DEFAULT_LIMITS, **(limits or {})}
        caps = [lim[name] or _UNLIMITED for name in LANES]
        self.ranks = {r: _Rank(r, f, list(caps), host_ns=(host_ns or {}).get(r),
                               comm_end_ns=(comm_end_ns or {}).get(r, {}))
                      for r, f in sorted(feeders.items())}
        self.backend = backend
        self.comm = comm
        self._recorded = RECORDED.get(comm)  # infos -> per-member ns from the record, or None
        self.host_gaps = host_gaps  # keep the untraced time between a rank's host ops
        self.start_ns = dict(start_ns or {})  # rank -> when it begins issuing (default 0)
        self.groups = {str(k): tuple(sorted(v)) for k, v in (groups or {}).items()}
        self.world = tuple(sorted(feeders))
        self.diagnostics = Diagnostics()
        self.result = ReplayResult(record_events=record_events)
        self._heap: list = []
        self._seq = 0
        self._now = 0
        self._rendezvous: dict[tuple, list] = {}
        self._sends: dict[tuple, list[_Posted]] = {}  # (src, dst, tag) -> unmatched sends
        self._recvs: dict[tuple, list[_Posted]] = {}  # (src, dst, tag) -> unmatched receives
        self._handlers: dict[int, Callable] = {
            _COMP: self.on_comp, _COLL: self.on_coll, _SEND: self.on_send, _RECV: self.on_recv,
            _MEMS[0]: self.on_mem, _MEMS[1]: self.on_mem,
        }

    # -- the kernel -----------------------------------------------------------------------------
    def _at(self, time_ns: int, rank: int, nid: int) -> None:
        """Schedule the finish of (rank, node) at `time_ns`."""
        self._seq += 1
        heapq.heappush(self._heap, (time_ns, self._seq, rank, nid))

    def run(self) -> ReplayResult:
        for r in self.ranks.values():
            if self.start_ns.get(r.rank, 0) > 0:
                self._at(self.start_ns[r.rank], r.rank, _BEGIN)
            else:
                self._issue(r)
        heap = self._heap
        while True:
            while heap:
                t, _, rank, nid = heapq.heappop(heap)
                self._now = t
                if nid == _BEGIN:
                    self._issue(self.ranks[rank])
                else:
                    self._finish(self.ranks[rank], nid, t)
            if not self._unstick():
                break
        self._check_done()
        self.result.finalize(self.world, self.backend.describe(), self.diagnostics, self.start_ns)
        return self.result

    def _unstick(self) -> bool:
        """The heap is empty: read past feeder windows until something is scheduled (True) or no
        feeder finds a new issuable node (False). Repeats, since what one rank issues (a receive,
        a collective) may wait for a node another rank finds only on its next expansion."""
        while True:
            moved = False
            for r in self.ranks.values():
                if not r.feeder.done and r.feeder.expand():
                    self._issue(r)
                    moved = True
            if self._heap:
                return True
            if not moved:
                return False

    # -- issue and finish -----------------------------------------------------------------------
    def _issue(self, r: _Rank) -> None:
        """Issue every issuable node whose lane has room, in ascending id across lanes."""
        feeder, deferred = r.feeder, r.deferred
        nid = feeder.next_issuable()
        if nid is not None and not r.n_deferred and not feeder.has_issuable():
            info = feeder.info(nid)  # the common case: one node freed, nothing waiting
            lane = lane_of(info)
            if r.busy[lane] < r.caps[lane]:
                r.busy[lane] += 1
                self._start(r, nid, lane, info)
                return
        while nid is not None:
            heapq.heappush(deferred[lane_of(feeder.info(nid))], nid)
            r.n_deferred += 1
            nid = feeder.next_issuable()
        caps, busy = r.caps, r.busy
        while r.n_deferred:
            best, best_id = -1, 0
            for lane in range(_NLANES):
                q = deferred[lane]
                if q and busy[lane] < caps[lane] and (best < 0 or q[0] < best_id):
                    best, best_id = lane, q[0]
            if best < 0:
                return
            heapq.heappop(deferred[best])
            r.n_deferred -= 1
            busy[best] += 1
            self._start(r, best_id, best)

    def _start(self, r: _Rank, nid: int, lane: int, info: NodeInfo | None = None) -> None:
        if info is None:
            info = r.feeder.info(nid)
        now = self._now
        pred, ready_at = r.freed_by.pop(nid, _ROOT)
        if now > ready_at and r.lane_freed_by[lane] >= 0:
            pred = r.lane_freed_by[lane]
        ev = self.result.add(r.rank, nid, info.name, info.type, lane, now, pred)
        r.live[nid] = ev
        self._handlers.get(info.type, self.on_meta)(r, nid, info, ev)

    def _finish(self, r: _Rank, nid: int, t: int) -> None:
        ev = r.live.pop(nid)
        self.result.end(ev, t)
        lane = self.result.ev_lane[ev]
        r.busy[lane] -= 1
        r.lane_freed_by[lane] = ev
        freed = r.freed_by
        for child in r.feeder.finish(nid):
            freed[child] = (ev, t)
        self._issue(r)

    # -- handlers, one per node kind -----------------------------------------------------------
    def on_comp(self, r: _Rank, nid: int, info: NodeInfo, ev: int) -> None:
        if r.host_ns is not None and info.is_cpu_op and nid in r.host_ns:
            ns = r.host_ns[nid]
            info = info._replace(duration_ns=ns, duration_micros=ns // 1000)
        ns = self.backend.compute_ns(r.rank, info)
        if self.host_gaps and info.is_cpu_op:
            ns += self._host_gap(r, info)
        self._at(self._now + ns, r.rank, nid)

    @staticmethod
    def _host_gap(r: _Rank, info: NodeInfo) -> int:
        """The recorded time between this host op and the end of the host ops before it (Python
        between operators, which no trace node covers; Lumos keeps it the same way), in ns."""
        start, prev = info.start_time_micros, r.host_end_us
        r.host_end_us = max(prev, start + info.duration_micros)
        return (start - prev) * 1000 if prev and start > prev else 0

    def on_mem(self, r: _Rank, nid: int, info: NodeInfo, ev: int) -> None:
        self._at(self.backend.memory_ns(r.rank, info, self._now), r.rank, nid)

    def on_meta(self, r: _Rank, nid: int, info: NodeInfo, ev: int) -> None:
        self._at(self._now, r.rank, nid)

    def on_coll(self, r: _Rank, nid: int, info: NodeInfo, ev: int) -> None:
        group = self._group(r, nid, info)
        pg = info.pg_name
        k = r.coll_seq.get(pg, 0)
        r.coll_seq[pg] = k + 1
        key = (pg, k)  # the group follows from pg; hashing it per rank would cost O(group)
        waiting = self._rendezvous.setdefault(key, [])
        waiting.append((r.rank, nid, info, ev))
        if len(waiting) == len(group):
            del self._rendezvous[key]
            self._start_collective(waiting, group)

    def _start_collective(self, members: list, group: tuple[int, ...]) -> None:
        first = members[0][2]
        size = max(m[2].comm_size for m in members)
        for rank, nid, info, _ in members[1:]:
            sizes_differ = info.comm_size != first.comm_size and first.comm_type not in _PER_RANK_SIZES
            if info.comm_type != first.comm_type or sizes_differ:
                self._warn("collective-mismatch", f"collective on pg {first.pg_name!r}: "
                           f"{_kind(info)} {info.comm_size} B here, {_kind(first)} {first.comm_size} B "
                           f"on rank {members[0][0]}: costed as the largest", rank, nid)
        ns = self._recorded_ns(members)
        if ns is None:
            model_ns = self.backend.collective_ns(first.comm_type or 0, size, group, first.involved_dim)
            ns = [model_ns] * len(members)
        last_ev = members[-1][3]
        for (rank, nid, _, ev), member_ns in zip(members, ns):
            if ev != last_ev:
                self.result.set_pred(ev, last_ev, cross=True)
            self._at(self._now + member_ns, rank, nid)
        self.result.collective(members, group, first, size, self._now, self._now + max(ns))

    def _recorded_ns(self, members: Sequence[tuple]) -> list[int] | None:
        """Per participant (rank, node, info, ...), its time from the record (as `comm` says),
        or None: use the model."""
        if not self._recorded:
            return None
        ends = [self.ranks[m[0]].comm_end_ns.get(m[1]) for m in members]
        return self._recorded([m[2] for m in members], ends)

    def _group(self, r: _Rank, nid: int, info: NodeInfo) -> tuple[int, ...]:
        pg = info.pg_name
        group = self.groups.get(pg)
        if group is None:
            if pg not in ("", "0") and self.groups:
                raise InputError(f"rank {r.rank}: node {nid} ({info.name!r}): pg_name {pg!r} is not "
                                 f"in the comm-group file (groups: {', '.join(sorted(self.groups))})")
            if pg not in ("", "0"):
                self._warn("unknown-pg", f"pg_name {pg!r} without a comm-group file: assumed to be "
                           "every rank", r.rank, nid)
                self.groups[pg] = self.world
            group = self.world
        if r.rank not in group:
            raise InputError(f"rank {r.rank}: node {nid} ({info.name!r}): rank is not a member of "
                             f"process group {pg!r} {list(group)}")
        return group

    def on_send(self, r: _Rank, nid: int, info: NodeInfo, ev: int) -> None:
        dst = self._peer(r, nid, info, info.comm_dst, "comm_dst")
        arrival = None  # a calibrated send with a recorded time: a rendezvous, finished in _meet
        if self.comm != "calibrated" or recorded_ns(info) is None:  # eager: finishes on its own
            ns = self._recorded_ns([(r.rank, nid, info)])
            arrival = self._now + (ns[0] if ns else self.backend.p2p_ns(r.rank, dst, info.comm_size))
            self._at(arrival, r.rank, nid)
        send = _Posted(self._now, r.rank, nid, ev, info, arrival)
        key = (r.rank, dst, info.comm_tag)
        posted = self._recvs.get(key)
        if posted:
            self._meet(send, posted.pop(0))
        else:
            self._sends.setdefault(key, []).append(send)

    def on_recv(self, r: _Rank, nid: int, info: NodeInfo, ev: int) -> None:
        src = self._peer(r, nid, info, info.comm_src, "comm_src")
        key = (src, r.rank, info.comm_tag)
        sent = self._sends.get(key)
        recv = _Posted(self._now, r.rank, nid, ev, info)
        if sent:
            self._meet(sent.pop(0), recv)
        else:
            self._recvs.setdefault(key, []).append(recv)

    def _meet(self, send: _Posted, recv: _Posted) -> None:
        """A send and its receive are both issued: finish the receive (and a rendezvous send)."""
        self.result.pair(send.ev, recv.ev)
        if send.arrival_ns is None:
            self._meet_rendezvous(send, recv)
            return
        if send.arrival_ns > recv.issued_ns:
            self.result.set_pred(recv.ev, send.ev, cross=False)
        self._at(max(send.arrival_ns, recv.issued_ns, self._now), recv.rank, recv.nid)

    def _meet_rendezvous(self, send: _Posted, recv: _Posted) -> None:
        """Calibrated send/receive: the later half arrives now, each takes its recorded share."""
        send_ns, recv_ns = self._recorded_ns([(p.rank, p.nid, p.info) for p in (send, recv)])
        early, late = (send, recv) if send.issued_ns <= recv.issued_ns else (recv, send)
        if early.issued_ns < late.issued_ns:
            self.result.set_pred(early.ev, late.ev, cross=False)
        self._at(self._now + send_ns, send.rank, send.nid)
        self._at(self._now + recv_ns, recv.rank, recv.nid)

    def _peer(self, r: _Rank, nid: int, info: NodeInfo, peer: int | None, attr: str) -> int:
        if peer is None:
            raise InputError(f"rank {r.rank}: node {nid} ({info.name!r}): point-to-point node "
                             f"without {attr}; the replayer cannot pair it")
        if peer not in self.ranks:
            raise InputError(f"rank {r.rank}: node {nid} ({info.name!r}): {attr}={peer} is not a "
                             f"rank of this set ({min(self.ranks)}..{max(self.ranks)})")
        return peer

    # -- the end --------------------------------------------------------------------------------
    def _check_done(self) -> None:
        stuck = [r for r in self.ranks.values() if not r.feeder.done]
        if not stuck:
            return
        lines = [self._blocked_text(r) for r in stuck]
        raise DeadlockError("deadlock: " + " | ".join(lines))

    def _blocked_text(self, r: _Rank) -> str:
        waits = []
        for (pg, k), members in sorted(self._rendezvous.items(), key=lambda kv: str(kv[0])):
            mine = [m for m in members if m[0] == r.rank]
            group = self.groups.get(pg, self.world)
            if mine:
                missing = sorted(set(group) - {m[0] for m in members})
                waits.append(f"%{mine[0][1]} {mine[0][2].name!r} (collective #{k} of pg {pg!r}) "
                             f"waits for ranks {missing}")
        for (src, dst, tag), posts in sorted(self._recvs.items()):
            for p in posts:
                if p.rank == r.rank:
                    waits.append(f"%{p.nid} recv waits for a send from rank {src} tag {tag}")
        for (src, dst, tag), posts in sorted(self._sends.items()):
            for p in posts:
                if p.rank == r.rank and p.arrival_ns is None:
                    waits.append(f"%{p.nid} send waits for a recv on rank {dst} tag {tag}")
        for nid, deps in r.feeder.blocked(limit=3):
            waits.append(f"%{nid} waits for " + ", ".join(f"%{d}" for d in deps))
        return f"rank {r.rank}: " + "; ".join(waits[:6]) + (" ..." if len(waits) > 6 else "")

    def _warn(self, code: str, message: str, rank: int, nid: int) -> None:
        self.diagnostics.add(Diagnostic("warning", code, message, rank=rank, node_id=nid))


def _kind(info: NodeInfo) -> str:
    try:
        return CommType(info.comm_type).name
    except (TypeError, ValueError):
        return str(info.comm_type)


# --------------------------------------------------------------------------------------------
# convenience
# --------------------------------------------------------------------------------------------

#: per-rank feeder window of a replay: every rank holds one, and a stalled replay reads further
REPLAY_WINDOW = 8192


def open_rankset(path: str | Path, comm_group: str | Path | None = None, *,
                 resolve: Sequence[str] = ("data", "ctrl"),
                 window: int = REPLAY_WINDOW) -> tuple[dict[int, ETFeeder], dict[str, tuple[int, ...]]]:
    """One feeder per rank file of a rank set, and its comm groups (file beside the traces if any)."""
    files = find_rank_files(path)
    feeders = {r: ETFeeder(f, resolve=resolve, window=window, rank=r, eager_info=True)
               for r, f in files.items()}
    if comm_group is None:
        beside = next(iter(files.values())).parent / "comm_group.json"
        comm_group = beside if beside.exists() else None
    groups = dict(read_comm_groups(comm_group)) if comm_group else {}
    return feeders, groups


def recorded_starts(feeders: Mapping[int, ETFeeder]) -> dict[int, int]:
    """Each rank's offset (ns) from the earliest rank, by the first recorded start time in its
    window: a capture's ranks begin their traced steps at different instants, and replaying them
    from those instants reproduces the skew they had (one clock for all ranks assumed, as on one
    host)."""
    first = {}
    for r, f in feeders.items():
        times = [f.info(n).start_time_micros for n in f.loaded_ids()]
        times = [t for t in times if t > 0]
        if times:
            first[r] = min(times)
    if not first:
        return {}
    base = min(first.values())
    return {r: (t - base) * 1000 for r, t in first.items()}


@dataclass(frozen=True)
class CaptureModes:
    """How much of a capture's own record a replay uses (all off: a what-if on the model).

    `comm`: "model" (the network model), "measured" or "calibrated" (calibrate.py);
    `host_time`: "ops" (each host op its duration) or "timeline" (re-timed, recorded.py);
    `align`: "start" (every rank at 0) or "recorded" (the capture's skew between ranks).
    `AS_CAPTURED` replays a capture on the system it ran on (docs/replay.md §4).
    """

    comm: str = "model"
    host_time: str = "ops"
    align: str = "start"

    def check(self) -> "CaptureModes":
        for value, name, choices in ((self.comm, "--comm", COMM_MODES),
                                     (self.host_time, "--host-time", ("ops", "timeline")),
                                     (self.align, "--align", ("start", "recorded"))):
            if value not in choices:
                raise InputError(f"{name} {value!r}: use " + " or ".join(choices))
        return self


AS_CAPTURED = CaptureModes(comm="calibrated", host_time="timeline", align="recorded")


def run_replay(path: str | Path, feeders: Mapping[int, ETFeeder], backend: Backend, *,
               groups: Mapping[str, Sequence[int]] | None = None, modes: CaptureModes = CaptureModes(),
               **replayer_kw) -> ReplayResult:
    """Replay the opened rank set at `path` under `modes` (the rank files are read once more
    for the recorded timeline when a mode needs it); other keywords go to `Replayer`."""
    from .recorded import read_rankset

    modes.check()
    timelines = read_rankset(path) if modes.host_time == "timeline" or modes.comm == "calibrated" else {}
    return Replayer(
        feeders, backend, groups=groups, comm=modes.comm,
        start_ns=recorded_starts(feeders) if modes.align == "recorded" else None,
        host_ns={r: t.host_ns for r, t in timelines.items()} if modes.host_time == "timeline" else None,
        comm_end_ns={r: t.comm_end_ns for r, t in timelines.items()}, **replayer_kw).run()


def replay(path: str | Path, backend: Backend, *, comm_group: str | Path | None = None,
           limits: Mapping[str, int] | None = None, record_events: bool = True,
           resolve: Sequence[str] = ("data", "ctrl"), window: int = REPLAY_WINDOW,
           modes: CaptureModes = CaptureModes()) -> ReplayResult:
    """Replay the rank set at `path` (folder, prefix or file) with `backend`; `modes=AS_CAPTURED`
    to reproduce a capture's measured step (see `CaptureModes`)."""
    feeders, groups = open_rankset(path, comm_group, resolve=resolve, window=window)
    return run_replay(path, feeders, backend, groups=groups, modes=modes, limits=limits,
                      record_events=record_events)
