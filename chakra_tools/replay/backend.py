"""`AnalyticalBackend`: the ASTRA-sim-compatible cost model behind the replayer (see feed.Backend).

Compute: the measured duration (the `duration_ns` attribute where a converter kept the exact value,
else `duration_micros`, whole µs; 0 becomes 1 ns as in ASTRA-sim), or,
with roofline on and `num_ops` known, `num_ops / min(local_mem_bw * num_ops / tensor_size,
peak_perf)`. Communication: collectives decomposed over the dimensions their group spans
(collectives.py); point-to-point messages take the analytical network's time on the first
dimension where source and destination differ. Memory: ASTRA-sim 2.0's remote-memory options
(per-NPU, per-node pooled, one disaggregated pool) with FIFO ports; without expansion a memory
node reads local memory at `local-mem-bw`. Scale factors per kind are for what-if studies.

How a collective is laid over the network (its dimensions, chunks, phases and each phase's
algorithm and cost) is planner.CollectivePlanner's; this module times the plan, all members at
once (`collective_ns`) or each from its own arrival (`collective_finish_ns`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Sequence

from chakra_tools.feed.info import NodeInfo

from . import collectives as C
from . import steps as S
from .config import MemoryConfig, NetworkConfig, SystemConfig
from .planner import CollectivePlanner, collective_of


@dataclass
class Scales:
    """Multipliers for what-if studies: 0.5 on `compute` = twice as fast GPU kernels."""

    host: float = 1.0
    compute: float = 1.0
    comm: float = 1.0
    memory: float = 1.0

    @classmethod
    def parse(cls, text: str | None) -> "Scales":
        """`"compute=0.5,comm=2"` -> Scales(compute=0.5, comm=2.0)."""
        s = cls()
        for part in filter(None, (text or "").split(",")):
            k, _, v = part.partition("=")
            if k.strip() not in ("host", "compute", "comm", "memory"):
                raise ValueError(f"unknown scale {k!r}; use host, compute, comm, memory")
            setattr(s, k.strip(), float(v))
        return s


@dataclass
class AnalyticalBackend:
    network: NetworkConfig
    system: SystemConfig = field(default_factory=SystemConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    scales: Scales = field(default_factory=Scales)
    roofline: bool | None = None  # None: as the system config says
    #: the congestion-aware model's links (linknet.LinkNetwork): a replay on the model then runs
    #: every message over them in its own loop (congestion.CongestionAware); None: congestion-unaware
    links: object = None

    def __post_init__(self) -> None:
        self._ops_by_side = [0, 0]  # compute nodes replayed: host ops, device kernels
        self._coll_cache: dict = {}
        self._p2p_cache: dict = {}
        self._planner = CollectivePlanner(self.network, self.system)
        self._ports: dict[int, int] = {}
        # (collective, group, dimension) -> tree phases run there so far (ASTRA-sim's counter)
        self._tree_streams: dict[tuple[str, tuple[int, ...], int], int] = {}
        self._has_trees = "doubleBinaryTree" in {self.system.algorithm(c, d) for d in range(len(self.network.dims))
                                                 for c in (C.ALL_REDUCE, C.REDUCE_SCATTER, C.ALL_GATHER,
                                                           C.ALL_TO_ALL)}
        if self.roofline is None:
            self.roofline = self.system.roofline
        ndims = len(self.network.dims)
        # collective -> the dimensions a collective over every NPU spans (SystemConfig.spanned_dims)
        self._spans = {c: self.system.spanned_dims(c, ndims)
                       for c in (C.ALL_REDUCE, C.ALL_GATHER, C.REDUCE_SCATTER, C.ALL_TO_ALL)}

    # -- compute --------------------------------------------------------------------------------
    def compute_ns(self, rank: int, info: NodeInfo) -> int:
        if info.is_cpu_op:
            scale = self.scales.host
            self._ops_by_side[0] += 1
        else:
            scale = self.scales.compute
            self._ops_by_side[1] += 1
        # ASTRA-sim runs the roofline for GPU nodes only: a host op replays its duration
        if self.roofline and info.num_ops > 0 and self.system.peak_perf_tflops > 0 and not info.is_cpu_op:
            ns = self.roofline_ns(info.num_ops, info.tensor_size)
        elif info.duration_ns:
            ns = info.duration_ns
        else:
            ns = max(1, info.duration_micros * 1000)
        return ns if scale == 1.0 else max(0, round(ns * scale))

    def roofline_ns(self, num_ops: int, tensor_size: int) -> int:
        """num_ops / min(bandwidth * intensity, peak): the roofline (FLOP, bytes -> ns)."""
        peak = self.system.peak_perf_tflops * 1e12
        bw = self.system.local_mem_bw_gbps * 1e9
        perf = peak if tensor_size <= 0 or bw <= 0 else min(bw * num_ops / tensor_size, peak)
        return max(1, int(num_ops / perf * 1e9))

    # -- memory ---------------------------------------------------------------------------------
    def memory_ns(self, rank: int, info: NodeInfo, now_ns: int) -> int:
        m = self.memory
        size = info.tensor_size
        if m.memory_type == "NO_MEMORY_EXPANSION":
            bw = self.system.local_mem_bw_gbps
            ns = int(size / bw) if bw > 0 and size else info.duration_micros * 1000
            return now_ns + self._scaled(ns, self.scales.memory)
        runtime = self._scaled(int(m.latency_ns + size / m.bandwidth_gbps), self.scales.memory)
        if m.memory_type == "PER_NPU_MEMORY_EXPANSION":
            return now_ns + runtime
        port = rank // m.npus_per_node if m.memory_type == "PER_NODE_MEMORY_EXPANSION" else 0
        start = max(now_ns, self._ports.get(port, 0))
        self._ports[port] = start + runtime
        return start + runtime

    # -- network --------------------------------------------------------------------------------
    def p2p_ns(self, src: int, dst: int, size: int) -> int:
        key = (src, dst, size)
        ns = self._p2p_cache.get(key)
        if ns is None:
            ns = self._scaled(self._p2p(src, dst, size), self.scales.comm)
            self._p2p_cache[key] = ns
        return ns

    def _p2p(self, src: int, dst: int, size: int) -> int:
        if src == dst:
            return 0
        a, b = self.network.address(src), self.network.address(dst)
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                dim = self.network.dims[i]
                ctx = C.PhaseContext(dim)
                return ctx.net(size, C.neighbour_hops(dim, y - x))
        return 0

    def spanned(self, comm_type: int, ranks: Sequence[int],
                involved_dim: Sequence[bool] | None) -> Sequence[bool] | None:
        """`involved_dim` as ASTRA-sim runs a collective over every NPU with a system JSON whose
        implementation list names fewer dimensions than the network has: the dimensions past the
        list are not involved (`SystemConfig.spanned_dims`); as given otherwise."""
        ndims = len(self.network.dims)
        spans = self._spans[collective_of(comm_type)[0]]
        if spans == ndims or len(ranks) != self.network.npus:
            return involved_dim
        return tuple(d < spans and (not involved_dim or d >= len(involved_dim) or bool(involved_dim[d]))
                     for d in range(ndims))

    def unused_scales(self) -> list[str]:
        """After a replay: the --scale factors given that applied to no node (compute on a CPU
        capture, whose compute is host ops: the factor a user meant is host's)."""
        out = []
        host, device = self._ops_by_side
        if self.scales.compute != 1.0 and not device and host:
            out.append(f"--scale compute={self.scales.compute:g} changed nothing: this rank set has no device "
                       f"kernels, its {host} compute nodes are host ops (a CPU capture): scale them with "
                       f"host={self.scales.compute:g}")
        if self.scales.host != 1.0 and not host and device:
            out.append(f"--scale host={self.scales.host:g} changed nothing: this rank set has no host ops")
        return out

    def notes(self) -> list[str]:
        """What a user should know about how the system config (`system.source`) is read, said
        once before a replay."""
        ndims = len(self.network.dims)
        short = [c for c, n in self._spans.items() if n < ndims]
        if not short:
            return []
        n = self._spans[short[0]]
        return [f"{', '.join(f'{c}-implementation' for c in short)} "
                f"name{'s' if len(short) == 1 else ''} {n} of the network's {ndims} dimensions: as in ASTRA-sim, "
                f"a collective over every NPU runs on the first {n} only (each group of NPUs that differ "
                f"there alone); write one implementation per dimension to span them all"]

    def collective_ns(self, comm_type: int, size: int, ranks: Sequence[int],
                      involved_dim: Sequence[bool] | None = None) -> int:
        involved_dim = self.spanned(comm_type, ranks, involved_dim)
        key = (comm_type, size, tuple(ranks), tuple(involved_dim) if involved_dim else None)
        ns = self._coll_cache.get(key)
        if ns is None:
            ns = self._scaled(self._collective(comm_type, size, key[2], key[3]), self.scales.comm)
            self._coll_cache[key] = ns
        return ns

    def _collective(self, comm_type: int, size: int, ranks: tuple[int, ...],
                    involved: tuple[bool, ...] | None) -> int:
        if len(ranks) <= 1:
            return 0
        coll, div = collective_of(comm_type)
        planner = self.planner
        if planner.local_ring(coll, ranks):  # members end apart even when they start together
            return max(self._staggered(comm_type, size, ranks, involved, (0,) * len(ranks)))
        if div == 0:
            size //= len(ranks)
        dims = planner.group_dims(ranks, involved)
        if not dims:
            return 0
        chunk, chunks = planner.chunking(size, coll)
        if chunks == 0:
            return 0
        phases = planner.phases(coll, dims, chunk, len(ranks))
        return C.pipeline_ns(phases, chunks, self.system.active_chunks)

    def collective_finish_ns(self, comm_type: int, size: int, ranks: Sequence[int],
                             involved_dim: Sequence[bool] | None, arrivals_ns: Sequence[int]) -> list[int]:
        """Each member's finish when member k (of sorted `ranks`) issued the collective at
        `arrivals_ns[k]`: ASTRA-sim's staggered collective, where a rank that arrives early goes
        through its phases as its peers' messages come in and may also leave early. Equal
        arrivals give `arrival + collective_ns` for everyone."""
        involved_dim = self.spanned(comm_type, ranks, involved_dim)
        last = max(arrivals_ns)
        tree = self._has_trees and len(ranks) > 1 and self.planner.uses_tree(comm_type, ranks, involved_dim)
        local = len(ranks) > 1 and self.planner.local_ring(collective_of(comm_type)[0], tuple(ranks))
        if (min(arrivals_ns) == last and not tree and not local) or len(ranks) <= 1 or self.scales.comm != 1.0:
            return [last + self.collective_ns(comm_type, size, ranks, involved_dim)] * len(ranks)
        involved = tuple(involved_dim) if involved_dim else None
        turn = self._tree_turn(comm_type, size, tuple(ranks), involved) if tree else None
        key = (comm_type, size, tuple(ranks), involved, tuple(t - last for t in arrivals_ns),
               tuple(sorted((d, k % 2) for d, k in turn.items())) if turn else None)
        offsets = self._coll_cache.get(key)
        if offsets is None:
            offsets = self._coll_cache[key] = self._staggered(comm_type, size, *key[2:5], turn)
        return [last + o for o in offsets]

    def _tree_turn(self, comm_type: int, size: int, ranks: tuple[int, ...],
                   involved: tuple[bool, ...] | None) -> dict[int, int]:
        """Per dimension, the tree phases the group ran there before this collective: its next
        tree phase on d takes the RootMax tree where that count is even. ASTRA-sim keeps one
        counter per dimension of a collective type's logical topology, which every phase
        created on that dimension advances (a localBWAware all-reduce's reduce-scatter and
        all-gather phases, both on an inner dimension, take the two trees in turn), from one
        collective to the next."""
        coll, div = collective_of(comm_type)
        planner = self.planner
        dims = planner.group_dims(ranks, involved)
        chunks = planner.chunking(size // len(ranks) if div == 0 else size, coll)[1] if dims else 0
        turn = {}
        for _, d, _ in planner.phase_plan(coll, dims) if chunks else ():
            if d not in turn:
                turn[d] = self._tree_streams.get((coll, ranks, d), 0)
            self._tree_streams[(coll, ranks, d)] = self._tree_streams.get((coll, ranks, d), 0) + chunks
        return turn

    def _staggered(self, comm_type: int, size: int, ranks: tuple[int, ...],
                   involved: tuple[bool, ...] | None, starts: tuple[int, ...],
                   turn: dict[int, int] | None = None) -> list[int]:
        coll, div = collective_of(comm_type)
        if div == 0:
            size //= len(ranks)
        planner = self.planner
        local = planner.local_ring(coll, ranks)
        dims = [(0, len(ranks))] if local else planner.group_dims(ranks, involved)
        chunk, chunks = planner.chunking(size, coll) if dims else (0, 0)
        if chunks == 0:
            return list(starts)
        if local:  # one ring of the members, in one phase, on dimension 0's queue
            rings, plan = {0: [list(range(len(ranks)))]}, [(coll, 0, len(ranks))]
        else:
            rings = {d: planner.rings(ranks, d, len(dims) == 1 and n == len(ranks)) for d, n in dims}
            plan = planner.phase_plan(coll, dims)
        link = planner.pair_link(ranks) if local else None
        # the tree counter of each phase's dimension for chunk 0; each chunk adds its phases there
        per_chunk = {d: sum(1 for _, e, _ in plan if e == d) for d, _ in dims}
        tree_at = [(turn or {}).get(d, 0) + sum(1 for _, e, _ in plan[:p] if e == d)
                   for p, (_, d, _) in enumerate(plan)]
        active = self.system.active_chunks
        slots = [{d: [t] * active for d, _ in dims} for t in starts]
        ends = list(starts)
        # each chunk's phases in the order they are reached (C.pipeline_ns, per member)
        pending = [(max(starts), c, 0, list(starts), chunk) for c in range(chunks)]
        while pending:
            _, c, p, at, data = heapq.heappop(pending)
            kind, d, n = plan[p]
            for k in range(len(ranks)):
                at[k] = max(at[k], heapq.heappop(slots[k][d]))
            data = self._staggered_phase(kind, d, n, data, rings[d], at, planner.runs_reversed(coll, kind),
                                         tree_at[p] + c * per_chunk[d], coll, len(ranks), link)
            for k in range(len(ranks)):
                heapq.heappush(slots[k][d], at[k])
            if p + 1 < len(plan):
                heapq.heappush(pending, (max(at), c, p + 1, at, data))
            else:
                ends = [max(e, t) for e, t in zip(ends, at)]
        return ends

    def _staggered_phase(self, coll: str, d: int, n: int, data: int, rings: list[list[int]],
                         at: list[int], reverse: bool = False, tree: int = 0, parent: str | None = None,
                         members: int | None = None, link=None) -> int:
        """Advance `at` (per member) through one phase `coll` of a `parent` collective (by default
        the phase's own) of `members` ranks on dimension `d`; returns the data leaving it. `tree`:
        the dimension's tree counter at this phase (a double binary tree takes RootMax where it is
        even)."""
        parent = parent or coll
        planner = self.planner
        tree_phase = planner.tree_phase(parent, d, n, members)
        ctx = planner.context(d, group_ring=link is not None and not tree_phase)
        if tree_phase:
            for ring in rings:
                ends = S.dbt_staggered([at[k] for k in ring], data, ctx, root_max=tree % 2 == 0)
                for k, t in zip(ring, ends):
                    at[k] = t
            return data
        algo = planner.algorithm(parent, d, members)
        step_fn = None if ctx.dim.in_network_offload else S.steps_fn(coll, algo)
        if step_fn is None:  # no step model: the ring's members start together, at the last
            ns, out = planner.phase(coll, d, n, data, parent, members)
            for ring in rings:
                end = max(at[k] for k in ring) + ns
                for k in ring:
                    at[k] = end
            return out
        steps, out = step_fn(n, data, ctx)
        if link is not None:
            steps = S.on_group_ring(coll, algo, n, steps, ctx)
        for ring in rings:
            ring = ring[::-1] if reverse else ring
            pair = None if link is None else (lambda j, i, m, ring=ring: link(ring[j], ring[i], m))
            for k, t in zip(ring, S.staggered_phase([at[k] for k in ring], steps, ctx, pair)):
                at[k] = t
        return out

    # -- the plan -------------------------------------------------------------------------------
    @property
    def planner(self) -> CollectivePlanner:
        """How a collective is laid over this backend's network and system; made anew where
        either was assigned after construction, so the plan always reads the configs in use."""
        if self._planner.network is not self.network or self._planner.system is not self.system:
            self._planner = CollectivePlanner(self.network, self.system)
        return self._planner

    def chunking(self, size: int, collective: str) -> tuple[int, int]:
        """(chunk bytes, chunk count) as ASTRA-sim's Sys cuts a collective."""
        return self.planner.chunking(size, collective)

    def group_dims(self, ranks: Sequence[int], involved: Sequence[bool] | None) -> list[tuple[int, int]]:
        """[(dimension, NPUs of the group along it)] for the dimensions the group spans
        (`CollectivePlanner.group_dims`)."""
        return self.planner.group_dims(ranks, involved)

    def phase_plan(self, coll: str, dims: list[tuple[int, int]]) -> list[tuple[str, int, int]]:
        """[(collective, dimension, NPUs)] of one chunk, in the order ASTRA-sim's
        Sys::generate_collective builds them."""
        return self.planner.phase_plan(coll, dims)

    def phases(self, coll: str, dims: list[tuple[int, int]], chunk: int,
               members: int | None = None) -> list[tuple[int, int]]:
        """[(queue, ns)] for one chunk of a collective of `members` ranks, in the order of `phase_plan`."""
        return self.planner.phases(coll, dims, chunk, members)

    @staticmethod
    def _scaled(ns: int, scale: float) -> int:
        return ns if scale == 1.0 else max(0, round(ns * scale))

    def describe(self) -> dict:
        return {"backend": "analytical", "network": self.network.describe(),
                "system": self.system.describe(), "memory": self.memory.describe(),
                "scales": vars(self.scales), "roofline": bool(self.roofline)}
