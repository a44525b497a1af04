"""Fidelity on real GPU runs: every host + device pair of ../shared/fixtures/external replayed by
the model and as captured, against the window the traces measured (docs/validation.md).

    python bench/bench_gpu_fidelity.py

Each pair is converted (`trace-convert pytorch --host H --device D`), then replayed twice: with
the default network model and `--as-captured`. The measured reference is what the converted rank
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
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from chakra_tools.convert.run import convert, inputs_from_files
from chakra_tools.core.errors import ChakraToolsError
from chakra_tools.replay import AS_CAPTURED, AnalyticalBackend, CaptureModes, default_network, replay_rankset
from chakra_tools.replay.api import open_rankset, run_replay
from chakra_tools.replay.fidelity import compare_with_trace, measured_of

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "external"
PAIRS = {  # name -> (host traces, device traces), paths under SHARED; archives are unpacked
    "dlrm (8x V100, NCCL)": ("param/dlrm_8rank_host_et.tar.gz", "param/dlrm_8rank_kineto.tar.gz"),
    "resnet (1x 2080 Ti)": ("param/resnet_1gpu_host_et.json.gz", "param/resnet_1gpu_kineto.json.gz"),
    "linear (1x 2080 Ti)": ("param/linear_1gpu_host_et.json.gz", "param/linear_1gpu_kineto.json.gz"),
    "simple_add (1x A100)": ("hta/simple_add_host_et.json.gz", "hta/simple_add_kineto.json.gz"),
}


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


def measure(host: str, device: str, work: Path) -> tuple[float, float, float, float]:
    """(measured job ns, predicted default ns, predicted as captured ns, as-captured error)."""
    out = work / Path(host).name.split(".")[0]
    convert(inputs_from_files(files(host, work), files(device, work), []), out, executor="serial")
    figures = []
    for modes in (CaptureModes(), AS_CAPTURED):
        feeders, groups = open_rankset(out)
        doc = run_replay(out, feeders, AnalyticalBackend(default_network(len(feeders))),
                         groups=groups, modes=modes).to_dict()
        figures.append(compare_with_trace(doc, measured_of(feeders))["job"])
    default, captured = figures
    return captured["measured_ns"], default["predicted_ns"], captured["predicted_ns"], captured["error"]


def field(folder: Path, work: Path) -> None:
    """Each device trace in `folder` converted on its own and replayed as captured: the error over
    its whole window and, where it records two or more ProfilerSteps, over the steps alone (first
    step's start to the last one's)."""
    print(f"\n{'device trace (' + str(folder) + ')':<64} {'measured':>12} {'as captured':>20} {'steps':>8}")
    errors = []
    for path in sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz"))):
        out = work / "field" / path.name.split(".")[0]
        try:
            convert(inputs_from_files([], [str(path)], []), out, executor="serial")
            result = replay_rankset(out, modes=AS_CAPTURED, absent_peers=True, validate=False,
                                    on_warning=lambda d: None)
            job = (result.fidelity or {}).get("job")
            steps = (result.fidelity or {}).get("steps")
        except ChakraToolsError as e:
            print(f"{path.name[:64]:<64} not replayed: {str(e).splitlines()[0][:90]}")
            continue
        if not job or not job.get("measured_ns"):
            print(f"{path.name[:64]:<64} no measured window (no host op with a time)")
            continue
        errors.append(job["error"])
        print(f"{path.name[:64]:<64} {job['measured_ns'] / 1e6:>10.2f}ms {job['predicted_ns'] / 1e6:>11.2f}ms "
              f"{job['error'] * 100:>+7.1f}% " + (f"{steps['error'] * 100:>+7.1f}%" if steps else f"{'':>8}"),
              flush=True)
    if errors:
        within = sum(abs(e) <= 0.05 for e in errors)
        print(f"{within} of {len(errors)} within 5%; median |error| "
              f"{sorted(abs(e) for e in errors)[len(errors) // 2] * 100:.1f}%")


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
    print(f"{'pair':<24} {'measured':>12} {'default':>20} {'as captured':>20}")
    errors = []
    for name, (host, device) in PAIRS.items():
        measured, default, captured, error = measure(host, device, work)
        errors.append(error)
        pct = lambda p: f"{(p - measured) / measured * 100:+.1f}%"  # noqa: E731
        print(f"{name:<24} {measured / 1e6:>10.2f}ms {default / 1e6:>11.2f}ms {pct(default):>7} "
              f"{captured / 1e6:>11.2f}ms {pct(captured):>7}", flush=True)
    mean = sum(abs(e) for e in errors) / len(errors)
    worst = max(errors, key=abs)
    print(f"mean |job error| as captured: {mean * 100:.1f}% over {len(errors)} GPU pairs "
          f"(goal <= 3%, each <= 5%; worst {worst * 100:+.1f}%)")
    if args.field:
        field(args.field, work)
    return 0 if abs(worst) <= 0.05 and mean <= 0.03 else 1


if __name__ == "__main__":
    sys.exit(main())
