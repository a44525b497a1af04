"""Fidelity on real GPU runs: every host + device pair of ../shared/fixtures/external replayed by
the model and as captured, against the window the traces measured (docs/validation.md).

    python bench/bench_gpu_fidelity.py

Each pair is converted (`trace-convert pytorch --host H --device D`), then replayed three times:
with the default network model, `--as-captured`, and as the modelled baseline a what-if starts
from (`--as-captured --comm model`: the recorded host timeline and streams, communication priced
on the network of the machine the pair ran on, stated in `MACHINES` from public specifications
of the GPUs its Kineto trace names). The measured reference is what the converted rank
files carry (core/measured.py): the span of the host ops the host trace holds and of the device
work they launched, per rank, and across ranks on the traces' shared clock (the job window).
Goal: every pair within 5% as captured, mean at most 3%. No torch and no GPU needed.

    python bench/bench_gpu_fidelity.py --field DIR

also replays every Kineto trace in DIR (`*.json`, `*.json.gz`: public traces you fetched, such as
HolisticTraceAnalysis's tests/data; docs/validation.md lists the ones measured) on its own, as
captured, a rank of a larger job with its absent peers assumed (`--absent-peers assume`).
"""

from __future__ import annotations

import argparse
import atexit
import gzip
import json
import shutil
import sys
import tarfile
import tempfile
from dataclasses import replace
from pathlib import Path

from chakra_tools.convert.run import convert, inputs_from_files
from chakra_tools.core.errors import ChakraToolsError
from chakra_tools.core.graph import find_rank_files
from chakra_tools.replay import AS_CAPTURED, AnalyticalBackend, CaptureModes, default_network, replay_rankset
from chakra_tools.replay.api import open_rankset, run_replay
from chakra_tools.replay.config import Dim, NetworkConfig
from chakra_tools.replay.fidelity import compare_with_trace, measured_of

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "external"
PAIRS = {  # name -> (host traces, device traces), paths under SHARED; archives are unpacked
    "dlrm (8x V100, NCCL)": ("param/dlrm_8rank_host_et.tar.gz", "param/dlrm_8rank_kineto.tar.gz"),
    "resnet (1x 2080 Ti)": ("param/resnet_1gpu_host_et.json.gz", "param/resnet_1gpu_kineto.json.gz"),
    "linear (1x 2080 Ti)": ("param/linear_1gpu_host_et.json.gz", "param/linear_1gpu_kineto.json.gz"),
    "simple_add (1x A100)": ("hta/simple_add_host_et.json.gz", "hta/simple_add_kineto.json.gz"),
}

#: the modelled baseline: the capture's own timeline, its communication from the network model
MODELLED = replace(AS_CAPTURED, comm="model")
#: GPU (the start of the name the Kineto trace's deviceProperties give it) -> the network between
#: the GPUs of one such machine, from the vendor's specification: (what it is, topology, GB/s
#: each way per GPU (Switch) or per pair (FullyConnected), in 10^9 bytes, ns per hop). The DGX-1's
#: hybrid cube-mesh joins each V100 to 4 of the other 7 (NVLink2, 6 links of 25 GB/s): one switch
#: is its upper bound. 700 ns a hop for NVLink and Infinity Fabric, as for an NVSwitch; 1 us
#: through PCIe.
MACHINES = {
    "Tesla V100-SXM2": ("V100 SXM2, NVLink2 as one switch: 150 GB/s", "Switch", 150.0, 700.0),
    "NVIDIA A100-SXM4": ("A100 SXM4, NVSwitch: 300 GB/s", "Switch", 300.0, 700.0),
    "NVIDIA A100-PG509": ("A100 (PG509, SXM4), NVSwitch: 300 GB/s", "Switch", 300.0, 700.0),
    "NVIDIA H100 80GB HBM3": ("H100 SXM5, NVSwitch: 450 GB/s", "Switch", 450.0, 700.0),
    "NVIDIA B200": ("B200, NVSwitch: 900 GB/s", "Switch", 900.0, 700.0),
    "AMD Instinct MI300X": ("MI300X, Infinity Fabric mesh: 64 GB/s a pair", "FullyConnected", 64.0, 700.0),
    "NVIDIA GeForce RTX 2080 Ti": ("RTX 2080 Ti, PCIe 3.0 x16: 16 GB/s", "Switch", 16.0, 1000.0),
}
#: vendors' GB are 10^9 bytes, ASTRA-sim's network files' 2^30 (config.Dim.bytes_per_ns)
_GIB = 1e9 / (1 << 30)


