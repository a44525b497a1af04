"""The replayer: a deterministic discrete-event engine over every rank at once.

One `ETFeeder` per rank hands out issuable nodes; the engine issues them in ascending id onto
per-rank *resources* with a capacity each (`Resources`: by default ASTRA-sim's one host op, one
GPU compute op, one GPU comm op in flight, receives exempt, memory and metadata nodes unlimited;
or, for a capture, one host lane per thread and one device lane per stream), dispatches each node
to the handler of its kind (`on_comp`, `on_coll`, `on_send`, `on_recv`, `on_mem`, `on_meta`), and
asks a timing policy (timing.py: the backend's model, or a capture's record) how long things take.

- The k-th collective a rank issues in a group meets the k-th of every other member (ASTRA-sim's
  rule; ranks that disagree are reported). When the last member has issued it, the timing policy
  says when each member finishes: with `Staggered` (the default on a model), a rank that arrived
  early may leave early, as in ASTRA-sim; with `Modelled` or a capture's record, from the last
  arrival on.
- Sends are eager: the data leaves at issue and arrives `p2p_ns` later, when the send finishes; a
  receive finishes at max(its issue, the arrival). They pair on (src, dst, tag) in issue order.
  A policy may make a send a rendezvous instead (a capture's gloo or NCCL send): both halves
  wait for each other, then each takes its time.
- The kernel is a heap of `(time_ns, seq, event)` with integer nanoseconds, so equal times resolve
  in insertion order and the same input always gives the same timeline, byte for byte.

When the heap runs dry with nodes left, feeders are asked to read past their window (the node that
would unblock another rank may lie beyond it); if that does not help, `DeadlockError` names what
every rank is blocked on.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Mapping, NamedTuple, Sequence

from chakra_tools.core.errors import Diagnostic, Diagnostics, InputError
from chakra_tools.core.model import CommType, NodeType
from chakra_tools.feed.feeder import DeadlockError, ETFeeder
from chakra_tools.feed.info import NodeInfo
from chakra_tools.feed.protocol import Backend

from .resources import RankState, Resources, lane_of
from .result import ReplayResult
from .timing import Modelled, Staggered

_COMP, _COLL, _SEND, _RECV = (int(NodeType.COMP_NODE), int(NodeType.COMM_COLL_NODE),
                              int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE))
_MEMS = (int(NodeType.MEM_LOAD_NODE), int(NodeType.MEM_STORE_NODE))
_ROOT = (-1, 0)
_BEGIN = -1  # heap entry: the rank begins issuing
_CALL = -2  # heap entry: a timing policy's callback (the callable in place of the rank)

_COMM_TYPES = frozenset(int(t) for t in CommType)
_IN_FLIGHT = -1  # _Posted.arrival_ns of an asynchronous send whose data has not arrived yet
#: a replay's clock is int64 nanoseconds (292 years); durations that add up past it are bad input
_MAX_NS = (1 << 63) - 1

#: collectives whose size legitimately differs per rank (alltoallv splits, a root's buffer)
_PER_RANK_SIZES = frozenset((int(CommType.ALL_TO_ALL), int(CommType.GATHER), int(CommType.SCATTER)))


class _Posted(NamedTuple):
    """A send or a receive issued and waiting for its other half (a timing policy's member)."""

    rank: int
    nid: int
    info: NodeInfo
    issued_ns: int
    ev: int
    arrival_ns: int | None = None  # an eager send: when its data reaches the receiver


class Replayer:
    """Replay a rank set; `run()` returns a `ReplayResult`.

    `feeders` maps rank -> ETFeeder; `timing` is a timing policy (timing.py: `Modelled`,
    `Staggered`, `Captured`) or a plain backend (feed.Backend), which means `Staggered(backend)`;
    `groups` maps pg_name -> global ranks (comm_group.json); `resources` says what each rank runs
    nodes on. `absent_peers`: a group's ranks that are not in the set (one rank file of a
    multi-rank job) are taken to arrive with the last member present, and a send or receive to
    one completes in its modelled or recorded time; otherwise the replay waits for them and ends
    in a `DeadlockError` that names them. Either way the network model costs the whole group.
    """

    def __init__(self, feeders: Mapping[int, ETFeeder], timing: Modelled | Backend, *,
                 groups: Mapping[str, Sequence[int]] | None = None,
                 resources: Resources | None = None, record_events: bool = True,
                 absent_peers: bool = False):
        self.timing = timing if isinstance(timing, Modelled) else Staggered(timing)
        res = resources or Resources()
        caps = res.caps()
        self.ranks = {r: RankState(r, f, caps, split=res.per == "stream", memory_on_comm=res.memory_on_comm)
                      for r, f in sorted(feeders.items())}
        # members in the file's order: ASTRA-sim's ring over a communicator group follows it
        self.groups = {str(k): tuple(v) for k, v in (groups or {}).items()}
        self._group_file = bool(self.groups)  # without one, each unknown pg_name is every rank
        self._assumed_world: list[tuple[str, int, int]] = []  # (pg_name, rank, node) first seen
        self.world = tuple(sorted(feeders))
        self.absent_peers = absent_peers
        self._present: dict[str, int] = {}  # pg_name -> how many of its ranks are in the set
        self.diagnostics = Diagnostics()
        self.result = ReplayResult(record_events=record_events)
        self._heap: list = []
        self._count = itertools.count(1)  # each heap entry's sequence number: ties in insertion order
        self._now = 0
        self._rendezvous: dict[tuple, list] = {}
        self._sends: dict[tuple, list[_Posted]] = {}  # (src, dst, tag) -> unmatched sends
        self._recvs: dict[tuple, list[_Posted]] = {}  # (src, dst, tag) -> unmatched receives
        #: a policy that runs communication as events of this loop (congestion.CongestionAware):
        #: members join a collective as they arrive, messages report their own arrival
        self._async = bool(getattr(self.timing, "asynchronous", False))
        self._async_sends = self._async and bool(getattr(self.timing, "asynchronous_sends", True))
        if self._async:
            self.timing.bind(self.call_at)
            # a compiled policy pushes its events itself: the same entries call_at pushes
            getattr(self.timing, "bind_heap", lambda *a: None)(self._heap, self._count, _CALL)
        # an asynchronous collective, (pg, k) -> its members once all joined (members, group, size,
        # start), and the ends of the members done so far (which may come before all have joined)
        self._joined: dict[tuple, tuple[list, tuple[int, ...], int, int]] = {}
        self._ended: dict[tuple, list[int]] = {}
        self._landed: dict[tuple[int, int], int] = {}  # (rank, send id) -> its data's arrival (async)
        # (rank, send id) -> the send and the receive posted before its data arrived (async)
        self._waiting: dict[tuple[int, int], tuple[_Posted, _Posted]] = {}
        self._handlers: dict[int, Callable] = {
            _COMP: self.on_comp, _COLL: self.on_coll, _SEND: self.on_send, _RECV: self.on_recv,
            _MEMS[0]: self.on_mem, _MEMS[1]: self.on_mem,
        }

    # -- the kernel -----------------------------------------------------------------------------
    def _at(self, time_ns: int, rank: int, nid: int) -> None:
        """Schedule the finish of (rank, node) at `time_ns`."""
        if time_ns > _MAX_NS:
            r = self.ranks[rank]
            raise InputError(f"{r.feeder.path}: rank {rank}: node {nid}: finishes at {time_ns} ns, past "
                             "the replay's 64-bit clock (292 years): a duration or size out of range")
        heapq.heappush(self._heap, (time_ns, next(self._count), rank, nid))

    def call_at(self, time_ns: int, fn: Callable[[int], None]) -> None:
        """Call `fn(time_ns)` at `time_ns`, in order with every other event (a timing policy's
        network events: a message reaching the next device, a collective's next step)."""
        heapq.heappush(self._heap, (time_ns, next(self._count), fn, _CALL))  # (time, seq) is unique

    def run(self) -> ReplayResult:
        begins = {r: self.timing.begin_ns(r) for r in self.ranks}
        for r in self.ranks.values():
            if begins[r.rank] > 0:
                self._at(begins[r.rank], r.rank, _BEGIN)
            else:
                self._issue(r)
        heap = self._heap
        while True:
            while heap:
                t, _, rank, nid = heapq.heappop(heap)
                self._now = t
                if nid < 0:
                    if nid == _BEGIN:
                        self._issue(self.ranks[rank])
                    else:
                        rank(t)  # a policy's callback (call_at)
                else:
                    self._finish(self.ranks[rank], nid, t)
            if not self._unstick():
                break
        self._check_done()
        for code, note in getattr(self.timing, "run_notes", list)():
            self.diagnostics.add(Diagnostic("warning", code, note))
        if self._assumed_world:
            pg, rank, nid = self._assumed_world[0]
            names = ", ".join(repr(p) for p, _, _ in self._assumed_world)
            self._warn("unknown-pg", f"no comm-group file: pg_name {names} taken as every rank", rank, nid)
        self.result.finalize(self.world, self.timing.describe(), self.diagnostics,
                             {r: ns for r, ns in begins.items() if ns})
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
    def _issue(self, r: RankState) -> None:
        """Issue every issuable node whose resource has room, in ascending id across resources."""
        feeder, deferred = r.feeder, r.deferred
        nid = feeder.next_issuable()
        if nid is not None and not r.n_deferred and not feeder.has_issuable():
            info = feeder.info(nid)  # the common case: one node freed, nothing waiting
            if info.type == _COLL:
                _sequence(r, nid, info)
            res = r.resource(info)
            if r.busy[res] < r.caps[res]:
                r.busy[res] += 1
                self._start(r, nid, res, info)
                return
            heapq.heappush(deferred[res], nid)
            r.n_deferred += 1
            nid = feeder.next_issuable()
        while nid is not None:
            info = feeder.info(nid)
            if info.type == _COLL:
                _sequence(r, nid, info)
            heapq.heappush(deferred[r.resource(info)], nid)
            r.n_deferred += 1
            nid = feeder.next_issuable()
        caps, busy = r.caps, r.busy
        while r.n_deferred:
            best, best_id = -1, 0
            for res in range(len(busy)):
                q = deferred[res]
                if q and busy[res] < caps[res] and (best < 0 or q[0] < best_id):
                    best, best_id = res, q[0]
            if best < 0:
                return
            heapq.heappop(deferred[best])
            r.n_deferred -= 1
            busy[best] += 1
            self._start(r, best_id, best)

    def _start(self, r: RankState, nid: int, res: int, info: NodeInfo | None = None) -> None:
        if info is None:
            info = r.feeder.info(nid)
        now = self._now
        pred, ready_at = r.freed_by.pop(nid, _ROOT)
        if now > ready_at and r.lane_freed_by[res] >= 0:
            pred = r.lane_freed_by[res]
        ev = self.result.add(r.rank, nid, info.name, info.type, lane_of(info), now, pred)
        r.live[nid] = (ev, res)
        self._handlers.get(info.type, self.on_meta)(r, nid, info, ev)

    def _finish(self, r: RankState, nid: int, t: int) -> None:
        ev, res = r.live.pop(nid)
        self.result.end(ev, t)
        r.busy[res] -= 1
        r.lane_freed_by[res] = ev
        freed = r.freed_by
        for child in r.feeder.finish(nid):
            freed[child] = (ev, t)
        self._issue(r)

    # -- handlers, one per node kind -----------------------------------------------------------
    def on_comp(self, r: RankState, nid: int, info: NodeInfo, ev: int) -> None:
        self._at(self._now + self.timing.compute_ns(r.rank, nid, info), r.rank, nid)

    def on_mem(self, r: RankState, nid: int, info: NodeInfo, ev: int) -> None:
        self._at(self.timing.memory_finish_ns(r.rank, info, self._now), r.rank, nid)

    def on_meta(self, r: RankState, nid: int, info: NodeInfo, ev: int) -> None:
        self._at(self._now, r.rank, nid)

    def on_coll(self, r: RankState, nid: int, info: NodeInfo, ev: int) -> None:
        if info.comm_type not in _COMM_TYPES:
            raise InputError(f"{r.feeder.path}: rank {r.rank}: node {nid} ({info.name!r}): comm_type "
                             f"{info.comm_type} is no collective kind (0..{max(_COMM_TYPES)})")
        group = self._group(r, nid, info)
        pg = info.pg_name
        k = r.seq_of.pop(nid)
        key = (pg, k)  # the group follows from pg; hashing it per rank would cost O(group)
        waiting = self._rendezvous.setdefault(key, [])
        waiting.append((r.rank, nid, info, ev, self._now))
        if self._async:
            self.timing.join_collective(key, group, r.rank, info, self._now,
                                        lambda t, rank=r.rank, nid=nid: self._member_done(key, rank, nid, t))
        if len(waiting) == (self._present_in(pg, group) if self.absent_peers else len(group)):
            del self._rendezvous[key]
            if self._async:
                self._all_joined(key, waiting, group)
            else:
                self._start_collective(waiting, group)

    def _all_joined(self, key: tuple, members: list, group: tuple[int, ...]) -> None:
        """Every member of an asynchronous collective has joined: absent ones join now."""
        size = self._check_sizes(members, "as each member's own")
        last_ev = members[-1][3]
        for m in members[:-1]:
            self.result.set_pred(m[3], last_ev, cross=True)
        self._joined[key] = (members, group, size, self._now)
        for g in group:
            if g not in self.ranks:
                self.timing.join_collective(key, group, g, members[0][2], self._now, lambda t: None)
        self._record_if_done(key)

    def _member_done(self, key: tuple, rank: int, nid: int, t: int) -> None:
        self._at(t, rank, nid)
        self._ended.setdefault(key, []).append(t)
        self._record_if_done(key)

    def _record_if_done(self, key: tuple) -> None:
        joined, ends = self._joined.get(key), self._ended.get(key, ())
        if joined is not None and len(ends) == len(joined[0]):
            members, group, size, start = self._joined.pop(key)
            del self._ended[key]
            self.result.collective(members, group, members[0][2], size, start, max(ends))

    def _check_sizes(self, members: list, costed: str) -> int:
        """Warn of members whose collective differs from the first's; the largest size."""
        first = members[0][2]
        for rank, nid, info, *_ in members[1:]:
            sizes_differ = info.comm_size != first.comm_size and first.comm_type not in _PER_RANK_SIZES
            if info.comm_type != first.comm_type or sizes_differ:
                self._warn("collective-mismatch", f"collective on pg {first.pg_name!r}: "
                           f"{_kind(info)} {info.comm_size} B here, {_kind(first)} {first.comm_size} B "
                           f"on rank {members[0][0]}: costed {costed}", rank, nid)
        return max(m[2].comm_size for m in members)

    def _start_collective(self, members: list, group: tuple[int, ...]) -> None:
        first = members[0][2]
        size = self._check_sizes(members, "as the largest")
        ns = self.timing.collective_ns(members, group, size)
        last_ev = members[-1][3]
        for (rank, nid, _, ev, _), member_ns in zip(members, ns):
            if ev != last_ev:
                self.result.set_pred(ev, last_ev, cross=True)
            self._at(self._now + member_ns, rank, nid)
        self.result.collective(members, group, first, size, self._now, self._now + max(ns))

    def _present_in(self, pg: str, group: tuple[int, ...]) -> int:
        n = self._present.get(pg)
        if n is None:
            n = self._present[pg] = sum(1 for g in group if g in self.ranks)
        return n

    def _group(self, r: RankState, nid: int, info: NodeInfo) -> tuple[int, ...]:
        pg = info.pg_name
        group = self.groups.get(pg)
        if group is None:
            if pg not in ("", "0") and self._group_file:
                raise InputError(f"{r.feeder.path}: rank {r.rank}: node {nid} ({info.name!r}): pg_name {pg!r} is not "
                                 f"in the comm-group file (groups: {', '.join(sorted(self.groups))})")
            if pg not in ("", "0"):  # no file: every group is every rank, said once at the end
                self._assumed_world.append((pg, r.rank, nid))
                self.groups[pg] = self.world
            group = self.world
        if r.rank not in group:
            raise InputError(f"{r.feeder.path}: rank {r.rank}: node {nid} ({info.name!r}): rank is not a member of "
                             f"process group {pg!r} {list(group)}")
        return group

    def on_send(self, r: RankState, nid: int, info: NodeInfo, ev: int) -> None:
        dst = self._peer(r, nid, info, info.comm_dst, "comm_dst")
        if self._async_sends:  # the message reports its arrival; until then the send is in flight
            self.timing.start_send(r.rank, dst, info.comm_size, self._now,
                                   lambda t, rank=r.rank, nid=nid: self._landed_at(rank, nid, t))
            arrival = _IN_FLIGHT
        else:
            ns = self.timing.eager_send_ns(r.rank, nid, info, dst, self._now)
            arrival = None if ns is None else self._now + ns  # None: a rendezvous, finished in _meet
            if arrival is not None:
                self._at(arrival, r.rank, nid)
        send = _Posted(r.rank, nid, info, self._now, ev, arrival)
        if dst not in self.ranks:  # an absent peer (absent_peers): its receive was posted now
            if arrival is None:
                self._at(self._now + self.timing.rendezvous_ns(send, _Posted(dst, nid, info, self._now, ev))[0],
                         r.rank, nid)
            return
        key = (r.rank, dst, info.comm_tag)
        posted = self._recvs.get(key)
        if posted:
            self._meet(send, posted.pop(0))
        else:
            self._sends.setdefault(key, []).append(send)

    def on_recv(self, r: RankState, nid: int, info: NodeInfo, ev: int) -> None:
        src = self._peer(r, nid, info, info.comm_src, "comm_src")
        key = (src, r.rank, info.comm_tag)
        sent = self._sends.get(key)
        recv = _Posted(r.rank, nid, info, self._now, ev)
        if src not in self.ranks:  # an absent peer (absent_peers): it sent when this was posted
            self._at(self._now + self.timing.rendezvous_ns(_Posted(src, nid, info, self._now, ev), recv)[1],
                     r.rank, nid)
            return
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
        arrival = send.arrival_ns
        if arrival == _IN_FLIGHT:
            arrival = self._landed.pop((send.rank, send.nid), None)
            if arrival is None:
                self._waiting[(send.rank, send.nid)] = (send, recv)
                return
        self._deliver(send, recv, arrival)

    def _deliver(self, send: _Posted, recv: _Posted, arrival: int) -> None:
        """The receive completes at the later of its posting and the data's arrival."""
        if arrival > recv.issued_ns:
            self.result.set_pred(recv.ev, send.ev, cross=False)
        self._at(max(arrival, recv.issued_ns, self._now), recv.rank, recv.nid)

    def _landed_at(self, rank: int, nid: int, t: int) -> None:
        """An asynchronous send's data arrived at `t`: the send is done, and so is the receive
        that was waiting for it (or the arrival is kept until its receive is posted)."""
        self._at(t, rank, nid)
        pair = self._waiting.pop((rank, nid), None)
        if pair is None:
            self._landed[(rank, nid)] = t
        else:
            self._deliver(*pair, t)

    def _meet_rendezvous(self, send: _Posted, recv: _Posted) -> None:
        """A rendezvous send/receive: the later half arrives now, then each takes its time."""
        send_ns, recv_ns = self.timing.rendezvous_ns(send, recv)
        early, late = (send, recv) if send.issued_ns <= recv.issued_ns else (recv, send)
        if early.issued_ns < late.issued_ns:
            self.result.set_pred(early.ev, late.ev, cross=False)
        self._at(self._now + send_ns, send.rank, send.nid)
        self._at(self._now + recv_ns, recv.rank, recv.nid)

    def _peer(self, r: RankState, nid: int, info: NodeInfo, peer: int | None, attr: str) -> int:
        if peer is None:
            raise InputError(f"{r.feeder.path}: rank {r.rank}: node {nid} ({info.name!r}): point-to-point node "
                             f"without {attr}; the replayer cannot pair it")
        if peer not in self.ranks and not self.absent_peers:
            raise InputError(f"{r.feeder.path}: rank {r.rank}: node {nid} ({info.name!r}): {attr}={peer} is not a "
                             f"rank of this set ({min(self.ranks)}..{max(self.ranks)}); --absent-peers assume "
                             "replays it as if that peer had been there")
        return peer

    # -- the end --------------------------------------------------------------------------------
    def _check_done(self) -> None:
        stuck = [r for r in self.ranks.values() if not r.feeder.done]
        if not stuck:
            return
        lines = [self._blocked_text(r) for r in stuck]
        absent = sorted({g for pg, _ in self._rendezvous for g in self.groups.get(pg, ()) if g not in self.ranks}
                        | {p for key in (*self._recvs, *self._sends) for p in key[:2] if p not in self.ranks})
        hint = (f" (ranks {absent[:8]}{' ...' if len(absent) > 8 else ''} are not in this set: "
                "--absent-peers assume replays it as if they arrived with the ranks given)") if absent else ""
        raise DeadlockError(f"{stuck[0].feeder.path}: deadlock: " + " | ".join(lines) + hint)

    def _blocked_text(self, r: RankState) -> str:
        waits = []
        for (pg, k), members in sorted(self._rendezvous.items(), key=lambda kv: str(kv[0])):
            mine = [m for m in members if m[0] == r.rank]
            group = self.groups.get(pg, self.world)
            if mine:
                missing = sorted(set(group) - {m[0] for m in members})
                waits.append(f"%{mine[0][1]} {mine[0][2].name!r} (collective #{k} of pg {pg!r}) "
                             f"waits for ranks {missing}")
        for (src, dst, tag), posts in sorted(self._recvs.items(), key=str):
            for p in posts:
                if p.rank == r.rank:
                    waits.append(f"%{p.nid} recv waits for a send from rank {src} tag {tag}")
        for (src, dst, tag), posts in sorted(self._sends.items(), key=str):
            for p in posts:
                if p.rank == r.rank and p.arrival_ns is None:
                    waits.append(f"%{p.nid} send waits for a recv on rank {dst} tag {tag}")
        for nid, deps in r.feeder.blocked(limit=3):
            waits.append(f"%{nid} waits for " + ", ".join(f"%{d}" for d in deps))
        return f"rank {r.rank}: " + "; ".join(waits[:6]) + (" ..." if len(waits) > 6 else "")

    def _warn(self, code: str, message: str, rank: int, nid: int) -> None:
        self.diagnostics.add(Diagnostic("warning", code, message, rank=rank, node_id=nid))


def _sequence(r: RankState, nid: int, info: NodeInfo) -> None:
    pg = info.pg_name
    k = r.coll_seq.get(pg, 0)
    r.coll_seq[pg] = k + 1
    r.seq_of[nid] = k


def _kind(info: NodeInfo) -> str:
    try:
        return CommType(info.comm_type).name
    except (TypeError, ValueError):
        return str(info.comm_type)

