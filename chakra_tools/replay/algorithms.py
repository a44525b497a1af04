"""The library's collective algorithms as the rounds of messages each sends (fabric.Fabric prices a
round; library.LibraryBackend runs them), read off the library's source:

gloo (facebookincubator/gloo, as PyTorch's ProcessGroupGloo calls it):
- all-reduce: a ring (each rank sends to the one before it), n-1 rounds of reduce-scatter and
  n-1 of all-gather, each of size/n bytes, the first n-1 reduced on arrival (allreduce.cc);
- reduce-scatter: PyTorch's gloo runs the all-reduce of the whole input and keeps its share
  (measured with the probe: a 4 MiB reduce-scatter on 4 ranks takes what the 4 MiB all-reduce does);
- all-gather: a ring (each rank sends to the one after it), n-1 rounds of one rank's share;
- all-to-all: every rank sends its share to every other at once, one round (alltoall.cc);
- broadcast: a binomial tree from the root, the nearest virtual rank first: round i doubles the
  holders (broadcast.cc);
- barrier: a dissemination barrier, ceil(log2 n) rounds of empty messages (barrier.cc);
- reduce, gather, scatter: the all-reduce, and one round to or from the root.
"""

from __future__ import annotations

from math import ceil
from typing import Callable, Sequence

from chakra_tools.core.model import CommType

#: a round: its simultaneous (src, dst, bytes) messages and the bytes each rank then reduces
Round = tuple[tuple[tuple[int, int, int], ...], int]
Rounds = Callable[[Sequence[int], int], list[Round]]


def peers_per_member(msgs) -> int:
    """The most messages one member of a round sends (1 in a ring's round, n-1 in an all-to-all)."""
    sends: dict[int, int] = {}
    for s, d, _ in msgs:
        if s != d:
            sends[s] = sends.get(s, 0) + 1
    return max(sends.values(), default=1)


def ring_all_reduce(g: Sequence[int], size: int) -> list[Round]:
    n = len(g)
    chunk = ceil(size / n)
    step = tuple((g[i], g[i - 1], chunk) for i in range(n))
    return [(step, chunk if k < n - 1 else 0) for k in range(2 * (n - 1))]


def ring_all_gather(g: Sequence[int], size: int) -> list[Round]:
    n = len(g)
    step = tuple((g[i], g[(i + 1) % n], size) for i in range(n))
    return [(step, 0)] * (n - 1)


def direct_all_to_all(g: Sequence[int], size: int) -> list[Round]:
    n = len(g)
    share = ceil(size / n)
    return [(tuple((a, b, share) for a in g for b in g if a != b), 0)]


def binomial_broadcast(g: Sequence[int], size: int, root: int = 0) -> list[Round]:
    n = len(g)
    rounds, bit = [], 1
    while bit < n:
        msgs = tuple((g[(v + root) % n], g[(v + bit + root) % n], size)  # holders 0..bit-1
                     for v in range(bit) if v + bit < n)
        rounds.append((msgs, 0))
        bit *= 2
    return rounds


def dissemination_barrier(g: Sequence[int], size: int) -> list[Round]:
    n, d, rounds = len(g), 1, []
    while d < n:
        rounds.append((tuple((g[i], g[(i + d) % n], 0) for i in range(n)), 0))
        d *= 2
    return rounds


def to_root(g: Sequence[int], size: int) -> list[Round]:
    return [(tuple((r, g[0], size) for r in g[1:]), 0)]


def from_root(g: Sequence[int], size: int) -> list[Round]:
    return [(tuple((g[0], r, size) for r in g[1:]), 0)]


#: library -> how many of a rank's calls it runs at once (ProcessGroupGloo's worker threads,
#: two by default: an asynchronous reduce-scatter and the next layer's all-gather proceed together)
IN_FLIGHT = {"gloo": 2}
#: library -> who owns those worker threads (a `resources.CALL_LANES` value): gloo's belong to each
#: process group, and its sends do not use them (they leave from the calling thread)
WORKERS_OWNED_BY = {"gloo": "group"}

#: library -> collective kind -> its rounds
LIBRARIES: dict[str, dict[CommType, Rounds]] = {
    "gloo": {
        CommType.ALL_REDUCE: ring_all_reduce,
        CommType.REDUCE_SCATTER: ring_all_reduce,
        CommType.REDUCE_SCATTER_BLOCK: ring_all_reduce,
        CommType.REDUCE: ring_all_reduce,
        CommType.ALL_GATHER: ring_all_gather,
        CommType.ALL_TO_ALL: direct_all_to_all,
        CommType.BROADCAST: binomial_broadcast,
        CommType.BARRIER: dissemination_barrier,
        CommType.GATHER: to_root,
        CommType.SCATTER: from_root,
    },
}
