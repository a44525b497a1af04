"""The congestion-aware timing policy: every message of every collective and send crosses the
links of a `linknet.LinkNetwork`, in the replay's own event loop, so messages that meet on a link
queue behind each other (ASTRA-sim's congestion_aware analytical backend).

A collective runs as ASTRA-sim's system layer runs it (planner.CollectivePlanner plans it: its
chunks, one phase per dimension, `active-chunks-per-dimension` at a time, the algorithm's steps
with their endpoint delays and reductions), but each member starts when it arrives and each step's
messages are real events: a member sends a step's messages, then waits for its peers' of the same
step (a receive completes at the later of its own send and the message's arrival), then spends the
step's delay before the next. On idle links this is the congestion-unaware model's arithmetic with
each message's time the sum of its hops; where messages meet, they queue.

Each phase runs as phases.py says: steps (in C where built), double binary trees, and the direct
all-reduce's packet-by-packet second half. What has no such model here — in-network reduction, a
scaled communication time (`--scale comm`), chunks queued for slots on several dimensions — is
timed as the congestion-unaware model times it, from the last member's arrival, and the replay
says so once (`run_notes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Sequence

from chakra_tools.core.linkusage import LINKS_KEPT
from chakra_tools.feed.info import NodeInfo

from . import collectives as C
from . import steps as S
from .backend import AnalyticalBackend
from .linknet import COMPILED, LinkNetwork, LinkStateTwin, Scheduler
from .phases import CompiledSteps, PerPacket, Steps, Tree, expected, receivers
from .planner import collective_of
from .timing import Captured, Staggered

Done = Callable[[int], None]


@dataclass(frozen=True)
class _Phase:
    """One phase of a chunk: its dimension, the rings of member indices it runs on (in ring
    order, reversed where the phase runs the other way) and the steps of each member."""

    dim: int
    rings: tuple[tuple[int, ...], ...]
    steps: tuple[S.Step, ...]
    #: a double binary tree (steps empty): the chunk's data, its context, and how many phases on
    #: the same dimension come before it in a chunk and in all (the tree counter's steps)
    tree: tuple[int, C.PhaseContext, int, int] | None = None


@dataclass(frozen=True)
class _Plan:
    chunks: int
    phases: tuple[_Phase, ...]
    dims: tuple[int, ...]
    #: (phase, id of one of its rings) -> its compiled `StepPlan`, made by the first run to need it
    #: (a plan is one collective's on one group: every run of it reads the same)
    step_plans: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @cached_property
    def ring_at(self) -> list[dict[int, int]]:
        """phase -> member -> the index of its ring there (made once per plan; every run reads it)."""
        return [{k: j for j, ring in enumerate(ph.rings) for k in ring} for ph in self.phases]


class CongestionAware(Staggered):
    """Compute and memory as `backend` says; communication through `network`'s links in the
    engine's loop (the engine sees `asynchronous` and calls `bind`, `join_collective`,
    `start_send`)."""

    asynchronous = True

    def __init__(self, backend: AnalyticalBackend, network: LinkNetwork, **captured):
        super().__init__(backend, **captured)  # `captured`: CapturedCongestionAware's, for timing.Captured
        self.network = network
        self._at: Scheduler | None = None
        self._plans: dict[tuple, _Plan | None] = {}
        self._runs: dict[tuple, _Run] = {}
        self._unmodelled: set[str] = set()
        #: (id of a phase's steps, the ring's ranks) -> (those steps, kept so the id stays theirs;
        #: their `_linkloop.StepPlan`): a plan's steps tuple is one object, hashed by identity
        self._step_plans: dict[tuple, tuple] = {}

    def bind(self, at: Scheduler) -> None:
        self._at = at
        self.network.reset()

    def unbind(self) -> None:
        """The replay is done: let go of its loop (see engine.Replayer._let_go)."""
        self._at = None
        self._heap = None

    def bind_heap(self, heap: list, counter, tag: int) -> None:
        """The engine's heap, its sequence counter and the tag of a callback entry: the compiled
        loop pushes `(time, next(counter), callback, tag)` as `at` would."""
        self._heap = (heap, counter, tag)

    # -- point to point ------------------------------------------------------------------------
    def start_send(self, src: int, dst: int, size: int, now: int, arrived: Done) -> None:
        self.network.send(self._at, now, src, dst, size, arrived)

    def rendezvous_ns(self, send: tuple, recv: tuple) -> tuple[int, int]:
        ns = self.network.alone_ns(send[0], recv[0], send[2].comm_size) if send[0] != recv[0] else 0
        return ns, ns

    # -- collectives ---------------------------------------------------------------------------
    def join_collective(self, key: tuple, group: Sequence[int], rank: int, info: NodeInfo, now: int,
                        done: Done) -> None:
        """`rank` arrives at its part of the collective `key` at `now`; `done(t)` when it ends."""
        run = self._runs.get(key)
        if run is None:
            comm_type = info.comm_type or 0
            ranks = tuple(group)
            spanned = self.backend.spanned(comm_type, ranks, info.involved_dim)
            involved = tuple(spanned) if spanned else None
            plan = self._plan(comm_type, info.comm_size, ranks, involved)
            turn = None
            if plan is not None and any(ph.tree for ph in plan.phases):  # the trees each dimension is at
                turn = self.backend._tree_turn(comm_type, info.comm_size, ranks, involved)
            run = self._runs[key] = _Run(self, key, comm_type, info.comm_size, ranks, involved, plan, turn or {})
        if run.join(rank, now, done):
            del self._runs[key]

    def _plan(self, comm_type: int, size: int, ranks: tuple[int, ...],
              involved: tuple[bool, ...] | None) -> _Plan | None:
        """The collective's chunks and phases, or None where a phase has no step model here."""
        key = (comm_type, size, ranks, involved)
        if key in self._plans:
            return self._plans[key]
        b = self.backend
        plan: _Plan | None = None
        coll, div = collective_of(comm_type)
        if b.scales.comm != 1.0 and len(ranks) > 1:
            self._unmodelled.add(f"--scale comm={b.scales.comm:g}")
        if len(ranks) > 1 and b.scales.comm == 1.0:
            if div == 0:
                size //= len(ranks)
            planner = b.planner
            local = planner.local_ring(coll, ranks)
            dims = [(0, len(ranks))] if local else planner.group_dims(ranks, involved)
            chunk, chunks = planner.chunking(size, coll) if dims else (0, 0)
            plan = _Plan(0, (), ())
            if chunks:
                if local:
                    rings = {0: [list(range(len(ranks)))]}
                    phase_plan = [(coll, 0, len(ranks))]
                else:
                    rings = {d: planner.rings(ranks, d, len(dims) == 1 and n == len(ranks)) for d, n in dims}
                    phase_plan = planner.phase_plan(coll, dims)
                phases, data = [], chunk
                per_dim = {d: sum(1 for _, e, _ in phase_plan if e == d) for d, _ in dims}
                for p, (kind, d, n) in enumerate(phase_plan):
                    ctx = planner.context(d, group_ring=local)
                    algo = planner.algorithm(coll, d, len(ranks))
                    if planner.tree_phase(coll, d, n, len(ranks)):
                        before = sum(1 for _, e, _ in phase_plan[:p] if e == d)
                        tree_ctx = planner.context(d)
                        phases.append(_Phase(d, tuple(tuple(r) for r in rings[d]), (),
                                             (data, tree_ctx, before, per_dim[d])))
                        continue
                    step_fn = None if ctx.dim.in_network_offload else S.steps_fn(kind, algo)
                    if step_fn is None:
                        self._unmodelled.add(f"{algo} {kind}")
                        plan = None
                        break
                    steps, data_out = step_fn(n, data, ctx)
                    if local:
                        steps = S.on_group_ring(kind, algo, n, steps, ctx)
                    if any(s.per_packet for s in steps[1:]):
                        self._unmodelled.add(f"{algo} {kind}")
                        plan = None
                        break
                    reverse = planner.runs_reversed(coll, kind)
                    phases.append(_Phase(d, tuple(tuple(r[::-1] if reverse else r) for r in rings[d]), tuple(steps)))
                    data = data_out
                else:
                    plan = _Plan(chunks, tuple(phases), tuple(sorted({p.dim for p in phases})))
                    if len(plan.dims) > 1 and chunks > b.system.active_chunks:
                        # chunks queue for each dimension's slots; each member grants its own in
                        # the order chunks reach it, and over several dimensions two members can
                        # grant theirs to different chunks that then wait for each other (found by
                        # a random case: a localBWAware all-reduce's reduce-scatter and
                        # all-gather on one dimension). The congestion-unaware model orders them
                        # over the whole collective, which only its all-at-once account can.
                        self._unmodelled.add(f"{len(plan.dims)}-dimension {coll} of {chunks} chunks, "
                                             f"{b.system.active_chunks} active")
                        plan = None
        self._plans[key] = plan
        return plan

    def _compiled_plan(self, steps: tuple[S.Step, ...], ranks: tuple[int, ...]):
        """The `_linkloop.StepPlan` of a phase on a ring of `ranks`, made once: per step whom each
        position sends to (as indices into its peers), its peers, their routes (link indices), how
        many messages it waits for, and the steps' delays and sizes."""
        key = (id(steps), ranks)
        got = self._step_plans.get(key)
        if got is None:
            n = len(ranks)
            receivers_of = [receivers(step, n) for step in steps]
            peers = []
            for i in range(n):
                seen: dict[int, int] = {}
                for rec in receivers_of:
                    for j in rec[i]:
                        seen.setdefault(j, len(seen))
                peers.append(seen)
            to = tuple(tuple(tuple(peers[i][j] for j in rec[i]) for i in range(n)) for rec in receivers_of)
            net = self.network
            routes = tuple(tuple(tuple(link.index for link in net.path(ranks[i], ranks[j])) if ranks[i] != ranks[j]
                                 else () for j in peers[i]) for i in range(n))
            got = self._step_plans[key] = (steps, COMPILED.StepPlan(
                to, tuple(tuple(p) for p in peers), routes, tuple(expected(step, n) for step in steps),
                tuple(st.pre_ns for st in steps), tuple(st.msg for st in steps), tuple(st.post_ns for st in steps)))
        return got[1]

    def run_notes(self) -> list[tuple[str, str]]:
        """What a user should know once the replay ran, as (code, message): the collectives it
        could not run message by message."""
        if not self._unmodelled:
            return []
        return [("congestion-unaware-phase",
                 f"congestion-aware: {', '.join(sorted(self._unmodelled))}: no message-by-message model here, "
                 "those collectives are timed congestion-unaware, from their last member's arrival")]

    def describe(self) -> dict:
        model = "congestion-aware" if self.network.queues else "congestion-unaware"
        return {**super().describe(), "network_model": model, "links_source": self.network.source,
                "link_notes": list(self.network.notes), "links_busy": self.network.busy()[:LINKS_KEPT]}


