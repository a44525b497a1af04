"""Collective cost models: one small function per (collective, algorithm, topology), in a registry.

Derived from ASTRA-sim 2.x's published system layer and its congestion-unaware analytical network
(docs/replay.md has the derivation and the residual differences):

- A message of `m` bytes over `h` hops of a dimension takes `int(h * latency + m / B)` ns, where
  `B` is the bandwidth in bytes/ns with 1 GB = 2**30 bytes; a Ring neighbour is 1 hop (the
  shorter way round for farther peers), a Switch peer 2 hops, a FullyConnected peer 1 hop.
- A collective of `size` bytes is cut into chunks of `size // splits` bytes (at least one byte per
  NPU of the system), each chunk walks through one *phase* per dimension, and a dimension runs
  `active_chunks` chunks at a time (`pipeline_ns`).
- Within a phase, every packet that an algorithm injects costs one endpoint delay `d` on the way
  between the NPU and the network (ASTRA-sim's memory bus: 10 ns on dimension 0, `endpoint-delay`
  on the others); a step that reduces what it received costs `3 * int(m / local_mem_bw)` ns more
  (one write, two reads of the message). A ring phase of `S` messages, `P` of them reduced, is then
  `(S + 1) * d + S * net(m) + P * reduce(m)`.

A phase function gets `(n, data, ctx)` (`n` NPUs in the ring of this dimension, `data` bytes
entering the phase) and returns `(ns, data leaving the phase)`.

>>> ctx = PhaseContext(Dim("Ring", 4, 50.0, 500.0), delay_ns=10, local_mem_bw_gbps=1600)
>>> ring_all_reduce(4, 262144, ctx)   # one 256 KiB chunk: 6 messages of 64 KiB
(10750, 262144)
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from math import log2
from typing import Callable

from .config import Dim

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL = "all-reduce", "all-gather", "reduce-scatter", "all-to-all"


@dataclass(frozen=True)
class PhaseContext:
    """What a phase model needs besides (n, data): the dimension and the system's delays."""

    dim: Dim
    delay_ns: int = 10
    local_mem_bw_gbps: float = 0.0

    def net(self, msg: int, hops: int = 1) -> int:
        """Congestion-unaware time of one message over `hops` hops (ASTRA-sim truncates to ns)."""
        return int(hops * self.dim.latency_ns + msg / self.dim.bytes_per_ns)

    def reduce(self, msg: int) -> int:
        """Local reduction of a received message: one write and two reads of local memory."""
        if self.local_mem_bw_gbps <= 0:
            return 30  # ASTRA-sim's 10 ns per access when no local memory bandwidth is given
        return 3 * int(msg / self.local_mem_bw_gbps)


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


def neighbour_hops(dim: Dim, distance: int = 1) -> int:
    """Hops to a peer `distance` positions away in the dimension's logical ring."""
    if dim.topology == "Switch":
        return 2
    if dim.topology == "FullyConnected":
        return 1
    d = distance % dim.npus
    return max(1, min(d, dim.npus - d))


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
def _direct_step(ctx: PhaseContext, n: int, msg: int, reduced: bool) -> int:
    far = neighbour_hops(ctx.dim, n // 2)
    return 2 * ctx.delay_ns + ctx.net(msg, far) + (ctx.reduce(msg) if reduced else 0)


@register(ALL_REDUCE, "direct", ALL_TOPOLOGIES)
def direct_all_reduce(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    """A direct reduce-scatter (n-1 parallel messages of data/n) then a direct all-gather."""
    return _direct_step(ctx, n, data // n, True) + _direct_step(ctx, n, data // n, False), data


@register(REDUCE_SCATTER, "direct", ALL_TOPOLOGIES)
def direct_reduce_scatter(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    return _direct_step(ctx, n, data // n, True), data // n


@register(ALL_GATHER, "direct", ALL_TOPOLOGIES)
def direct_all_gather(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    return _direct_step(ctx, n, data, False), data * n


@register(ALL_TO_ALL, "direct", ALL_TOPOLOGIES)
def direct_all_to_all(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    return _direct_step(ctx, n, data // n, False), data


# -- halving-doubling -----------------------------------------------------------------------------
def _hd_halving(ctx: PhaseContext, n: int, data: int) -> int:
    """log2(n) steps: peer distance 1, 2, 4...; message data/2, data/4...; each reduced."""
    t, msg, dist = 0, data // 2, 1
    for _ in range(max(1, int(log2(n)))):
        t += ctx.delay_ns + ctx.net(msg, neighbour_hops(ctx.dim, dist)) + ctx.reduce(msg)
        msg, dist = msg // 2, dist * 2
    return t


def _hd_doubling(ctx: PhaseContext, n: int, first_msg: int) -> int:
    """log2(n) steps: peer distance n/2, n/4...; message doubling from `first_msg`."""
    steps = max(1, int(log2(n)))
    t, msg, dist = 0, first_msg, max(1, n // 2)
    for _ in range(steps):
        t += ctx.delay_ns + ctx.net(msg, neighbour_hops(ctx.dim, dist))
        msg, dist = msg * 2, max(1, dist // 2)
    return t


@register(ALL_REDUCE, "halvingDoubling", ALL_TOPOLOGIES)
def hd_all_reduce(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    steps = max(1, int(log2(n)))
    return ctx.delay_ns + _hd_halving(ctx, n, data) + _hd_doubling(ctx, n, data >> steps), data


@register(REDUCE_SCATTER, "halvingDoubling", ALL_TOPOLOGIES)
def hd_reduce_scatter(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    return ctx.delay_ns + _hd_halving(ctx, n, data), data // n


@register(ALL_GATHER, "halvingDoubling", ALL_TOPOLOGIES)
def hd_all_gather(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    return ctx.delay_ns + _hd_doubling(ctx, n, data), data * n


# -- double binary tree (all-reduce only, as in ASTRA-sim) -----------------------------------------
@register(ALL_REDUCE, "doubleBinaryTree", ALL_TOPOLOGIES)
def dbt_all_reduce(n: int, data: int, ctx: PhaseContext) -> tuple[int, int]:
    """Two trees, each carrying half the data: reduce up ceil(log2 n) levels, broadcast down."""
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
    """The registered model, falling back to ring for combinations ASTRA-sim lacks
    (e.g. a double-binary-tree all-gather)."""
    fn = REGISTRY.get((collective, algorithm, topology))
    return fn if fn is not None else REGISTRY[(collective, "ring", topology)]


# -- chunks through dimensions --------------------------------------------------------------------
def pipeline_ns(phases: list[tuple[int, int]], chunks: int, active: int) -> int:
    """Finish time of `chunks` identical chunks through `phases` [(queue, ns), ...].

    Each queue (a dimension) runs at most `active` chunks at once, first come first served; a
    chunk enters its next phase when the previous one ends. With one phase and one active chunk
    this is `chunks * ns`.

    >>> pipeline_ns([(0, 10), (1, 5)], chunks=3, active=1)
    35
    """
    slots = {q: [0] * active for q, _ in phases}
    end = 0
    for _ in range(chunks):
        t = 0
        for q, ns in phases:
            free = heapq.heappop(slots[q])
            t = max(t, free) + ns
            heapq.heappush(slots[q], t)
        end = max(end, t)
    return end
