"""A chunk's phase on one ring, message by message: the ways the congestion-aware model
(congestion.py) runs the phases a collective is planned into, each sending its messages over the
links (linknet.LinkNetwork) in the replay's own event loop.

- `Steps`: a ring, halvingDoubling or direct phase, step by step (collectives.Step: a position
  sends the step's messages, waits for its peers' of the same step, then spends the step's delay);
  `CompiledSteps` is the same in C (`_linkloop.Steps`), event for event, where it is built.
- `PerPacket`: the direct all-reduce, its second half sent packet by packet as the first half's
  messages are handled (collectives._per_packet_phase's account).
- `Tree`: a double binary tree (collectives.dbt_staggered's account).

Each is made by the first member of its ring to begin the phase (`congestion._Run`) and tells it
when each member is done (`_Run._phase_done`).
"""

from __future__ import annotations

import heapq
from functools import lru_cache

from . import steps as S
from .linknet import COMPILED


@lru_cache(maxsize=4096)
def receivers(step: S.Step, n: int) -> tuple[tuple[int, ...], ...]:
    """Per position of a ring of n, the positions its message of `step` goes to, nearest first."""
    return tuple(tuple((i + h) % n for h in range(1, n) if i in S.step_peers(step.peers, (i + h) % n, n))
                 for i in range(n))


@lru_cache(maxsize=4096)
def expected(step: S.Step, n: int) -> tuple[int, ...]:
    """Per position, how many messages of `step` it waits for."""
    return tuple(len(S.step_peers(step.peers, i, n)) for i in range(n))


class Steps:
    """A chunk's phase on one ring, step by step: a position sends the step's messages, then
    waits for its peers' of the same step (a receive completes at the later of its own send and
    the message's arrival), then spends the step's delay before the next one."""

    __slots__ = ("run", "c", "p", "ring", "ranks", "steps", "to", "expected", "sent", "got", "came")

    def __init__(self, run: "_Run", c: int, p: int, ring: tuple[int, ...]):
        self.run, self.c, self.p, self.ring = run, c, p, ring
        self.ranks = [run.ranks[k] for k in ring]
        self.steps = run.plan.phases[p].steps
        n, count = len(ring), len(self.steps)
        self.to = [receivers(step, n) for step in self.steps]
        self.expected = [expected(step, n) for step in self.steps]
        self.sent = [[-1] * count for _ in range(n)]  # when position i sent step s (-1: not yet)
        self.got = [[0] * count for _ in range(n)]  # messages of step s that reached i
        self.came = [[0] * count for _ in range(n)]  # the latest of them

    def begin(self, k: int, t: int) -> None:
        i = self.ring.index(k)
        self.run.policy._at(t + self.steps[0].pre_ns, lambda now: self._send(i, 0, now))

    def _send(self, i: int, s: int, now: int) -> None:
        policy = self.run.policy
        net, at, msg, src = policy.network, policy._at, self.steps[s].msg, self.ranks[i]
        for j in self.to[s][i]:
            net.send(at, now, src, self.ranks[j], msg, lambda t, j=j: self._arrive(j, s, t))
        self.sent[i][s] = now
        self._progress(i, s)

    def _arrive(self, i: int, s: int, t: int) -> None:
        self.got[i][s] += 1
        if t > self.came[i][s]:
            self.came[i][s] = t
        self._progress(i, s)

    def _progress(self, i: int, s: int) -> None:
        sent = self.sent[i][s]
        if sent < 0 or self.got[i][s] < self.expected[s][i]:
            return
        ready = (sent if sent > self.came[i][s] else self.came[i][s]) + self.steps[s].post_ns
        if s + 1 < len(self.steps):
            self.run.policy._at(ready + self.steps[s + 1].pre_ns, lambda now: self._send(i, s + 1, now))
        else:
            self.run.policy._at(ready, lambda now: self.run._phase_done(self.ring[i], self.c, self.p, now))


