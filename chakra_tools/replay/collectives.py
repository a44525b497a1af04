"""Collective cost models: one small function per (collective, algorithm, topology), in a registry.

Derived from ASTRA-sim 2.x's published system layer and its congestion-unaware analytical network
(docs/reference/trace-replay.md has the derivation and the residual differences):

- A message of `m` bytes over `h` hops of a dimension takes `int(h * latency + m / B)` ns, where
  `B` is the bandwidth in bytes/ns with 1 GB = 2**30 bytes; a Ring neighbour is 1 hop (the
  shorter way round for farther peers), a Switch peer 2 hops, a FullyConnected peer 1 hop.
- A collective of `size` bytes is cut into chunks of `size // splits` bytes (at least one byte per
  NPU of the system), each chunk walks through one *phase* per dimension, and a dimension runs
  `active_chunks` chunks at a time (`pipeline_ns`).
- Within a phase, every packet that an algorithm injects costs one endpoint delay `d` on the way
  between the NPU and the network (ASTRA-sim's memory bus: `endpoint-delay` on the system's own
  dimensions, a fixed 10 ns on the ring of a communicator group); a step that reduces what it
  received costs `3 * int(m / local_mem_bw)` ns more (one write, two reads of the message). A ring phase of `S` messages, `P` of them reduced, is then
  `(S + 1) * d + S * net(m) + P * reduce(m)`.

A phase function gets `(n, data, ctx)` (`n` NPUs in the ring of this dimension, `data` bytes
entering the phase) and returns `(ns, data leaving the phase)`.

>>> from chakra_tools.replay.config import Dim
>>> ctx = PhaseContext(Dim("Ring", 4, 50.0, 500.0), delay_ns=10, local_mem_bw_gbps=1600)
>>> ring_all_reduce(4, 262144, ctx)   # one 256 KiB chunk: 6 messages of 64 KiB
(10750, 262144)
"""

from __future__ import annotations

import heapq
from typing import Callable

from .message import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER, PhaseContext, neighbour_hops
from .steps import (dbt_staggered, direct_all_gather_steps, direct_all_reduce_steps, direct_all_to_all_steps,
                    direct_reduce_scatter_steps, hd_all_gather_steps, hd_all_reduce_steps, hd_reduce_scatter_steps,
                    steps_ns)



PhaseFn = Callable[[int, int, PhaseContext], tuple[int, int]]
REGISTRY: dict[tuple[str, str, str], PhaseFn] = {}


def register(collective: str, algorithm: str, topologies: tuple[str, ...]):
    """Register a phase model for `collective` with `algorithm` on each of `topologies`."""

    def deco(fn: PhaseFn) -> PhaseFn:
        for t in topologies:
            REGISTRY[(collective, algorithm, t)] = fn
        return fn

    return deco


ALL_TOPOLOGIES = ("Ring", "FullyConnected", "Switch")


def _ring(ctx: PhaseContext, n: int, sends: int, msg: int, reduced: int) -> int:
    hops = neighbour_hops(ctx.dim)
    return (sends + 1) * ctx.delay_ns + sends * ctx.net(msg, hops) + reduced * ctx.reduce(msg)


