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
- Sends and receives pair on (src, dst, tag) in issue order (messages.py).
- The kernel is a heap of `(time_ns, seq, event)` with integer nanoseconds, so equal times resolve
  in insertion order and the same input always gives the same timeline, byte for byte. It runs
  in C (`_kernel.c`) where it can, event for event as here.

When the heap runs dry with nodes left, feeders are asked to read past their window (the node that
would unblock another rank may lie beyond it); if that does not help, `DeadlockError` names what
every rank is blocked on.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Mapping, Sequence

from chakra_tools.core import native
from chakra_tools.core.collector import gc_relaxed
from chakra_tools.core.errors import Diagnostic, Diagnostics, InputError
from chakra_tools.core.model import NodeType
from chakra_tools.feed.feeder import ETFeeder
from chakra_tools.feed.info import NodeInfo
from chakra_tools.feed.protocol import Backend

from .communicators import COMM_TYPES, Communicators, mismatches
from .deadlock import deadlock
from .messages import Messages
from .resources import LANE_TABLE, SLOT_TABLE, RankState, Resources, lane_of
from .result import ReplayResult
from .timing import Modelled, Staggered

#: the event loop in C (`_kernel.c`), None where it is not built: `Replayer(kernel=...)`
COMPILED = native.load("chakra_tools.replay._kernel")
#: `Replayer(kernel=...)`: the compiled loop where it runs the replay (auto), or the Python one,
#: the reference it is tested against
KERNELS = ("auto", "compiled", "python")

_COMP, _COLL, _SEND, _RECV = (int(NodeType.COMP_NODE), int(NodeType.COMM_COLL_NODE),
                              int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE))
_MEMS = (int(NodeType.MEM_LOAD_NODE), int(NodeType.MEM_STORE_NODE))
_ROOT = (-1, 0)
_BEGIN = -1  # heap entry: the rank begins issuing
_CALL = -2  # heap entry: a timing policy's callback (the callable in place of the rank)

#: a replay's clock is int64 nanoseconds (292 years); durations that add up past it are bad input
_MAX_NS = (1 << 63) - 1



