"""The simulated system as `trace-replay`'s options name it, built into a backend for a rank set.

Three sources of a network, one at a time: an ASTRA-sim network file (`--network`; default one
Switch of every rank), a calibration's per-kind fit (`--network-fit` of a capture calibrated
alone), or the cluster a probe measured (`--network-fit` of a calibration with `--probe`), which
prices each collective with the algorithm its library ran (library.py). What-if changes to the
links (`--bandwidth`, `--latency`: links.py) apply to whichever it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from chakra_tools.core.errors import InputError

from .backend import AnalyticalBackend, Scales
from .config import (MemoryConfig, NetworkConfig, SystemConfig, default_network, load_memory, load_network,
                     load_system)
from .links import LinkChange, changed_network
from .netfit import Calibration, read_calibration


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

    def backend(self, npus: int, source: str = "the rank set"):
        """The backend for `npus` ranks (`source` names them in the error if the network is
        smaller): an AnalyticalBackend, or with `kind_fit` a netfit.KindPriced over one, or the
        probe's cluster (a library.LibraryBackend) where the calibration has one."""
        cal = self._calibration() if self.kind_fit is not None else None
        if cal is not None:
            net = with_offload(cal.fit.network(npus), self.offload)
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
        base = AnalyticalBackend(net, sysc, memory, self.scales, self.roofline)
        if cal is None:
            return base
        if cal.cluster is not None:
            return cal.cluster.backend(npus, base, self.links)
        return cal.kind_priced(npus, base)

    def _calibration(self) -> Calibration:
        if self.network is not None:
            raise InputError("--network-fit prices communication from the calibration: give it or --network, not both")
        cal = read_calibration(self.kind_fit)
        if not cal.per_kind and cal.cluster is None:
            raise InputError(f"{self.kind_fit}: its fit.json keeps no per-kind parameters (written before they "
                             "were kept): run trace-convert calibrate again")
        return cal


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
