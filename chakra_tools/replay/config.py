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
  `num-nodes`, `num-npus-per-node`. ASTRA-sim stores the remote memory's latency and bandwidth
  as integers (12.5 GB/s is 12): so do we, unless asked for the exact values.

Unknown keys are kept in `extra` and ignored; missing keys take ASTRA-sim's defaults, except
`preferred-dataset-splits`, which ASTRA-sim leaves at 0 (a division by zero) and we take as 1.
"""

from __future__ import annotations

import re
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
    #: collectives whose implementation list a system JSON wrote (`spanned_dims` follows it)
    listed: frozenset[str] = frozenset()

    def spanned_dims(self, collective: str, ndims: int) -> int:
        """How many of the network's `ndims` dimensions (the innermost) a collective over every
        NPU spans. ASTRA-sim builds its logical topology from the implementation list, one
        dimension per entry, so a list from a system JSON that is shorter than the network runs
        such a collective on the first dimensions only (Ring_4chunks.json's one entry on a 2-D
        network: each ring of dimension 0 reduces alone). Our built-in default spans them all."""
        if collective not in self.listed:
            return ndims
        return min(ndims, len(self.implementations.get(collective) or ()) or ndims)

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


#: the ranges a value may take where it enters: wide enough for any real system, narrow enough
#: that the replayer's integer nanoseconds and per-chunk loops stay finite
MAX_NS = 10**12  # 1,000 s: a latency or delay
MAX_RATE = 10**9  # GB/s or TFLOP/s
MIN_BANDWIDTH = 1e-3  # GB/s (1 MB/s)
MAX_NPUS = 1 << 20  # per dimension, and in all
MAX_CHUNKS = 1024  # preferred-dataset-splits, active-chunks-per-dimension


#: a number written as text: PyYAML reads `1e3` (no dot) as a string, ASTRA-sim's reader as 1000
_NUMBER_TEXT = re.compile(r"\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*")


def _int(v: Any, where: str, key: str, lo: int, hi: int) -> int:
    """An integer (an integral float too, as YAML and JSON writers give them) in [lo, hi]."""
    if isinstance(v, str) and _NUMBER_TEXT.fullmatch(v):
        v = float(v) if any(c in v for c in ".eE") else int(v)
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**63:
        v = int(v)
    if type(v) is not int:
        raise InputError(f"{where}: {key} is {_show(v)}, not an integer")
    if not lo <= v <= hi:
        raise InputError(f"{where}: {key} is {v}, outside {lo}..{hi}")
    return v


def _num(v: Any, where: str, key: str, lo: float, hi: float) -> float:
    """A finite number in [lo, hi] (booleans are not numbers here)."""
    if isinstance(v, str) and _NUMBER_TEXT.fullmatch(v):
        v = float(v)
    if type(v) not in (int, float):
        raise InputError(f"{where}: {key} is {_show(v)}, not a number")
    if not lo <= v <= hi:  # NaN fails both comparisons
        raise InputError(f"{where}: {key} is {v}, outside {lo:g}..{hi:g}")
    return float(v)


def _rate(v: Any, where: str, key: str) -> float:
    """A bandwidth or a peak: 0 (not given) or a finite number from MIN_BANDWIDTH to MAX_RATE
    (a rate of 5e-324 would make every duration infinite)."""
    r = _num(v, where, key, 0, MAX_RATE)
    if 0 < r < MIN_BANDWIDTH:
        raise InputError(f"{where}: {key} is {r:g}: give 0 (none) or at least {MIN_BANDWIDTH:g}")
    return r


def _flag(v: Any, where: str, key: str) -> bool:
    if v in (0, 1) and type(v) in (bool, int):
        return bool(v)
    raise InputError(f"{where}: {key} is {_show(v)}, not true/false or 0/1")


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def network_from_dict(doc: dict, source: str | None = None) -> NetworkConfig:
    """Build a `NetworkConfig` from the YAML's mapping; raises InputError naming the bad key.

    >>> network_from_dict({"topology": ["Ring"], "npus_count": [4], "bandwidth": [50], "latency": [500]}).npus
    4
    >>> network_from_dict({"topology": ["Ring"], "npus_count": ["four"], "bandwidth": [50], "latency": [500]}, "n.yml")
    Traceback (most recent call last):
    chakra_tools.core.errors.InputError: n.yml: npus_count[0] is 'four', not an integer
    """
    where = source or "network config"
    missing = [k for k in ("topology", "npus_count", "bandwidth", "latency") if k not in doc]
    if missing:
        raise InputError(f"{where}: missing key {missing[0]!r} (need topology, npus_count, "
                         "bandwidth, latency)")
    topo = _as_list(doc["topology"])
    n = len(topo)
    columns = {k: _as_list(doc[k], n) for k in ("npus_count", "bandwidth", "latency")}
    columns["in_network_offload"] = _as_list(doc.get("in_network_offload", False), n)
    if n == 0 or any(len(c) != n for c in columns.values()):
        raise InputError(f"{where}: topology, npus_count, bandwidth and latency need one entry per dimension")
    dims = []
    for i, t in enumerate(topo):
        if not isinstance(t, str) or t not in TOPOLOGIES:
            raise InputError(f"{where}: topology[{i}]: unknown topology {_show(t)}; known: {', '.join(TOPOLOGIES)}")
        d = Dim(t, _int(columns["npus_count"][i], where, f"npus_count[{i}]", 1, MAX_NPUS),
                _num(columns["bandwidth"][i], where, f"bandwidth[{i}]", MIN_BANDWIDTH, MAX_RATE),
                _num(columns["latency"][i], where, f"latency[{i}]", 0, MAX_NS),
                _flag(columns["in_network_offload"][i], where, f"in_network_offload[{i}]"))
        if d.in_network_offload and d.topology != "Switch":
            raise InputError(f"{where}: dimension {i}: in_network_offload needs a Switch")
        dims.append(d)
    net = NetworkConfig(tuple(dims), source)
    if net.npus > MAX_NPUS:
        raise InputError(f"{where}: {net.npus} NPUs in all, more than {MAX_NPUS}")
    return net


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
    """Build a `SystemConfig` from the JSON object; raises InputError naming the file and key.

    >>> system_from_dict({"preferred-dataset-splits": "four"}, "s.json")
    Traceback (most recent call last):
    chakra_tools.core.errors.InputError: s.json: preferred-dataset-splits is 'four', not an integer
    """
    where = source or "system config"
    impls, listed = {}, set()
    for coll in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        key = f"{coll}-implementation"
        names = _as_list(doc.get(key, ["ring"]))
        if not names:
            raise InputError(f"{where}: {key} is empty: name an algorithm per dimension")
        for i, a in enumerate(names):
            if not isinstance(a, str):
                raise InputError(f"{where}: {key}[{i}] is {_show(a)}, not an algorithm name")
            try:
                _canonical_algorithm(a)
            except InputError as e:
                raise e.add_context(f"{where}: {key}[{i}]") from None
        impls[coll] = tuple(names)
        if key in doc:
            listed.add(coll)
    opt = doc.get("collective-optimization", "baseline")
    if opt not in ("baseline", "localBWAware"):
        raise InputError(f"{where}: collective-optimization is {_show(opt)}, not baseline or localBWAware")
    splits = doc.get("preferred-dataset-splits", 1)
    return SystemConfig(
        implementations=impls,
        splits=max(1, _int(splits, where, "preferred-dataset-splits", 0, MAX_CHUNKS) if splits is not None else 1),
        active_chunks=max(1, _int(doc.get("active-chunks-per-dimension", 1), where, "active-chunks-per-dimension",
                                  0, MAX_CHUNKS)),
        endpoint_delay_ns=_int(doc.get("endpoint-delay", 10), where, "endpoint-delay", 0, MAX_NS),
        collective_optimization=opt,
        local_mem_bw_gbps=_rate(doc.get("local-mem-bw", 0) or 0, where, "local-mem-bw"),
        peak_perf_tflops=_rate(doc.get("peak-perf", 0) or 0, where, "peak-perf"),
        roofline=_flag(doc.get("roofline-enabled", 0), where, "roofline-enabled"),
        source=source,
        extra={k: v for k, v in doc.items() if k not in KNOWN_SYSTEM_KEYS},
        listed=frozenset(listed),
    )


def load_system(path: str | Path) -> SystemConfig:
    return system_from_dict(read_json(path), str(path))


def memory_from_dict(doc: dict, source: str | None = None, *, exact: bool = False) -> MemoryConfig:
    """Build a `MemoryConfig` from the JSON object; raises InputError naming the file and key.

    ASTRA-sim keeps `remote-mem-latency` and `remote-mem-bw` in integers (uint64_t), so 12.5 GB/s
    is 12 GB/s and 500.7 ns is 500 ns there; so here, unless `exact`:

    >>> memory_from_dict({"memory-type": "MEMORY_POOL", "remote-mem-bw": 12.5, "remote-mem-latency": 500.7}).bandwidth_gbps
    12.0
    >>> memory_from_dict({"memory-type": "MEMORY_POOL", "remote-mem-bw": 12.5}, exact=True).bandwidth_gbps
    12.5
    """
    where = source or "memory config"
    mtype = doc.get("memory-type", "NO_MEMORY_EXPANSION")
    if not isinstance(mtype, str) or mtype not in MEMORY_TYPES:
        raise InputError(f"{where}: unknown memory-type {_show(mtype)}; known: " + ", ".join(MEMORY_TYPES))
    bw = _rate(doc.get("remote-mem-bw", 0) or 0, where, "remote-mem-bw")
    latency = _num(doc.get("remote-mem-latency", 0) or 0, where, "remote-mem-latency", 0, MAX_NS)
    if not exact:
        bw, latency = float(int(bw)), float(int(latency))
    if mtype != "NO_MEMORY_EXPANSION" and bw < MIN_BANDWIDTH:
        hint = "" if exact else " (ASTRA-sim keeps it as a whole number of GB/s)"
        raise InputError(f"{where}: remote-mem-bw must be at least {1 if not exact else MIN_BANDWIDTH:g} "
                         f"GB/s for {mtype}{hint}")
    return MemoryConfig(mtype, latency, bw,
                        max(1, _int(doc.get("num-nodes", 1) or 1, where, "num-nodes", 0, MAX_NPUS)),
                        max(1, _int(doc.get("num-npus-per-node", 1) or 1, where, "num-npus-per-node", 0, MAX_NPUS)),
                        source)


def load_memory(path: str | Path, *, exact: bool = False) -> MemoryConfig:
    """The memory JSON at `path`, its bandwidth and latency whole numbers as ASTRA-sim reads them
    unless `exact` (`memory_from_dict`)."""
    return memory_from_dict(read_json(path), str(path), exact=exact)