class Replayer:
    """Replay a rank set; `run()` returns a `ReplayResult`.

    `feeders` maps rank -> ETFeeder; `timing` is a timing policy (timing.py: `Modelled`,
    `Staggered`, `Captured`) or a plain backend (feed.Backend), which means `Staggered(backend)`;
    `groups` maps pg_name -> global ranks (comm_group.json); `resources` says what each rank runs
    nodes on. `absent_peers`: a group's ranks that are not in the set (one rank file of a
    multi-rank job) are taken to arrive with the last member present, and a send or receive to
    one completes in its modelled or recorded time; otherwise the replay waits for them and ends
    in a `DeadlockError` that names them. Either way the network model costs the whole group.
    `kernel`: "auto" runs the loop compiled (`_kernel.c`) where it applies (a policy that is no
    event loop of its own, one lane of each kind, no absent peers) and is built; "compiled"
    insists (an error says why not); "python" runs this module's loop, the reference.
    """

    def __init__(self, feeders: Mapping[int, ETFeeder], timing: Modelled | Backend, *,
                 groups: Mapping[str, Sequence[int]] | None = None,
                 resources: Resources | None = None, record_events: bool = True,
                 absent_peers: bool = False, kernel: str = "auto"):
        self.timing = timing if isinstance(timing, Modelled) else Staggered(timing)
        res = resources or Resources()
        caps = res.caps()
        self.ranks = {r: RankState(r, f, caps, split=res.per == "stream", memory_on_comm=res.memory_on_comm,
                                   by_group=res.calls == "group")
                      for r, f in sorted(feeders.items())}
        self.world = tuple(sorted(feeders))
        self.comms = Communicators(groups or {}, self.world, self.ranks)
        self.groups = self.comms.members
        self.absent_peers = absent_peers
        self.diagnostics = Diagnostics()
        self.result = ReplayResult(record_events=record_events)
        self._heap: list = []
        self._count = itertools.count(1)  # each heap entry's sequence number: ties in insertion order
        self._now = 0
        self._rendezvous: dict[tuple, list] = {}
        #: a policy whose communication runs as events of this loop (congestion-aware)
        self._async = bool(getattr(self.timing, "asynchronous", False))
        self.messages = Messages(self, self._async)
        self.on_send, self.on_recv = self.messages.on_send, self.messages.on_recv
        if self._async:
            self.timing.bind(self.call_at)
            # a compiled policy pushes its events itself: the same entries call_at pushes
            getattr(self.timing, "bind_heap", lambda *a: None)(self._heap, self._count, _CALL)
        # an asynchronous collective (pg, k): its members, group, size and start once all joined,
        # and the ends of its members done so far (which may come before all have joined)
        self._joined: dict[tuple, tuple[list, tuple[int, ...], int, int]] = {}
        self._ended: dict[tuple, list[int]] = {}
        self._kernel = self._compiled_kernel(kernel, res)
        self._handlers: dict[int, Callable] = {
            _COMP: self.on_comp, _COLL: self.on_coll, _SEND: self.on_send, _RECV: self.on_recv,
            _MEMS[0]: self.on_mem, _MEMS[1]: self.on_mem,
        }

    # -- the kernel -----------------------------------------------------------------------------
    def _compiled_kernel(self, kernel: str, res: Resources):
        """The compiled loop for this replay (`_kernel.Kernel`), or None for the Python one."""
        if kernel not in KERNELS:
            raise InputError(f"kernel {kernel!r}: use " + ", ".join(KERNELS))
        why = ("it is not built (no C compiler when installed)" if COMPILED is None else
               "lanes are split per thread and stream" if res.per != "kind" else
               "communication lanes are per process group" if res.calls != "rank" else
               "absent peers are assumed" if self.absent_peers else
               f"{type(self).__name__} changes the loop" if type(self) is not Replayer else None)
        if kernel == "python" or (why and kernel == "auto"):
            return None
        if why:
            raise InputError(f"the compiled replay kernel does not run this replay: {why}")
        slots = SLOT_TABLE if res.memory_on_comm else LANE_TABLE
        # a policy that runs its own events pushes them onto this loop's heap: the compiled loop
        # keeps its own there too (slower than its own heap, so only then)
        shared = (self._heap, self._count) if self._async else ()
        k = COMPILED.Kernel(self, list(self.ranks.values()), LANE_TABLE, slots, self.result.record_events,
                            self._rendezvous, COMM_TYPES, *shared)
        self._at = k.at  # what the handlers left in Python schedule goes onto the compiled heap
        return k

    def _at(self, time_ns: int, rank: int, nid: int) -> None:
        """Schedule the finish of (rank, node) at `time_ns`."""
        if time_ns > _MAX_NS:
            self._past_clock(rank, nid, time_ns)
        heapq.heappush(self._heap, (time_ns, next(self._count), rank, nid))

    def _past_clock(self, rank: int, nid: int, time_ns: int) -> None:
        raise InputError(f"{self.ranks[rank].feeder.path}: rank {rank}: node {nid}: finishes at {time_ns} ns, past "
                         "the replay's 64-bit clock (292 years): a duration or size out of range")

    def _set_pred(self, ev: int, pred: int, *, cross: bool) -> None:
        if self._kernel is None:
            self.result.set_pred(ev, pred, cross=cross)
            return
        self._kernel.set_pred(ev, pred)  # the compiled loop holds the events until the end
        if cross:
            self.result.cross.add(ev)

    def call_at(self, time_ns: int, fn: Callable[[int], None]) -> None:
        """Call `fn(time_ns)` at `time_ns`, in order with every other event (a timing policy's
        network events: a message reaching the next device, a collective's next step)."""
        heapq.heappush(self._heap, (time_ns, next(self._count), fn, _CALL))  # (time, seq) is unique

    def run(self) -> ReplayResult:
        begins = {r: self.timing.begin_ns(r) for r in self.ranks}
        kernel = "python" if self._kernel is None else "compiled"
        with gc_relaxed():
            if self._kernel is not None:
                self._run_compiled(begins)
            else:
                self._run(begins)
        self._check_done()
        for code, note in getattr(self.timing, "run_notes", list)():
            self.diagnostics.add(Diagnostic("warning", code, note))
        if self.comms.assumed:
            pg, rank, nid = self.comms.assumed[0]
            names = ", ".join(repr(p) for p, _, _ in self.comms.assumed)
            self._warn("unknown-pg", f"no comm-group file: pg_name {names} taken as every rank", rank, nid)
        self.result.finalize(self.world, self.timing.describe(), self.diagnostics,
                             {r: ns for r, ns in begins.items() if ns})
        self.result.config["kernel"] = kernel
        self._let_go()
        return self.result

    def _let_go(self) -> None:
        """Break the cycles through the engine (its handlers, messages, a scheduling policy): what
        a replay held is freed as it returns, not at a full collection (a sweep grew a replay each)."""
        self.messages.e = None
        self._handlers.clear()  # its own bound methods
        getattr(self.timing, "unbind", lambda: None)()

    def _run(self, begins: dict[int, int]) -> None:
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

    def _run_compiled(self, begins: dict[int, int]) -> None:
        """`_run` in C: the same entries pushed in the same order, so the same events."""
        kernel = self._kernel
        index = {r: i for i, r in enumerate(self.ranks)}
        self._issue = lambda r: kernel.issue(index[r.rank])  # for _unstick
        for i, r in enumerate(self.ranks):
            if begins[r] > 0:
                kernel.begin(i, begins[r])
            else:
                kernel.issue(i)
        try:
            while True:
                kernel.drain()
                if not self._unstick():
                    break
            self.result.adopt(kernel.take)
        finally:  # the kernel and this engine hold each other
            self._kernel = None
            del self._at, self._issue

    def _scheduled(self) -> bool:
        return bool(self._kernel.scheduled() if self._kernel is not None else self._heap)

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
            if self._scheduled():
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
        self._join(r, nid, info, ev, r.seq_of.pop(nid))

    def _join(self, r: RankState, nid: int, info: NodeInfo, ev: int, k: int) -> None:
        """Rank `r`'s `k`-th collective on its group (node `nid`, event `ev`) joins the others."""
        group = self.comms.group_of(r, nid, info)
        pg = info.pg_name
        key = (pg, k)  # the group follows from pg; hashing it per rank would cost O(group)
        waiting = self._rendezvous.setdefault(key, [])
        waiting.append((r.rank, nid, info, ev, self._now))
        if self._async:
            self.timing.join_collective(key, group, r.rank, info, self._now,
                                        lambda t, rank=r.rank, nid=nid: self._member_done(key, rank, nid, t))
        if len(waiting) == (self.comms.present_in(pg, group) if self.absent_peers else len(group)):
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
            self._set_pred(m[3], last_ev, cross=True)
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
        """The largest member's size; a warning for each member whose call differs from the first's."""
        for code, message, rank, nid in mismatches(members, costed):
            self._warn(code, message, rank, nid)
        return max(m[2].comm_size for m in members)

    def _start_collective(self, members: list, group: tuple[int, ...]) -> None:
        ns = self._cost_collective(members, group)
        last_ev = members[-1][3]
        for (rank, nid, _, ev, _), member_ns in zip(members, ns):
            if ev != last_ev:
                self._set_pred(ev, last_ev, cross=True)
            self._at(self._now + member_ns, rank, nid)

    def _cost_collective(self, members: list, group: tuple[int, ...]) -> list[int]:
        """How long each member of a collective whose members have all arrived takes in it (the
        timing policy's word), the collective recorded; the compiled loop schedules the members."""
        first = members[0][2]
        size = self._check_sizes(members, "as the largest")
        ns = self.timing.collective_ns(members, group, size)
        self.result.collective(members, group, first, size, self._now, self._now + max(ns))
        return ns

    # -- the end --------------------------------------------------------------------------------
    def _check_done(self) -> None:
        if stuck := [r for r in self.ranks.values() if not r.feeder.done]:
            raise deadlock(self, stuck)

    def _warn(self, code: str, message: str, rank: int, nid: int) -> None:
        self.diagnostics.add(Diagnostic("warning", code, message, rank=rank, node_id=nid))


def _sequence(r: RankState, nid: int, info: NodeInfo) -> None:
    pg = info.pg_name
    k = r.coll_seq.get(pg, 0)
    r.coll_seq[pg] = k + 1
    r.seq_of[nid] = k
