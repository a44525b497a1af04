"""`CollectivePlanner`: how ASTRA-sim's system layer lays a collective over a network, read off
the network and system configs alone: the native collective a comm type runs as, the dimensions
a group spans, the chunks it is cut into, its phases in order, the implementation each phase runs
on its dimension (a communicator group smaller than the system as ASTRA-sim's
`CommunicatorGroup` runs it), the rings of members per dimension, and one phase's cost.

Both network models take their plan from here: the congestion-unaware one
(backend.AnalyticalBackend, all at once or member by member) and the congestion-aware one
(congestion.py, message by message over the links). The planner keeps no time; its one cache is
which groups run as one ring of their members.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import ceil, prod
from typing import Callable, Sequence

from chakra_tools.core.model import CommType

from . import collectives as C
from .config import NetworkConfig, SystemConfig

#: the algorithms a communicator group smaller than the system runs over its members (their step
#: models take any pair's link; a double binary tree over such a group crashes ASTRA-sim)
LOCAL_ALGOS = ("ring", "halvingDoubling", "direct")
#: CommType -> (native collective it is costed as, divisor applied to comm_size)
COLLECTIVE_OF = {
    CommType.ALL_REDUCE: (C.ALL_REDUCE, 1),
    CommType.REDUCE_SCATTER: (C.REDUCE_SCATTER, 1),
    CommType.REDUCE_SCATTER_BLOCK: (C.REDUCE_SCATTER, 1),
    CommType.ALL_GATHER: (C.ALL_GATHER, 1),
    CommType.ALL_TO_ALL: (C.ALL_TO_ALL, 1),
    # not simulated by ASTRA-sim; our approximations (docs/reference/trace-replay.md):
    CommType.REDUCE: (C.ALL_REDUCE, 1),
    CommType.BARRIER: (C.ALL_REDUCE, 1),
    CommType.BROADCAST: (C.ALL_GATHER, 0),  # 0: divide by the group size
    CommType.GATHER: (C.ALL_GATHER, 0),
    CommType.SCATTER: (C.ALL_GATHER, 0),
}


def collective_of(comm_type: int) -> tuple[str, int]:
    """(the collective the model runs, 1 or 0: 0 divides comm_size by the group) for a comm_type."""
    return COLLECTIVE_OF.get(CommType(comm_type), (C.ALL_REDUCE, 1))


@dataclass
class CollectivePlanner:
    """The plan of a collective on `network` under `system` (see the module docstring)."""

    network: NetworkConfig
    system: SystemConfig
    #: (collective, group) -> `local_ring`
    _local_cache: dict[tuple[str, tuple[int, ...]], bool] = field(default_factory=dict, repr=False)

    def chunking(self, size: int, collective: str) -> tuple[int, int]:
        """(chunk bytes, chunk count) as ASTRA-sim's Sys cuts a collective."""
        splits = self.system.splits
        chunk = size // splits
        total = self.network.npus
        if collective != C.ALL_GATHER and total > chunk:
            return total, splits
        if chunk <= 0:
            return 0, 0
        return chunk, ceil(size / chunk)

    def group_dims(self, ranks: Sequence[int], involved: Sequence[bool] | None) -> list[tuple[int, int]]:
        """[(dimension, NPUs of the group along it)] for the dimensions the group spans.

        A group that is a sub-grid spans each dimension where its members' coordinates differ;
        a group that is not (e.g. ranks {0, 5} of a 4x2 system) is costed as one ring of all its
        members on the outermost dimension it spans.
        """
        addrs = [self.network.address(r) for r in ranks]
        spans = [(d, k) for d in range(len(self.network.dims)) if (k := len({a[d] for a in addrs})) > 1]
        if spans and prod(k for _, k in spans) != len(ranks):
            spans = [(spans[-1][0], len(ranks))]
        if involved is not None:  # involved_dim: the collective runs only along these dimensions
            spans = [(d, k) for d, k in spans if d >= len(involved) or involved[d]]
        return spans

    def phase_plan(self, coll: str, dims: list[tuple[int, int]]) -> list[tuple[str, int, int]]:
        """[(collective, dimension, NPUs)] of one chunk, in the order ASTRA-sim's
        Sys::generate_collective builds them."""
        if coll != C.ALL_REDUCE or self.system.collective_optimization == "baseline":
            order = list(reversed(dims)) if coll == C.ALL_GATHER else dims
            return [(coll, d, n) for d, n in order]
        # localBWAware all-reduce: RS up the dimensions, AR on the last, AG back down
        *inner, (last, nl) = dims
        return ([(C.REDUCE_SCATTER, d, n) for d, n in inner] + [(C.ALL_REDUCE, last, nl)]
                + [(C.ALL_GATHER, d, n) for d, n in reversed(inner)])

    def phases(self, coll: str, dims: list[tuple[int, int]], chunk: int,
               members: int | None = None) -> list[tuple[int, int]]:
        """[(queue, ns)] for one chunk of a collective of `members` ranks, in the order of `phase_plan`."""
        out, data = [], chunk
        for c, d, n in self.phase_plan(coll, dims):
            ns, data = self.phase(c, d, n, data, coll, members)
            out.append((d, ns))
        return out

    def phase(self, coll: str, d: int, n: int, data: int, parent: str | None = None,
              members: int | None = None) -> tuple[int, int]:
        """(ns, data leaving it) of one phase `coll` of a `parent` collective (by default the
        phase's own) of `members` ranks: ASTRA-sim runs every phase of a collective with the
        collective's implementation on that dimension (a localBWAware all-reduce's reduce-scatter
        and all-gather phases with all-reduce-implementation), `algorithm`."""
        ctx = self.context(d)
        if ctx.dim.in_network_offload:
            return C.offload_phase(coll, n, data, ctx)
        algo = self.algorithm(parent or coll, d, members)
        return C.phase_fn(coll, algo, ctx.dim.topology)(n, data, ctx)

    def context(self, d: int, group_ring: bool = False) -> C.PhaseContext:
        """The phase's link and endpoint delay. ASTRA-sim's memory bus charges `endpoint-delay`
        per packet on the system's own topology (RingTopology::Dimension::NA), and a fixed 10 ns
        (`Transmition::Fast`) on the ring it builds for a communicator group (Dimension::Local),
        which its Ring, HalvingDoubling and AllToAll take; the double binary tree always pays
        `endpoint-delay`."""
        delay = 10 if group_ring else self.system.endpoint_delay_ns
        return C.PhaseContext(self.network.dims[d], delay, self.system.local_mem_bw_gbps)

    def algorithm(self, coll: str, d: int, members: int | None = None) -> str:
        """The implementation a `coll` collective of `members` ranks (None: the whole system) runs
        on dimension d. ASTRA-sim (CommunicatorGroup::get_collective_plan) runs a communicator
        group smaller than the system with Ring wherever the collective's implementation list
        has more than one entry (a list of one is kept)."""
        if members is not None and members < self.network.npus and len(self.system.implementations.get(coll) or ()) > 1:
            return "ring"
        return self.system.algorithm(coll, d)

    def tree_phase(self, parent: str, d: int, n: int, members: int | None = None) -> bool:
        """A double-binary-tree phase we model per rank: any phase of a `parent` collective whose
        implementation on d is doubleBinaryTree (n a power of two, as ASTRA-sim's BinaryTree needs)."""
        return (self.algorithm(parent, d, members) == "doubleBinaryTree"
                and not self.network.dims[d].in_network_offload and n > 1 and n & (n - 1) == 0)

    def uses_tree(self, comm_type: int, ranks: Sequence[int], involved: Sequence[bool] | None) -> bool:
        """Whether a phase of this collective runs a double binary tree, whose members end at
        different times even when they start together."""
        coll = collective_of(comm_type)[0]
        return any(self.tree_phase(coll, d, n, len(ranks))
                   for _, d, n in self.phase_plan(coll, self.group_dims(ranks, involved) or [(0, 1)]))

    def runs_reversed(self, coll: str, kind: str) -> bool:
        """Whether a phase runs its ring the other way: a localBWAware all-reduce's all-gather
        phases take ASTRA-sim's "last" queues, which run anticlockwise."""
        return (coll == C.ALL_REDUCE and kind == C.ALL_GATHER
                and self.system.collective_optimization != "baseline")

    def rings(self, ranks: tuple[int, ...], d: int, whole: bool) -> list[list[int]]:
        """The members (as indices into `ranks`) of each ring of dimension `d`, in ring order:
        members that differ only in their coordinate along `d` (or every member, for a group
        that is no sub-grid and runs as one ring)."""
        if whole:
            return [list(range(len(ranks)))]
        by_rest: dict[tuple, list[tuple[int, int]]] = {}
        for k, r in enumerate(ranks):
            a = self.network.address(r)
            by_rest.setdefault(a[:d] + a[d + 1:], []).append((a[d], k))
        return [[k for _, k in sorted(ring)] for ring in by_rest.values()]

    def local_ring(self, coll: str, ranks: tuple[int, ...]) -> bool:
        """Whether ASTRA-sim runs this collective as one ring of its members in one phase: a
        communicator group smaller than the system gets a RingTopology of its members, whatever
        dimensions they span, and the network times each message by where its two ends are
        (`pair_link`): members two hops apart on a Ring, or on two dimensions, cost what they cost.
        Modelled so for ring (and, named as the list's one entry, halvingDoubling or direct),
        without in-network offload."""
        if not 1 < len(ranks) < self.network.npus or self.algorithm(coll, 0, len(ranks)) not in LOCAL_ALGOS:
            return False
        got = self._local_cache.get((coll, ranks))
        if got is None:
            addrs = [self.network.address(r) for r in ranks]
            spans = [d for d in range(len(self.network.dims)) if len({a[d] for a in addrs}) > 1]
            got = self._local_cache[(coll, ranks)] = bool(spans) and not any(
                self.network.dims[d].in_network_offload for d in spans)
        return got

    def pair_link(self, ranks: tuple[int, ...]) -> Callable[[int, int, int], int]:
        """link(j, i, m): an m-byte message from member j to member i as ASTRA-sim's
        congestion-unaware network times it, on the first dimension where their addresses differ
        (MultiDimTopology::get_dim_to_transfer), over that dimension's hops between them."""
        addrs = [self.network.address(r) for r in ranks]
        cache: dict[tuple[int, int, int], int] = {}

        def link(j: int, i: int, msg: int) -> int:
            ns = cache.get((j, i, msg))
            if ns is None:
                a, b = addrs[j], addrs[i]
                d = next(k for k in range(len(a)) if a[k] != b[k])
                dim = self.network.dims[d]
                ns = cache[(j, i, msg)] = C.PhaseContext(dim).net(msg, C.neighbour_hops(dim, b[d] - a[d]))
            return ns

        return link