class CompiledSteps:
    """`Steps` in C (`_linkloop.Steps`): the same events in the same order, its messages on the
    network's compiled `LinkState`."""

    __slots__ = ("ring", "steps")

    def __init__(self, run: "_Run", c: int, p: int, ring: tuple[int, ...]):
        self.ring = ring
        policy = run.policy
        made = run.plan.step_plans  # every chunk's phase p on this ring runs the same plan
        plan = made.get((p, id(ring)))
        if plan is None:
            plan = made[(p, id(ring))] = policy._compiled_plan(run.plan.phases[p].steps,
                                                               tuple(run.ranks[k] for k in ring))
        self.steps = COMPILED.Steps(policy.network.state, *policy._heap, plan, policy.network.queues,
                                    lambda i, t: run._phase_done(ring[i], c, p, t))

    def begin(self, k: int, t: int) -> None:
        self.steps.begin(self.ring.index(k), t)


class PerPacket:
    """A direct all-reduce's phase on one ring as ASTRA-sim's AllToAll runs it (the event-by-event
    account of collectives._per_packet_phase, here with its messages on the network): every member
    sends its first-half message to every other at once; each packet it handles (a received
    message once reduced) frees a slot; once all first-half messages have come, each free slot
    sends the next second-half message, the k-th to the member k ahead, and the receive from the
    member k behind is posted then. A member's phase ends at its last handled packet."""

    def __init__(self, run: "_Run", c: int, p: int, ring: tuple[int, ...]):
        self.run, self.c, self.p, self.ring = run, c, p, ring
        self.first, self.second = run.plan.phases[p].steps
        n = self.n = len(ring)
        self.out_at: list[int | None] = [None] * n  # a member's first-half sends
        self.early: list[list[int]] = [[] for _ in range(n)]  # first-half arrivals before the member began
        self.posted = [[None] * n for _ in range(n)]
        self.arrived = [[None] * n for _ in range(n)]
        self.received, self.slots, self.sent, self.handled = [0] * n, [0] * n, [0] * n, [0] * n
        self.end = [0] * n
        #: per member, when the receives not yet counted complete: a receive at the instant a
        #: packet is handled counts first (collectives._per_packet_phase orders them so)
        self.pending: list[list[int]] = [[] for _ in range(n)]

    def begin(self, k: int, t: int) -> None:
        i = self.ring.index(k)
        self.end[i] = t
        at = self.run.policy._at
        at(t + self.first.pre_ns, lambda now: self._first_half(i, now))

    def _first_half(self, i: int, now: int) -> None:
        run, n = self.run, self.n
        self.out_at[i] = now
        for hop in range(1, n):
            j = (i + hop) % n
            run.policy.network.send(run.policy._at, now, run.ranks[self.ring[i]], run.ranks[self.ring[j]],
                                    self.first.msg, lambda t, j=j: self._first_came(j, t))
        for t in self.early[i]:
            self._first_came(i, t)
        self.early[i] = []

    def _first_came(self, i: int, t: int) -> None:
        if self.out_at[i] is None:
            self.early[i].append(t)
            return
        self._received(i, max(t, self.out_at[i]), self.first.post_ns)

    def _received(self, i: int, t: int, post: int) -> None:
        heapq.heappush(self.pending[i], t)
        self.run.policy._at(t + post, lambda now: self._handled(i, now))

    def _handled(self, i: int, t: int) -> None:
        n, run = self.n, self.run
        self.slots[i] += 1
        self.handled[i] += 1
        self.end[i] = max(self.end[i], t)
        pending = self.pending[i]
        while pending and pending[0] <= t:
            heapq.heappop(pending)
            self.received[i] += 1
        while self.received[i] >= n - 1 and self.slots[i] and self.sent[i] < n - 1:
            self.slots[i] -= 1
            self.sent[i] += 1
            k = self.sent[i]
            dst = (i + k) % n
            leave = t + self.second.pre_ns
            run.policy._at(leave, lambda now, i=i, dst=dst, k=k: run.policy.network.send(
                run.policy._at, now, run.ranks[self.ring[i]], run.ranks[self.ring[dst]], self.second.msg,
                lambda came, dst=dst, k=k: self._second_came(dst, k, came)))
            self.posted[i][k] = leave
            if self.arrived[i][k] is not None:
                self._received(i, max(leave, self.arrived[i][k]), self.second.post_ns)
        if self.handled[i] == 2 * (n - 1):
            run._phase_done(self.ring[i], self.c, self.p, self.end[i])

    def _second_came(self, i: int, k: int, t: int) -> None:
        self.arrived[i][k] = t
        if self.posted[i][k] is not None:
            self._received(i, max(t, self.posted[i][k]), self.second.post_ns)