def machine_network(device_trace: str, npus: int | None = None) -> tuple[str, NetworkConfig] | None:
    """The network of the machine whose GPU `device_trace` names (`MACHINES`), for `npus` ranks
    (None: the world its `distributedInfo` records, else 1); None where the trace names no GPU
    the table knows or a job larger than one such machine (the modelled baseline is then not run)."""
    opener = gzip.open if device_trace.endswith(".gz") else open
    with opener(device_trace, "rt") as f:
        doc = json.load(f)
    props = doc.get("deviceProperties") or []
    name = props[0].get("name", "") if props else ""
    npus = npus or int((doc.get("distributedInfo") or {}).get("world_size") or 1)
    if npus > 8:
        return None
    for gpu, (what, topology, gbps, latency_ns) in MACHINES.items():
        if name.startswith(gpu):
            return f"{npus} x {what}", NetworkConfig((Dim(topology, max(1, npus), gbps * _GIB, latency_ns),), what)
    return None


def files(rel: str, work: Path) -> list[str]:
    """The trace files of a fixture, one per rank in rank order (archives unpacked into work)."""
    path = SHARED / rel
    if not rel.endswith(".tar.gz"):
        return [str(path)]
    dest = work / path.name.split(".")[0]
    with tarfile.open(path) as t:
        t.extractall(dest, filter="data")
    found = sorted(p for p in dest.rglob("*.json") if not p.name.startswith("._"))
    rank = lambda p: int("".join(c for c in p.name.split("_step")[0] if c.isdigit()) or 0)  # noqa: E731
    return [str(p) for p in sorted(found, key=rank)]


def measure(host: str, device: str, work: Path) -> dict:
    """The pair's measured job window and what each replay predicts of it (ns): `default`,
    `captured`, `modelled` (None without a known machine), the machine's network (`network`)."""
    out = work / Path(host).name.split(".")[0]
    devices = files(device, work)
    convert(inputs_from_files(files(host, work), devices, []), out, executor="serial")
    ranks = len(find_rank_files(out))
    machine = machine_network(devices[0], ranks)
    runs = {"default": (CaptureModes(), default_network(ranks)), "captured": (AS_CAPTURED, default_network(ranks))}
    if machine is not None:
        runs["modelled"] = (MODELLED, machine[1])
    figures: dict = {"modelled": None, "network": machine[0] if machine else "no known machine"}
    for name, (modes, network) in runs.items():
        feeders, groups = open_rankset(out)
        doc = run_replay(out, feeders, AnalyticalBackend(network), groups=groups, modes=modes).to_dict()
        job = compare_with_trace(doc, measured_of(feeders))["job"]
        figures["measured"], figures[name] = job["measured_ns"], job["predicted_ns"]
    return figures


