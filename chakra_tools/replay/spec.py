"""The simulated system as `trace-replay`'s options name it, built into a backend for a rank set.

Three sources of a network, one at a time: an ASTRA-sim network file (`--network`; default one
Switch of every rank), a calibration's per-kind fit (`--network-fit` of a capture calibrated
alone), or the cluster a probe measured (`--network-fit` of a calibration with `--probe`), which
prices each collective with the algorithm its library ran (library.py). What-if changes to the
links (`--bandwidth`, `--latency`: links.py) apply to whichever it is.

`--network` also takes an InfraGraph document (infragraph.py): its devices and links are the
network, every message routed over them. `--network-model congestion-aware` queues the messages
that meet on a link (linknet.py, congestion.py), on an ASTRA-sim network file or an InfraGraph;
congestion-unaware (the default) prices each message as if its links were idle.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from chakra_tools.core.errors import InputError

from .backend import AnalyticalBackend, Scales
from .config import (Dim, MemoryConfig, NetworkConfig, SystemConfig, default_network, load_memory, load_network,
                     load_system)
from .links import LinkChange, changed_network
from .linknet import LinkNetwork, of_network

if TYPE_CHECKING:
    from .netfit import Calibration


@dataclass(frozen=True)
class SystemSpec:
    """ASTRA-sim config files (None: one Switch of every rank, 50 GB/s, 500 ns; ASTRA-sim's
    system defaults; no remote memory), in-network reduction on the `offload` dimensions (Switch
    only), overrides of peak compute and local memory bandwidth, what-if scales, the roofline
    switch (None: as the system JSON says), and what-if changes to the links."""

    network: str | Path | None = None
    system: str | Path | None = None
    memory: str | Path | None = None
    offload: tuple[int, ...] = ()
    peak_tflops: float | None = None
    mem_bw_gbps: float | None = None
    scales: Scales = field(default_factory=Scales)
    roofline: bool | None = None
    exact_memory: bool = False  # the memory JSON's bandwidth and latency as written, not as ASTRA-sim's integers
    #: a `trace-convert calibrate` folder or fit.json (`--network-fit`)
    kind_fit: str | Path | None = None
    #: --bandwidth / --latency changes, made to the network whichever it is
    links: tuple[LinkChange, ...] = ()
    #: --network-model: "congestion-unaware" (each message alone) or "congestion-aware"
    network_model: str = "congestion-unaware"

    def backend(self, npus: int, source: str = "the rank set"):
        """The backend for `npus` ranks (`source` names them in the error if the network is
        smaller): an AnalyticalBackend, or with `kind_fit` a netfit.KindPriced over one, or the
        probe's cluster (a library.LibraryBackend) where the calibration has one."""
        if self.network_model not in NETWORK_MODELS:
            raise InputError(f"--network-model {self.network_model!r}: use " + " or ".join(NETWORK_MODELS))
        cal = self._calibration() if self.kind_fit is not None else None
        graph = self._graph() if cal is None else None
        if cal is not None:
            net = with_offload(cal.fit.network(npus), self.offload)
        elif graph is not None:
            net = graph_dims(graph)
        else:
            net = with_offload(load_network(self.network) if self.network else default_network(npus), self.offload)
        if npus > net.npus:
            raise InputError(f"{source}: rank {npus - 1} but the network has only {net.npus} NPUs")
        if self.links and (cal is None or cal.cluster is None):
            if cal is not None:
                raise InputError(f"{self.kind_fit}: --bandwidth/--latency change a measured network: calibrate "
                                 "with --probe (docs/howto/what-if.md); a capture's one-size fit has no levels to change")
            net = changed_network(net, self.links)
        sysc = load_system(self.system) if self.system else cal.fit.system() if cal else SystemConfig()
        if self.peak_tflops is not None:
            sysc = replace(sysc, peak_perf_tflops=self.peak_tflops)
        if self.mem_bw_gbps is not None:
            sysc = replace(sysc, local_mem_bw_gbps=self.mem_bw_gbps)
        memory = load_memory(self.memory, exact=self.exact_memory) if self.memory else MemoryConfig()
        aware = self.network_model == "congestion-aware"
        if aware and cal is not None:
            raise InputError("--network-model congestion-aware runs on a network file or an InfraGraph "
                             "(--network), not on a --network-fit calibration")
        if graph is not None:
            graph.queues = aware
            links = graph
        else:
            links = of_network(net) if aware else None
        base = AnalyticalBackend(net, sysc, memory, self.scales, self.roofline, links=links)
        if cal is None:
            return base
        if cal.cluster is not None:
            return cal.cluster.backend(npus, base, self.links)
        return cal.kind_priced(npus, base)

    def network_is_graph(self) -> bool:
        """Whether `--network` names an InfraGraph (a job may use some of its NPUs, unlike an
        ASTRA-sim network file, whose every NPU runs a rank file)."""
        from .infragraph import is_infragraph

        return self.network is not None and is_infragraph(self.network)

    def _graph(self) -> LinkNetwork | None:
        """The InfraGraph `--network` names, as links (None: an ASTRA-sim network file or none)."""
        if self.network is None:
            return None
        from .infragraph import is_infragraph, read_infragraph, to_network

        if not is_infragraph(self.network):
            return None
        if self.links:
            raise InputError(f"{self.network}: --bandwidth/--latency change an ASTRA-sim network's dimensions or "
                             "a fitted cluster's levels; edit the InfraGraph's links instead")
        if self.offload:
            raise InputError(f"{self.network}: --offload names a dimension of an ASTRA-sim network file")
        return to_network(read_infragraph(self.network))

    def _calibration(self) -> Calibration:
        from .calfile import read_calibration  # (with the fit's modules: not on a plain replay's path)

        if self.network is not None:
            raise InputError("--network-fit prices communication from the calibration: give it or --network, not both")
        cal = read_calibration(self.kind_fit)
        if not cal.per_kind and cal.cluster is None:
            raise InputError(f"{self.kind_fit}: its fit.json keeps no per-kind parameters (written before they "
                             "were kept): run trace-convert calibrate again")
        return cal


