"""The system being simulated: ASTRA-sim's analytical network YAML, system JSON and memory JSON.

The files are ASTRA-sim's own (REFERENCE §4), so one set of configs drives both simulators:

- network YAML, one entry per dimension, innermost first: `topology` (Ring | FullyConnected |
  Switch), `npus_count`, `bandwidth` (GB/s, where ASTRA-sim's analytical network takes 1 GB as
  2**30 bytes), `latency` (ns per hop). Our extension: `in_network_offload: [bool per dim]`, a
  switch that reduces in the network (SHARP-like) on that dimension.
- system JSON: `*-implementation` (per-dimension collective algorithms: ring, direct,
  halvingDoubling, doubleBinaryTree, and their one* variants), `preferred-dataset-splits` (chunks
  per collective), `active-chunks-per-dimension`, `endpoint-delay` (ns), `collective-optimization`
  (baseline | localBWAware), `local-mem-bw` (GB/s), `peak-perf` (TFLOP/s), `roofline-enabled`.
- memory JSON: `memory-type` (NO_MEMORY_EXPANSION | PER_NODE_MEMORY_EXPANSION |
  PER_NPU_MEMORY_EXPANSION | MEMORY_POOL), `remote-mem-latency` (ns), `remote-mem-bw` (GB/s),
  `num-nodes`, `num-npus-per-node`.

Unknown keys are kept in `extra` and ignored; missing keys take ASTRA-sim's defaults, except
`preferred-dataset-splits`, which ASTRA-sim leaves at 0 (a division by zero) and we take as 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any

from chakra_tools.core.errors import InputError
from chakra_tools.core.files import read_json, read_yaml_mapping

TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
ALGORITHMS = ("ring", "direct", "halvingDoubling", "doubleBinaryTree")
MEMORY_TYPES = ("NO_MEMORY_EXPANSION", "PER_NODE_MEMORY_EXPANSION", "PER_NPU_MEMORY_EXPANSION",
                "MEMORY_POOL")


@dataclass(frozen=True)
class Dim:
    """One network dimension."""

    topology: str
    npus: int
    bandwidth_gbps: float
    latency_ns: float
    in_network_offload: bool = False

    @property
    def bytes_per_ns(self) -> float:
        """ASTRA-sim's analytical network reads GB/s with 1 GB = 2**30 bytes."""
        return self.bandwidth_gbps * (1 << 30) / 1e9


@dataclass(frozen=True)
class NetworkConfig:
    dims: tuple[Dim, ...]
    source: str | None = None

    @property
    def npus(self) -> int:
        return prod(d.npus for d in self.dims)

    def address(self, rank: int) -> tuple[int, ...]:
        """Per-dimension coordinates of an NPU, dimension 0 innermost (ASTRA-sim's order)."""
        out = []
        for d in self.dims:
            out.append(rank % d.npus)
            rank //= d.npus
        return tuple(out)

    def describe(self) -> dict:
        return {"source": self.source, "npus": self.npus,
                "dims": [{"topology": d.topology, "npus": d.npus, "bandwidth_gbps": d.bandwidth_gbps,
                          "latency_ns": d.latency_ns, "in_network_offload": d.in_network_offload}
                         for d in self.dims]}


