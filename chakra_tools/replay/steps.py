"""Collectives member by member: each phase as steps of messages between the members of its
ring, so that a member that arrives early goes on as its peers' messages come in (ASTRA-sim's
behaviour), and the models of one phase that have no closed form (a direct all-reduce's packets,
a double binary tree). collectives.py times phases when every member starts together, from these
where a step model is what defines them.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace
from math import log2
from typing import Callable, Sequence

from .message import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER, PhaseContext, neighbour_hops


# -- each rank through a phase, when its peers arrive at different times --------------------------
# ASTRA-sim runs a collective as messages between ranks: a rank that arrives early sends its first
# message at once and goes on as its peers' messages come in, so it may also finish early. A phase
# is then a list of steps; in each, a rank waits `pre_ns`, sends to its peers, waits for their
# messages of the same step (a receive completes at max(its own send, the peer's send + transfer),
# as the analytical network matches a message that arrived before its receive was posted), then
# spends `post_ns` (endpoint delay, reduction) before its next step.

@dataclass(frozen=True)
class Step:
    """One exchange of a phase: `peers` is "prev" (the ring predecessor), "all", or ("xor", k)."""

    pre_ns: int
    msg: int
    peers: object
    post_ns: int
    #: the next step sends to each peer on its own, one message per packet this member handles
    #: once every message of this step has come (`_per_packet_phase`): ASTRA-sim's direct
    #: all-reduce (AllToAll), where the nearer peers' reductions overlap the farther ones' way
    per_packet: bool = False


StepFn = Callable[[int, int, PhaseContext], tuple[list[Step], int]]
STEPS: dict[tuple[str, str], StepFn] = {}


def register_steps(collective: str, algorithm: str):
    def deco(fn: StepFn) -> StepFn:
        STEPS[(collective, algorithm)] = fn
        return fn

    return deco


def _ring_steps(ctx: PhaseContext, sends: int, msg: int, reduced: int) -> list[Step]:
    """The ring of `_ring`: a first endpoint delay, then each receive followed by one more (and
    a reduction for the first `reduced` receives)."""
    d = ctx.delay_ns
    return [Step(d if k == 0 else 0, msg, "prev", d + (ctx.reduce(msg) if k < reduced else 0))
            for k in range(sends)]


@register_steps(ALL_REDUCE, "ring")
def ring_all_reduce_steps(n: int, data: int, ctx: PhaseContext) -> tuple[list[Step], int]:
    return _ring_steps(ctx, 2 * (n - 1), data // n, n - 1), data


@register_steps(REDUCE_SCATTER, "ring")
def ring_reduce_scatter_steps(n: int, data: int, ctx: PhaseContext) -> tuple[list[Step], int]:
    return _ring_steps(ctx, n - 1, data // n, n - 1), data // n


@register_steps(ALL_GATHER, "ring")
def ring_all_gather_steps(n: int, data: int, ctx: PhaseContext) -> tuple[list[Step], int]:
    return _ring_steps(ctx, n - 1, data, 0), data * n


@register_steps(ALL_TO_ALL, "ring")
def ring_all_to_all_steps(n: int, data: int, ctx: PhaseContext) -> tuple[list[Step], int]:
    return _ring_steps(ctx, n * (n - 1) // 2, data // n, 0), data


def _direct_steps(ctx: PhaseContext, msg: int, reduced: bool, first: bool = True) -> Step:
    d = ctx.delay_ns
    return Step(d if first else 0, msg, "all", d + (ctx.reduce(msg) if reduced else 0))


@register_steps(ALL_REDUCE, "direct")
def direct_all_reduce_steps(n: int, data: int, ctx: PhaseContext) -> tuple[list[Step], int]:
    """The all-gather half is sent as the reduce-scatter half's packets come back (no delay of
    its own before it): each peer's message as one of the first half's is handled (`Step.per_packet`)."""
    first = _direct_steps(ctx, data // n, True)
    return [replace(first, per_packet=True), _direct_steps(ctx, data // n, False, False)], data


@register_steps(REDUCE_SCATTER, "direct")
def direct_reduce_scatter_steps(n: int, data: int, ctx: PhaseContext) -> tuple[list[Step], int]:
    return [_direct_steps(ctx, data // n, True)], data // n


@register_steps(ALL_GATHER, "direct")
def direct_all_gather_steps(n: int, data: int, ctx: PhaseContext) -> tuple[list[Step], int]:
    return [_direct_steps(ctx, data, False)], data * n


@register_steps(ALL_TO_ALL, "direct")
def direct_all_to_all_steps(n: int, data: int, ctx: PhaseContext) -> tuple[list[Step], int]:
    return [_direct_steps(ctx, data // n, False)], data


def _hd_steps(ctx: PhaseContext, n: int, collective: str, data: int) -> list[Step]:
    """ASTRA-sim's HalvingDoubling, message by message: the partner is `offset` away (i XOR
    offset), and after each message the offset doubles and the message halves (all-gather: the
    reverse); an all-reduce turns back when the offset reaches n. A received message is handed
    on with one endpoint delay, and reduced first when ASTRA-sim marks the packet it then
    inserts as processed: in cycles of log2(n) inserts, the first of each cycle never, the others
    for a reduce-scatter always and for an all-reduce in every other cycle (its toggle). The
    reduction is of the next message's size (the packet it inserts)."""
    logn = max(1, int(log2(n)))
    sends = 2 * logn if collective == ALL_REDUCE else logn
    if collective == ALL_GATHER:
        offset, mult, msg = max(1, n // 2), 0.5, data
    else:
        offset, mult, msg = 1, 2.0, data // 2
    sizes, offsets = [], []
    for _ in range(sends + 1):  # the insert after the last receive sends nothing
        sizes.append(msg)
        offsets.append(offset)
        offset, msg = int(offset * mult), int(msg / mult)
        if offset == n and collective == ALL_REDUCE:
            mult = 0.5
            offset, msg = int(offset * mult), int(msg / mult)
    steps = []
    for k in range(sends):
        insert = k + 1  # 0-based index of the packet inserted when receive k+1 arrives
        cycle, place = divmod(insert, logn)
        processed = place != 0 and logn > 1 and (
            collective == REDUCE_SCATTER or collective == ALL_REDUCE and cycle % 2 == 0)
        post = ctx.delay_ns + (ctx.reduce(sizes[insert]) if processed else 0)
        steps.append(Step(ctx.delay_ns if k == 0 else 0, sizes[k], ("xor", max(1, offsets[k])), post))
    return steps


@register_steps(ALL_REDUCE, "halvingDoubling")
def hd_all_reduce_steps(n: int, data: int, ctx: PhaseContext) -> tuple[list[Step], int]:
    return _hd_steps(ctx, n, ALL_REDUCE, data), data


@register_steps(REDUCE_SCATTER, "halvingDoubling")
def hd_reduce_scatter_steps(n: int, data: int, ctx: PhaseContext) -> tuple[list[Step], int]:
    return _hd_steps(ctx, n, REDUCE_SCATTER, data), data // n


@register_steps(ALL_GATHER, "halvingDoubling")
def hd_all_gather_steps(n: int, data: int, ctx: PhaseContext) -> tuple[list[Step], int]:
    return _hd_steps(ctx, n, ALL_GATHER, data), data * n


def steps_ns(steps: Sequence[Step], n: int, ctx: PhaseContext) -> int:
    """A phase's time when every member starts together (each step then waits for the farthest
    of its peers)."""
    return staggered_phase([0] * n, steps, ctx)[0]


def steps_fn(collective: str, algorithm: str) -> StepFn | None:
    """The step model of a phase, None where there is none (a double binary tree, of any phase:
    timed per rank by `dbt_staggered`, or from the last arrival where n is no power of two), with
    phase_fn's fallback to ring."""
    if algorithm == "doubleBinaryTree":
        return None
    return STEPS.get((collective, algorithm)) or STEPS.get((collective, "ring"))


def on_group_ring(collective: str, algorithm: str, n: int, steps: list[Step], ctx: PhaseContext) -> list[Step]:
    """The steps of a phase run over a communicator group's own ring (ASTRA-sim's RingTopology
    of the members, `Dimension::Local`): the same, but for a direct all-reduce of more than two
    members, whose all-gather half also reduces what it receives. ASTRA-sim's AllToAll counts
    (n - 1) x window packets as non-zero-latency on such a ring (`get_non_zero_latency_packets`)
    instead of one window's worth, so the second half's packets are marked processed too: one
    reduction more per step (checked with the built 518bd51: groups of 4 on an 8-rank ring,
    contiguous or strided, equal to the ns; before, 480 ns early, one 120 ns reduction per chunk
    of 4)."""
    if algorithm == "direct" and collective == ALL_REDUCE and n > 2 and len(steps) == 2:
        second = steps[1]
        return [steps[0], Step(second.pre_ns, second.msg, second.peers, second.post_ns + ctx.reduce(second.msg))]
    return steps


def step_peers(peers: object, i: int, n: int) -> range | tuple[int, ...]:
    """Indices (in the phase's ring) that rank index `i` receives from in a step."""
    if peers == "prev":
        return ((i - 1) % n,)
    if peers == "all":
        return tuple(j for j in range(n) if j != i)
    return (i ^ peers[1],) if (i ^ peers[1]) < n else ()


def staggered_phase(starts: Sequence[int], steps: Sequence[Step], ctx: PhaseContext,
                    link: Callable[[int, int, int], int] | None = None) -> list[int]:
    """Each member's end of a phase from its own start (members in ring order). `link(j, i, m)`:
    the time of an m-byte message from member j to member i where it is not the dimension's
    (a ring over members on several dimensions); by default `ctx.net` over the ring's hops.

    >>> from chakra_tools.replay.config import Dim
    >>> ctx = PhaseContext(Dim("Ring", 2, 50.0, 500.0), delay_ns=10, local_mem_bw_gbps=1600)
    >>> steps, _ = ring_all_reduce_steps(2, 65536, ctx)
    >>> staggered_phase([0, 0], steps, ctx)   # what collectives.ring_all_reduce gives them together
    [2310, 2310]
    """
    n = len(starts)
    cache: dict[tuple[int, int, int], int] = {}

    def transfer(j: int, i: int, msg: int) -> int:
        ns = cache.get((j, i, msg))
        if ns is None:
            ns = cache[(j, i, msg)] = (link(j, i, msg) if link is not None
                                       else ctx.net(msg, neighbour_hops(ctx.dim, j - i)))
        return ns

    if len(steps) == 2 and steps[0].per_packet:
        return _per_packet_phase(starts, steps, transfer)
    repeating = _periodic(starts, steps, transfer)
    if repeating is not None:
        return repeating
    ready = list(starts)
    for step in steps:
        sent = [t + step.pre_ns for t in ready]
        for i in range(n):
            got = sent[i]  # a receive completes no earlier than the rank's own send
            for j in step_peers(step.peers, i, n):
                got = max(got, sent[j] + transfer(j, i, step.msg))
            ready[i] = got + step.post_ns
    return ready


def _periodic(starts: Sequence[int], steps: Sequence[Step],
              transfer: Callable[[int, int, int], int]) -> list[int] | None:
    """Each member's end of a ring phase whose starts repeat every p members (p dividing the
    ring: all equal, or a data-parallel ring of replicas that arrive in turn) and whose every link
    takes a message in the same time: a step then keeps the pattern (a member waits for its
    predecessor, whose start is the one p places back), so p members are computed in place of n,
    O(steps x p) instead of O(steps x n): a ring of thousands. None where that does not hold."""
    n = len(starts)
    if n < 2 or any(s.peers != "prev" for s in steps):
        return None
    p = _period(starts)
    if p == n:
        return None
    per_msg = {}
    for msg in {s.msg for s in steps}:
        times = {transfer((i - 1) % n, i, msg) for i in range(n)}
        if len(times) != 1:
            return None
        per_msg[msg] = times.pop()
    ready = list(starts[:p])
    for s in steps:
        sent = [t + s.pre_ns for t in ready]
        hop = per_msg[s.msg]
        ready = [max(sent[i], sent[i - 1] + hop) + s.post_ns for i in range(p)]
    return [ready[i % p] for i in range(n)]


def _period(xs: Sequence[int]) -> int:
    """The least p dividing len(xs) with xs[i] == xs[i - p] throughout (len(xs): none shorter).

    >>> _period([5, 7, 5, 7, 5, 7]), _period([1, 2, 3]), _period([4, 4])
    (2, 3, 1)
    """
    n = len(xs)
    for p in range(1, n):
        if n % p == 0 and all(xs[i] == xs[i - p] for i in range(p, n)):
            return p
    return n


def _per_packet_phase(starts: Sequence[int], steps: Sequence[Step],
                      transfer: Callable[[int, int, int], int]) -> list[int]:
    """A direct all-reduce (`Step.per_packet`) as ASTRA-sim's AllToAll runs it, event by event.
    Every packet a member handles (its first sends, each received message once reduced or
    passed to memory) gives it a free slot; once all n - 1 messages of the first half have come,
    each free slot sends its next all-gather message, the k-th to the member k ahead (posting the
    receive from the one k behind), so a fast peer's second-half message can release a send
    before the member's own slow reductions end. It ends at its last handled packet."""
    first, second = steps
    n = len(starts)
    if n < 2:
        return list(starts)
    posted = [[None] * n for _ in range(n)]  # posted[i][k]: i's second-half receive from i - k
    arrived = [[None] * n for _ in range(n)]  # arrived[i][k]: that message's arrival at i
    events: list[tuple[int, int, int]] = []   # (time, kind, member): kind 0 received, 1 handled
    slots, sent, received, end = [0] * n, [0] * n, [0] * n, list(starts)
    for i in range(n):
        out_at = starts[i] + first.pre_ns
        for k in range(1, n):
            j = (i - k) % n  # the first half: every member sends to every other at once
            came = max(out_at, starts[j] + first.pre_ns + transfer(j, i, first.msg))
            heapq.heappush(events, (came, 0, i))
            heapq.heappush(events, (came + first.post_ns, 1, i))

    def deliver(i: int, k: int) -> None:  # member i's receive from i - k completes
        t = max(posted[i][k], arrived[i][k])
        heapq.heappush(events, (t, 0, i))
        heapq.heappush(events, (t + second.post_ns, 1, i))

    while events:
        t, kind, i = heapq.heappop(events)
        if kind == 0:
            received[i] += 1
            continue
        slots[i] += 1
        end[i] = max(end[i], t)
        while received[i] >= n - 1 and slots[i] and sent[i] < n - 1:
            slots[i] -= 1
            sent[i] += 1
            k = sent[i]
            dst = (i + k) % n
            arrived[dst][k] = t + second.pre_ns + transfer(i, dst, second.msg)
            posted[i][k] = t + second.pre_ns
            if posted[dst][k] is not None:
                deliver(dst, k)
            if arrived[i][k] is not None:
                deliver(i, k)
    return end


# -- double binary tree, per rank ------------------------------------------------------------------
def binary_tree(n: int, root_max: bool) -> dict[int, tuple[int | None, list[int]]]:
    """ASTRA-sim's BinaryTree of n = 2^k positions: a complete tree of n - 1 positions numbered
    in order, under a top position with it as only child: the last position (RootMax) or the
    first (RootMin). Returns position -> (parent, children)."""
    tree: dict[int, tuple[int | None, list[int]]] = {}

    def subtree(lo: int, levels: int, parent: int) -> int | None:
        if levels == 0:
            return None
        root = lo + (1 << (levels - 1)) - 1
        tree[root] = (parent, [])
        for child_lo in (lo, root + 1):
            child = subtree(child_lo, levels - 1, root)
            if child is not None:
                tree[root][1].append(child)
        return root

    top = n - 1 if root_max else 0
    tree[top] = (None, [])
    tree[top][1].append(subtree(0 if root_max else 1, n.bit_length() - 1, top))
    return tree


def dbt_staggered(starts: Sequence[int], data: int, ctx: PhaseContext, root_max: bool) -> list[int]:
    """Each position's end of one chunk through ASTRA-sim's DoubleBinaryTreeAllReduce (the whole
    chunk goes through one tree; chunks alternate RootMax and RootMin). A leaf sends up after one
    endpoint delay and ends one delay after its parent's data comes down; an inner position sends
    up one delay and one reduction after its later child's message, and sends down one delay and
    one reduction after its parent's; the top receives from its one child and sends back down.
    A receive completes at max(when it was posted, the message's arrival)."""
    n, d, red = len(starts), ctx.delay_ns, ctx.reduce(data)
    tree = binary_tree(n, root_max)

    def net(a: int, b: int) -> int:
        return ctx.net(data, neighbour_hops(ctx.dim, b - a))

    up: dict[int, int] = {}

    def send_up(i: int) -> int:
        children = tree[i][1]
        if not children:
            up[i] = starts[i] + d
        else:
            got = max(max(starts[i], send_up(c) + net(c, i)) for c in children)
            up[i] = got + d + red
        return up[i]

    top = n - 1 if root_max else 0
    send_up(top)  # the top's "send up" is its send down
    ends = [0] * n
    down = {top: up[top]}
    ends[top] = up[top]
    order = [top]
    while order:
        parent = order.pop()
        for c in tree[parent][1]:
            got = max(up[c], down[parent] + net(parent, c))
            leaf = not tree[c][1]
            down[c] = ends[c] = got + d + (0 if leaf else red)
            order.append(c)
    return ends