#: --network-model choices, the default first
NETWORK_MODELS = ("congestion-unaware", "congestion-aware")


def graph_dims(graph: LinkNetwork) -> NetworkConfig:
    """The dimensions a collective over a graph's NPUs is planned on (its chunks and phases; its
    messages then take the graph's own routes): where the NPUs come in equal consecutive groups
    of one device instance each (InfraGraph's `dgx.3.xpu.5`: 8 GPUs of each DGX), two, the
    devices' NPUs within and the devices across, as ASTRA-sim's service derives a DGX cluster;
    else one dimension of every NPU. Each dimension's bandwidth and latency (the slowest link and
    the whole latency of the route between its first two members) price only phases that have no
    message-by-message model (in-network reduction), as the replay then says."""
    n = graph.npus
    devices = [".".join(graph.names[r].split(".")[:2]) for r in range(n)]
    runs = [1]
    for a, b in zip(devices, devices[1:]):
        if b == a:
            runs[-1] += 1
        else:
            runs.append(1)
    within = runs[0]
    if len(runs) > 1 and within > 1 and len(set(runs)) == 1 and len(set(devices)) == len(runs):
        return NetworkConfig((_dim(graph, _kind_within(graph, within), within, 0, 1),
                              _dim(graph, "Switch", len(runs), 0, within)), graph.source)
    return NetworkConfig((_dim(graph, "Switch", n, 0, 1 if n > 1 else 0),), graph.source)


def _kind_within(graph: LinkNetwork, k: int) -> str:
    """FullyConnected or Ring where a device's NPUs are linked directly so, else Switch."""
    direct = {(a, b) for (a, b) in graph.links if a < k and b < k}
    if len(direct) == k * (k - 1):
        return "FullyConnected"
    if k > 2 and len(direct) == 2 * k and all(sum(1 for a, _ in direct if a == i) == 2 for i in range(k)):
        return "Ring"
    return "Switch"


def _dim(graph: LinkNetwork, kind: str, npus: int, a: int, b: int) -> Dim:
    path = graph.path(a, b) if a != b else ()
    slowest = min((link.bytes_per_ns for link in path), default=1.0)
    hops = 2 if kind == "Switch" else 1
    return Dim(kind, npus, slowest * 1e9 / (1 << 30), sum(link.latency_ns for link in path) / hops)


def with_offload(net: NetworkConfig, dims: Sequence[int]) -> NetworkConfig:
    """`net` with in-network reduction on each of `dims` (each must be a Switch dimension)."""
    if not dims:
        return net
    new = list(net.dims)
    for d in dims:
        if not 0 <= d < len(new) or new[d].topology != "Switch":
            raise InputError(f"--offload {d}: dimension {d} is not a Switch dimension of the network")
        new[d] = replace(new[d], in_network_offload=True)
    return NetworkConfig(tuple(new), net.source)