@dataclass(frozen=True)
class SystemConfig:
    implementations: dict[str, tuple[str, ...]] = field(default_factory=lambda: {
        k: ("ring",) for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")})
    splits: int = 1
    active_chunks: int = 1
    endpoint_delay_ns: int = 10
    collective_optimization: str = "baseline"
    local_mem_bw_gbps: float = 0.0
    peak_perf_tflops: float = 0.0
    roofline: bool = False
    source: str | None = None
    extra: dict = field(default_factory=dict)

    def algorithm(self, collective: str, dim: int) -> str:
        """The algorithm of `collective` ("all-reduce", ...) on dimension `dim` (last entry repeats)."""
        algos = self.implementations.get(collective) or ("ring",)
        return _canonical_algorithm(algos[min(dim, len(algos) - 1)])

    def describe(self) -> dict:
        return {"source": self.source, "implementations": {k: list(v) for k, v in self.implementations.items()},
                "preferred_dataset_splits": self.splits, "active_chunks_per_dimension": self.active_chunks,
                "endpoint_delay_ns": self.endpoint_delay_ns,
                "collective_optimization": self.collective_optimization,
                "local_mem_bw_gbps": self.local_mem_bw_gbps, "peak_perf_tflops": self.peak_perf_tflops,
                "roofline": self.roofline}


@dataclass(frozen=True)
class MemoryConfig:
    memory_type: str = "NO_MEMORY_EXPANSION"
    latency_ns: float = 0.0
    bandwidth_gbps: float = 0.0
    num_nodes: int = 1
    npus_per_node: int = 1
    source: str | None = None

    def describe(self) -> dict:
        return {"source": self.source, "memory_type": self.memory_type, "latency_ns": self.latency_ns,
                "bandwidth_gbps": self.bandwidth_gbps, "num_nodes": self.num_nodes,
                "npus_per_node": self.npus_per_node}


def _canonical_algorithm(name: str) -> str:
    """ASTRA-sim's spellings -> ours: oneRing -> ring, direct8 -> direct, ..."""
    base = name[3].lower() + name[4:] if name.startswith("one") and len(name) > 3 else name
    base = "direct" if base.startswith("direct") else base
    if base not in ALGORITHMS:
        raise InputError(f"unknown collective implementation {name!r}; known: "
                         + ", ".join(ALGORITHMS) + " (and their one* variants)")
    return base


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------

def _as_list(v: Any, n: int | None = None) -> list:
    items = v if isinstance(v, list) else [v]
    return items * n if n and len(items) == 1 and n > 1 else items


def network_from_dict(doc: dict, source: str | None = None) -> NetworkConfig:
    """Build a `NetworkConfig` from the YAML's mapping; raises InputError naming the bad key."""
    where = source or "network config"
    try:
        topo = _as_list(doc["topology"])
        n = len(topo)
        npus = [int(x) for x in _as_list(doc["npus_count"], n)]
        bw = [float(x) for x in _as_list(doc["bandwidth"], n)]
        lat = [float(x) for x in _as_list(doc["latency"], n)]
    except KeyError as e:
        raise InputError(f"{where}: missing key {e.args[0]!r} (need topology, npus_count, "
                         "bandwidth, latency)") from None
    except (TypeError, ValueError) as e:
        raise InputError(f"{where}: {e}") from None
    offload = [bool(x) for x in _as_list(doc.get("in_network_offload", False), n)]
    if not (len(npus) == len(bw) == len(lat) == len(offload) == n):
        raise InputError(f"{where}: topology, npus_count, bandwidth and latency need one entry per dimension")
    for t in topo:
        if t not in TOPOLOGIES:
            raise InputError(f"{where}: unknown topology {t!r}; known: {', '.join(TOPOLOGIES)}")
    dims = tuple(Dim(t, k, b, l, o) for t, k, b, l, o in zip(topo, npus, bw, lat, offload))
    for i, d in enumerate(dims):
        if d.npus < 1 or d.bandwidth_gbps <= 0 or d.latency_ns < 0:
            raise InputError(f"{where}: dimension {i}: npus_count >= 1, bandwidth > 0, latency >= 0")
        if d.in_network_offload and d.topology != "Switch":
            raise InputError(f"{where}: dimension {i}: in_network_offload needs a Switch")
    return NetworkConfig(dims, source)


def load_network(path: str | Path) -> NetworkConfig:
    doc = read_yaml_mapping(path, what="a mapping with topology, npus_count, bandwidth, latency")
    return network_from_dict(doc, str(path))


def default_network(npus: int) -> NetworkConfig:
    """One Switch dimension of `npus` NPUs, 50 GB/s, 500 ns: what we assume without --network."""
    return NetworkConfig((Dim("Switch", max(1, npus), 50.0, 500.0),), "default")


KNOWN_SYSTEM_KEYS = {"scheduling-policy", "endpoint-delay", "active-chunks-per-dimension",
                     "preferred-dataset-splits", "all-reduce-implementation",
                     "all-gather-implementation", "reduce-scatter-implementation",
                     "all-to-all-implementation", "collective-optimization", "local-mem-bw",
                     "boost-mode", "roofline-enabled", "peak-perf"}


def system_from_dict(doc: dict, source: str | None = None) -> SystemConfig:
    impls = {}
    for coll in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        v = doc.get(f"{coll}-implementation", ["ring"])
        impls[coll] = tuple(_as_list(v))
        for a in impls[coll]:
            _canonical_algorithm(str(a))
    opt = doc.get("collective-optimization", "baseline")
    if opt not in ("baseline", "localBWAware"):
        raise InputError(f"{source or 'system config'}: collective-optimization must be baseline or localBWAware")
    return SystemConfig(
        implementations=impls,
        splits=max(1, int(doc.get("preferred-dataset-splits", 1) or 1)),
        active_chunks=max(1, int(doc.get("active-chunks-per-dimension", 1))),
        endpoint_delay_ns=int(doc.get("endpoint-delay", 10)),
        collective_optimization=opt,
        local_mem_bw_gbps=float(doc.get("local-mem-bw", 0) or 0),
        peak_perf_tflops=float(doc.get("peak-perf", 0) or 0),
        roofline=bool(doc.get("roofline-enabled", 0)),
        source=source,
        extra={k: v for k, v in doc.items() if k not in KNOWN_SYSTEM_KEYS},
    )


def load_system(path: str | Path) -> SystemConfig:
    return system_from_dict(read_json(path), str(path))


def memory_from_dict(doc: dict, source: str | None = None) -> MemoryConfig:
    mtype = doc.get("memory-type", "NO_MEMORY_EXPANSION")
    if mtype not in MEMORY_TYPES:
        raise InputError(f"{source or 'memory config'}: unknown memory-type {mtype!r}; known: "
                         + ", ".join(MEMORY_TYPES))
    bw = float(doc.get("remote-mem-bw", 0) or 0)
    if mtype != "NO_MEMORY_EXPANSION" and bw <= 0:
        raise InputError(f"{source or 'memory config'}: remote-mem-bw must be positive for {mtype}")
    return MemoryConfig(mtype, float(doc.get("remote-mem-latency", 0) or 0), bw,
                        max(1, int(doc.get("num-nodes", 1) or 1)),
                        max(1, int(doc.get("num-npus-per-node", 1) or 1)), source)


def load_memory(path: str | Path) -> MemoryConfig:
    return memory_from_dict(read_json(path), str(path))