# -- ring ----------------------------------------------------------------------------------------
@register(ALL_REDUCE, "ring", ALL_TOPOLOGIES)
def ring_all_reduce(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    """2(n-1) messages of data/n; the first n-1 (reduce-scatter half) are reduced."""
    return _ring(ctx, n, 2 * (n - 1), data // n, n - 1), data


@register(REDUCE_SCATTER, "ring", ALL_TOPOLOGIES)
def ring_reduce_scatter(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    """n-1 messages of data/n, each reduced."""
    return _ring(ctx, n, n - 1, data // n, n - 1), data // n


@register(ALL_GATHER, "ring", ALL_TOPOLOGIES)
def ring_all_gather(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    """n-1 messages of the whole input (ASTRA-sim's comm_size for all-gather is per rank)."""
    return _ring(ctx, n, n - 1, data, 0), data * n


@register(ALL_TO_ALL, "ring", ALL_TOPOLOGIES)
def ring_all_to_all(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    """n(n-1)/2 messages of data/n relayed around the ring, none reduced."""
    return _ring(ctx, n, n * (n - 1) // 2, data // n, 0), data


# -- direct: every peer at once -------------------------------------------------------------------
# Phase times of direct are its step model run with everyone at once (direct_*_steps below): each
# step waits for its farthest peer, except where a step hands on before its last reduction.

@register(ALL_REDUCE, "direct", ALL_TOPOLOGIES)
def direct_all_reduce(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    """A direct reduce-scatter (n-1 parallel messages of data/n) then a direct all-gather, sent
    as the first half's packets come back (one endpoint delay less)."""
    steps, out = direct_all_reduce_steps(n, data, ctx)
    return steps_ns(steps, n, ctx), out


@register(REDUCE_SCATTER, "direct", ALL_TOPOLOGIES)
def direct_reduce_scatter(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    steps, out = direct_reduce_scatter_steps(n, data, ctx)
    return steps_ns(steps, n, ctx), out


@register(ALL_GATHER, "direct", ALL_TOPOLOGIES)
def direct_all_gather(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    steps, out = direct_all_gather_steps(n, data, ctx)
    return steps_ns(steps, n, ctx), out


@register(ALL_TO_ALL, "direct", ALL_TOPOLOGIES)
def direct_all_to_all(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    steps, out = direct_all_to_all_steps(n, data, ctx)
    return steps_ns(steps, n, ctx), out


# -- halving-doubling -----------------------------------------------------------------------------
# Phase times of halving-doubling are its step model run with everyone at once (hd_*_steps below).

@register(ALL_REDUCE, "halvingDoubling", ALL_TOPOLOGIES)
def hd_all_reduce(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    steps, out = hd_all_reduce_steps(n, data, ctx)
    return steps_ns(steps, n, ctx), out


@register(REDUCE_SCATTER, "halvingDoubling", ALL_TOPOLOGIES)
def hd_reduce_scatter(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    steps, out = hd_reduce_scatter_steps(n, data, ctx)
    return steps_ns(steps, n, ctx), out


@register(ALL_GATHER, "halvingDoubling", ALL_TOPOLOGIES)
def hd_all_gather(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    steps, out = hd_all_gather_steps(n, data, ctx)
    return steps_ns(steps, n, ctx), out


# -- double binary tree ---------------------------------------------------------------------------
# ASTRA-sim has one tree algorithm, DoubleBinaryTreeAllReduce, and runs it for every phase on a
# dimension whose implementation is doubleBinaryTree, whatever the phase's collective: a
# reduce-scatter or all-gather phase (of a localBWAware all-reduce over several dimensions, or a
# reduce-scatter or all-gather collective) is a whole all-reduce of the phase's data, which leaves
# the phase unchanged in size (checked against the built 518bd51: an 8-rank doubleBinaryTree
# all-gather or reduce-scatter of 1 MiB ends each rank exactly when the all-reduce does).
@register(ALL_REDUCE, "doubleBinaryTree", ALL_TOPOLOGIES)
@register(REDUCE_SCATTER, "doubleBinaryTree", ALL_TOPOLOGIES)
@register(ALL_GATHER, "doubleBinaryTree", ALL_TOPOLOGIES)
@register(ALL_TO_ALL, "doubleBinaryTree", ALL_TOPOLOGIES)
def dbt_all_reduce(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    """The last position's end with everyone starting together (`dbt_staggered`: one chunk
    through one tree; the replayer times each rank on its own). For n not a power of two, which
    ASTRA-sim's BinaryTree cannot build (518bd51 ends with a segmentation fault on 6 ranks, and
    on a 4x3 system), two trees of ceil(log2 n) levels carrying half the data each."""
    if n > 1 and n & (n - 1) == 0:
        return max(dbt_staggered([0] * n, data, ctx, root_max=True)), data
    depth = max(1, (n - 1).bit_length())
    half = max(1, data // 2)
    step = ctx.delay_ns + ctx.net(half, neighbour_hops(ctx.dim))
    return ctx.delay_ns + depth * (step + ctx.reduce(half)) + depth * step, data


# -- in-network offload (a reducing switch) -------------------------------------------------------
def offload_phase(collective: str, n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    """Up to the switch and back, one hop each way; the switch reduces at line rate."""
    up, down, final = {
        ALL_REDUCE: (data, data, data),
        REDUCE_SCATTER: (data, data // n, data // n),
        ALL_GATHER: (data, data * n, data * n),
        ALL_TO_ALL: (data, data, data),
    }[collective]
    return 2 * ctx.delay_ns + ctx.net(up, 1) + ctx.net(down, 1), final


def phase_fn(collective: str, algorithm: str, topology: str) -> PhaseFn:
    """The registered model, falling back to ring for combinations ASTRA-sim lacks."""
    fn = REGISTRY.get((collective, algorithm, topology))
    return fn if fn is not None else REGISTRY[(collective, "ring", topology)]


# -- chunks through dimensions --------------------------------------------------------------------
def pipeline_ns(phases: list[tuple[int, int]], chunks: int, active: int) -> int:
    """Finish time of `chunks` identical chunks through `phases` [(queue, ns), ...].

    Each queue (a dimension) runs at most `active` chunks at once, first come first served by
    the time a chunk reaches it (ASTRA-sim appends a stream of equal priority at the end of its
    queue): a chunk's next phase may wait behind phases of later chunks that got there first, as
    a localBWAware all-reduce's all-gather waits behind the other chunks' reduce-scatters on the
    same dimension. With one phase and one active chunk this is `chunks * ns`.

    >>> pipeline_ns([(0, 10), (1, 5)], chunks=3, active=1)
    35
    >>> pipeline_ns([(0, 10), (1, 5), (0, 10)], chunks=2, active=1)  # RS, RS, then AG, AG
    40
    """
    slots = {q: [0] * active for q, _ in phases}
    arrivals = [(0, c, 0) for c in range(chunks)]  # (time it reaches the phase, chunk, phase)
    end = 0
    while arrivals:
        t, c, p = heapq.heappop(arrivals)
        q, ns = phases[p]
        t = max(t, heapq.heappop(slots[q])) + ns
        heapq.heappush(slots[q], t)
        if p + 1 < len(phases):
            heapq.heappush(arrivals, (t, c, p + 1))
        else:
            end = max(end, t)
    return end
