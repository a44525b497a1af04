"""What one message costs on a dimension of the analytical network: the context every phase
model (collectives.py, closed forms) and step model (steps.py, member by member) prices with.

>>> ctx = PhaseContext(Dim("Ring", 4, 50.0, 500.0), delay_ns=10, local_mem_bw_gbps=1600)
>>> ctx.net(65536), neighbour_hops(ctx.dim, 3)
(1720, 1)
"""

from __future__ import annotations

from dataclasses import dataclass

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


def neighbour_hops(dim: Dim, distance: int = 1) -> int:
    """Hops to a peer `distance` positions away in the dimension's logical ring."""
    if dim.topology == "Switch":
        return 2
    if dim.topology == "FullyConnected":
        return 1
    d = distance % dim.npus
    return max(1, min(d, dim.npus - d))