def field(folder: Path, work: Path) -> None:
    """Each device trace in `folder` converted on its own and replayed as captured: the error over
    its whole window and, where it records two or more ProfilerSteps, over the steps alone (first
    step's start to the last one's)."""
    print(f"\n{'device trace (' + str(folder) + ')':<64} {'measured':>12} {'as captured':>20} {'steps':>8} "
          f"{'modelled baseline':>20}")
    errors, modelled = [], []
    for path in sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz"))):
        out = work / "field" / path.name.split(".")[0]
        try:
            convert(inputs_from_files([], [str(path)], []), out, executor="serial")
            result = replay_rankset(out, modes=AS_CAPTURED, absent_peers=True, validate=False,
                                    on_warning=lambda d: None)
            job = (result.fidelity or {}).get("job")
            steps = (result.fidelity or {}).get("steps")
            machine = machine_network(str(path))
            base = None
            if machine is not None and job and job.get("measured_ns"):
                feeders, groups = open_rankset(out)
                doc = run_replay(out, feeders, AnalyticalBackend(machine[1]), groups=groups, modes=MODELLED,
                                 absent_peers=True).to_dict()
                base = compare_with_trace(doc, measured_of(feeders))["job"]
        except ChakraToolsError as e:
            print(f"{path.name[:64]:<64} not replayed: {str(e).splitlines()[0][:90]}")
            continue
        if not job or not job.get("measured_ns"):
            print(f"{path.name[:64]:<64} no measured window (no host op with a time)")
            continue
        errors.append(job["error"])
        if base is not None:
            modelled.append(base["error"])
        print(f"{path.name[:64]:<64} {job['measured_ns'] / 1e6:>10.2f}ms {job['predicted_ns'] / 1e6:>11.2f}ms "
              f"{job['error'] * 100:>+7.1f}% " + (f"{steps['error'] * 100:>+7.1f}%" if steps else f"{'':>8}")
              + (f" {base['predicted_ns'] / 1e6:>11.2f}ms {base['error'] * 100:>+6.1f}%  {machine[0]}"
                 if base is not None else ""), flush=True)
    if errors:
        within = sum(abs(e) <= 0.05 for e in errors)
        print(f"{within} of {len(errors)} within 5%; median |error| "
              f"{sorted(abs(e) for e in errors)[len(errors) // 2] * 100:.1f}%")
    if modelled:
        print(f"modelled baseline on the machine's network: {sum(abs(e) <= 0.1 for e in modelled)} of "
              f"{len(modelled)} within 10% (one-machine jobs whose GPU MACHINES knows)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="(accepted for make bench; same run)")
    parser.add_argument("--field", type=Path, help="also every Kineto trace in this folder, each on its own")
    args = parser.parse_args()
    if not SHARED.is_dir():
        print(f"skipped: {SHARED} not found")
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-gpu-fidelity-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)  # gigabytes per run otherwise
    print(f"{'pair':<24} {'measured':>12} {'default':>20} {'as captured':>20} {'modelled baseline':>20}  network")
    errors, modelled = [], []
    for name, (host, device) in PAIRS.items():
        fig = measure(host, device, work)
        measured = fig["measured"]
        error = (fig["captured"] - measured) / measured
        errors.append(error)
        cell = lambda p: f"{p / 1e6:>11.2f}ms {(p - measured) / measured * 100:>+6.1f}%"  # noqa: E731
        if fig["modelled"] is not None:
            modelled.append((fig["modelled"] - measured) / measured)
        print(f"{name:<24} {measured / 1e6:>10.2f}ms {cell(fig['default'])} {cell(fig['captured'])} "
              f"{cell(fig['modelled']) if fig['modelled'] is not None else '':>20}  {fig['network']}", flush=True)
    mean = sum(abs(e) for e in errors) / len(errors)
    worst = max(errors, key=abs)
    print(f"mean |job error| as captured: {mean * 100:.1f}% over {len(errors)} GPU pairs "
          f"(goal <= 3%, each <= 5%; worst {worst * 100:+.1f}%)")
    if modelled:
        print(f"modelled baseline on the machine's network: worst {max(modelled, key=abs) * 100:+.1f}% over "
              f"{len(modelled)} pairs (goal: within 10%)")
    if args.field:
        field(args.field, work)
    return 0 if abs(worst) <= 0.05 and mean <= 0.03 else 1


if __name__ == "__main__":
    sys.exit(main())
