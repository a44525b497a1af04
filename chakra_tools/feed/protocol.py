"""The backend protocol: what a simulator implements to be driven by the replayer.

The replayer (`chakra_tools.replay`) owns the schedule: one `ETFeeder` per rank, the per-rank
resources, collective rendezvous and send/receive pairing, the clock. A *backend* only answers
"how long does this take?", in integer nanoseconds, and so can be swapped without touching the
engine: the analytical ASTRA-sim-compatible model (`replay.backend.AnalyticalBackend`) is one;
a packet-level network simulator wrapped in Python, or a lookup table of measured kernels, would
be others.

Contract, per call:

- `compute_ns(rank, info)`: a COMP node's duration (`info` is a `feed.NodeInfo`).
- `memory_ns(rank, info, now_ns)`: a MEM_LOAD / MEM_STORE node's *finish time* (not duration), so
  that a backend can queue requests on a shared memory port; must be >= `now_ns`.
- `p2p_ns(src, dst, size)`: the time from a send's issue until its data has arrived at `dst`.
- `collective_ns(comm_type, size, ranks, involved_dim)`: the duration of a collective that starts
  on every rank of `ranks` (global ranks, sorted) at the same instant.
- `describe()`: a JSON-able summary of the configuration, copied into the result's "config".

Every answer must be a deterministic function of the arguments (and, for `memory_ns`, of earlier
calls): the replayer's output bytes depend on it.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from .info import NodeInfo


@runtime_checkable
class Backend(Protocol):
    def compute_ns(self, rank: int, info: NodeInfo) -> int: ...

    def memory_ns(self, rank: int, info: NodeInfo, now_ns: int) -> int: ...

    def p2p_ns(self, src: int, dst: int, size: int) -> int: ...

    def collective_ns(self, comm_type: int, size: int, ranks: Sequence[int],
                      involved_dim: Sequence[bool] | None) -> int: ...

    def describe(self) -> dict: ...