class Tree:
    """A chunk through ASTRA-sim's double binary tree on one ring's positions, message by message
    (collectives.dbt_staggered's account): a leaf sends up one endpoint delay after it begins; an
    inner position sends up one delay and one reduction after its later child's message has come
    (and it has begun); the top turns the data back down; each position, once its parent's data
    has come (no earlier than its own send up), sends it on to its children one delay (and, if
    inner, one reduction) later, and ends then. Chunks alternate RootMax and RootMin by the
    dimension's tree counter."""

    def __init__(self, run: "_Run", c: int, p: int, ring: tuple[int, ...]):
        self.run, self.c, self.p, self.ring = run, c, p, ring
        phase = run.plan.phases[p]
        data, self.ctx, before, per_chunk = phase.tree
        self.data = data
        self.red = self.ctx.reduce(data)
        counter = run.turn.get(phase.dim, 0) + before + c * per_chunk
        n = len(ring)
        self.tree = S.binary_tree(n, root_max=counter % 2 == 0)
        self.top = n - 1 if counter % 2 == 0 else 0
        self.started: list[int | None] = [None] * n
        self.up_sent: list[int | None] = [None] * n
        self.from_children: list[list[int]] = [[] for _ in range(n)]
        self.down_came: list[int | None] = [None] * n

    def _send(self, i: int, j: int, now: int, arrived) -> None:
        run = self.run
        run.policy.network.send(run.policy._at, now, run.ranks[self.ring[i]], run.ranks[self.ring[j]], self.data, arrived)

    def begin(self, k: int, t: int) -> None:
        i = self.ring.index(k)
        self.started[i] = t
        self._try_up(i)

    def _try_up(self, i: int) -> None:
        """Position i sends up (the top: down) once it has begun and its children's data came."""
        if self.started[i] is None or self.up_sent[i] is not None:
            return
        parent, children = self.tree[i]
        if len(self.from_children[i]) < len(children):
            return
        d = self.ctx.delay_ns
        t = self.started[i] + d if not children else max(self.started[i], *self.from_children[i]) + d + self.red
        self.up_sent[i] = t
        if parent is None:  # the top: its data goes back down
            self.run.policy._at(t, lambda now: self._down(i, now))
        else:
            self.run.policy._at(t, lambda now: self._send(i, parent, now, lambda came: self._child_came(parent, came)))
        if self.down_came[i] is not None:
            self._came_down(i)

    def _child_came(self, i: int, t: int) -> None:
        self.from_children[i].append(t)
        self._try_up(i)

    def _down(self, i: int, t: int) -> None:
        for c in self.tree[i][1]:
            self._send(i, c, t, lambda came, c=c: self._parent_came(c, came))
        self.run._phase_done(self.ring[i], self.c, self.p, t)

    def _parent_came(self, i: int, t: int) -> None:
        self.down_came[i] = t
        if self.up_sent[i] is not None:
            self._came_down(i)

    def _came_down(self, i: int) -> None:
        children = self.tree[i][1]
        t = max(self.up_sent[i], self.down_came[i]) + self.ctx.delay_ns + (self.red if children else 0)
        self.down_came[i] = None  # handled
        self.up_sent[i] = -1
        self.run.policy._at(t, lambda now: self._down(i, now))