class CapturedCongestionAware(CongestionAware, Captured):
    """A capture's own host timeline, streams and skew (`timing.Captured` with communication from
    the model: `--as-captured --comm model`), its communication over the links: the modelled
    baseline of a capture, on a network with queues."""

    def __init__(self, backend: AnalyticalBackend, network: LinkNetwork, **captured):
        super().__init__(backend, network, comm="model", **captured)


class _Run:
    """One collective in flight: its members as they arrive, each going through every chunk's
    phases on its own, their messages on the network."""

    def __init__(self, policy: CongestionAware, key: tuple, comm_type: int, size: int, ranks: tuple[int, ...],
                 involved, plan: _Plan | None, turn: dict[int, int]):
        self.policy, self.key = policy, key
        self.turn = turn
        self.comm_type, self.size, self.ranks, self.involved, self.plan = comm_type, size, ranks, involved, plan
        self.index = {r: k for k, r in enumerate(ranks)}
        self.done: dict[int, Done] = {}
        self.arrived: dict[int, int] = {}
        self.finished = 0
        if plan is not None and plan.chunks:
            active = policy.backend.system.active_chunks
            n = len(ranks)
            # per member: free slots per dimension, the chunks waiting for one, its next phase per chunk
            self.free = [{d: active for d in plan.dims} for _ in range(n)]
            self.queued: list[dict[int, list[int]]] = [{d: [] for d in plan.dims} for _ in range(n)]
            self.chunks_left = [plan.chunks] * n
            self.end = [0] * n
            self.shared: dict[tuple, object] = {}  # (chunk, phase, ring index) -> its Steps, PerPacket or Tree
            self.kinds = [self._kind(phase) for phase in plan.phases]

    def join(self, rank: int, now: int, done: Done) -> bool:
        """A member arrives; True once every member has finished (the run can be forgotten)."""
        k = self.index[rank]
        self.done[k] = done
        self.arrived[k] = now
        plan = self.plan
        if plan is None:  # timed whole by the congestion-unaware model, once everyone is here
            if len(self.arrived) == len(self.ranks):
                arrivals = [self.arrived[j] for j in range(len(self.ranks))]
                ends = self.policy.backend.collective_finish_ns(self.comm_type, self.size, self.ranks,
                                                                self.involved, arrivals)
                last = max(arrivals)
                for j, t in enumerate(ends):
                    self.done[j](max(t, last))
                return True
            return False
        if not plan.chunks:
            done(now)
            self.finished += 1
            return self.finished == len(self.ranks)
        self.end[k] = now
        for c in range(plan.chunks):
            self._want(k, c, 0, now)
        return False

    # -- a member's chunks through the phases ----------------------------------------------------
    def _want(self, k: int, c: int, p: int, t: int) -> None:
        d = self.plan.phases[p].dim
        if self.free[k][d]:
            self.free[k][d] -= 1
            self._begin(k, c, p, t)
        else:
            self.queued[k][d].append((c, p))

    def _begin(self, k: int, c: int, p: int, t: int) -> None:
        self._shared(c, p, k, self.kinds[p]).begin(k, t)

    def _kind(self, phase: _Phase) -> type:
        """How a phase runs message by message (phases.py)."""
        if phase.tree is not None:
            return Tree
        if phase.steps[0].per_packet:
            return PerPacket
        if COMPILED is not None and not isinstance(self.policy.network.state, LinkStateTwin):
            return CompiledSteps
        return Steps

    def _shared(self, c: int, p: int, k: int, kind: type):
        """The state of chunk c's phase p on member k's ring that its members share (a
        packet-by-packet phase, a tree), made when the first of them begins it."""
        j = self.plan.ring_at[p][k]
        key = (c, p, j)
        got = self.shared.get(key)
        if got is None:
            got = self.shared[key] = kind(self, c, p, self.plan.phases[p].rings[j])
        return got

    def _phase_done(self, k: int, c: int, p: int, t: int) -> None:
        d = self.plan.phases[p].dim
        waiting = self.queued[k][d]
        if waiting:
            nc, np_ = waiting.pop(0)
            self._begin(k, nc, np_, t)
        else:
            self.free[k][d] += 1
        if p + 1 < len(self.plan.phases):
            self._want(k, c, p + 1, t)
            return
        self.end[k] = max(self.end[k], t)
        self.chunks_left[k] -= 1
        if not self.chunks_left[k]:
            self.done[k](self.end[k])
            self.finished += 1
            if self.finished == len(self.ranks):  # every member done: the run and its phases can go
                self.policy._runs.pop(self.key, None)
                self.shared.clear()  # its phases call back into it: freed now, not by the collector
