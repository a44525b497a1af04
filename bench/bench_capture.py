"""Capture overhead: step time of the examples with and without capture, and our own additions
(step hooks, DDP comm hook, annotations) separated from PyTorch's observer and profiler.

    python bench/bench_capture.py [--quick]

Four configurations of `trace-capture` per example, interleaved and repeated, each reporting the
wall time of every step from the manifest:

    baseline  no profiler, no annotations, no DDP hook: only the step timer (one hook per step)
    ours      no profiler; hooks, DDP comm hook and annotations on every step (annotate=always)
    torch     PyTorch's execution-trace observer + Kineto on the captured steps; none of ours
    full      what `trace-capture` does: torch + ours

First a per-call micro-benchmark of one all_reduce on a 1-rank gloo group: the original function,
our wrapper while not recording, our wrapper annotating. Then per example the lower quartile of
step times (steps 0-1 excluded as warm-up) as a ratio to the baseline: `ours` is what our
additions cost when they annotate every call; `torch` and `full` are the captured steps;
`full/torch` is what the annotations add while recording (noisy on a shared machine, so also
estimated: annotated calls per step x the per-call cost / captured step time); `uncaptured` is
the steps of a real capture outside the window.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CAPTURE = [sys.executable, "-c", "from chakra_tools.cli.main import capture_main; capture_main()"]
TORCHRUN = [str(BIN / "torchrun")] if (BIN / "torchrun").exists() else \
    [sys.executable, "-m", "torch.distributed.run"]

CONFIGS = {
    "baseline": ["--no-profiler", "--annotate", "off", "--no-ddp-hook"],
    "ours": ["--no-profiler", "--annotate", "always"],
    "torch": ["--annotate", "off", "--no-ddp-hook"],
    "full": [],
}


def examples(steps: int) -> dict[str, list[str]]:
    ex = REPO / "examples"
    two = [*TORCHRUN, "--standalone", "--nproc-per-node", "2"]
    return {
        "mlp (1 rank)": [str(ex / "mlp.py"), "--steps", str(steps)],
        "ddp (2 ranks)": ["--", *two, str(ex / "ddp.py"), "--steps", str(steps)],
        "collectives (2 ranks)": ["--", *two, str(ex / "collectives.py"), "--steps", str(steps)],
    }


def run_once(config: list[str], schedule: list[str], command: list[str]) -> list[dict]:
    """One capture; returns the manifest's rank entries."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        proc = subprocess.run([*CAPTURE, "--out", str(out), *schedule, *config, *command],
                              capture_output=True, text=True, env=env, cwd=tmp)
        if proc.returncode != 0:
            raise SystemExit(f"capture failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return json.loads((out / "manifest.json").read_text())["ranks"]


def step_times(ranks: list[dict], steps: list[int]) -> list[float]:
    """Per step, the slowest rank's time (the step ends when every rank is done), in ms."""
    return [max(r["step_times_ns"][s] for r in ranks) / 1e6 for s in steps]


def quartile(values: list[float]) -> float:
    """The lower quartile: robust to the other jobs sharing the machine, which only add time."""
    return statistics.quantiles(values, n=4)[0] if len(values) > 1 else values[0]


def bench_example(command: list[str], steps: int, reps: int, wait: int,
                  active: int) -> dict[str, float]:
    """Lower-quartile step time (ms) per configuration, and annotated calls per captured step."""
    schedule = ["--wait", str(wait), "--warmup", "1", "--active", str(active)]
    captured = list(range(wait + 1, wait + 1 + active))
    others = [s for s in range(2, steps) if s not in captured and s != wait]
    samples: dict[str, list[float]] = {k: [] for k in
                                       ("baseline", "ours", "torch", "full", "full-uncaptured")}
    calls = []
    for _ in range(reps):
        for config, args in CONFIGS.items():
            ranks = run_once(args, schedule, command)
            if config in ("baseline", "ours"):
                samples[config] += step_times(ranks, list(range(2, steps)))
            else:
                samples[config] += step_times(ranks, captured)
            if config == "full":
                samples["full-uncaptured"] += step_times(ranks, others)
                calls.append(max(r["annotated_calls"] for r in ranks) / active)
    result = {k: quartile(v) for k, v in samples.items() if v}
    result["calls"] = statistics.median(calls)
    return result


def print_row(name: str, q: dict[str, float], per_call_us: float) -> None:
    base = q["baseline"]
    estimate = 100 * q["calls"] * per_call_us / (q["torch"] * 1000)
    print(f"{name:22s} {base:8.3f} ms | ours {q['ours'] / base:5.3f}x"
          f" | torch {q['torch'] / base:5.2f}x | full {q['full'] / base:5.2f}x | full/torch {q['full'] / q['torch']:5.3f}x"
          f" | uncaptured {q['full-uncaptured'] / base:5.3f}x"
          f" | {q['calls']:4.0f} calls/step, est. {estimate:4.1f}% of a captured step")


def micro(calls: int) -> float:
    """µs per all_reduce of 16 floats on a 1-rank gloo group: our wrapper's own cost. Prints
    the figures and returns the extra µs of an annotated call."""
    import torch
    import torch.distributed as dist

    from chakra_tools.capture import comm

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    original = dist.all_reduce
    comm.install(0)
    t = torch.ones(16)

    def per_call(fn) -> float:
        fn(t)
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn(t)
        return (time.perf_counter_ns() - start) / calls / 1000

    binder = comm.Binder(original)

    def describe(_) -> None:
        comm.describe_call("all_reduce", comm.C10D["all_reduce"], binder, (t,), {}, None)

    rows = []
    for _ in range(9):  # interleaved, best of nine: other jobs only add time
        base, idle = per_call(original), per_call(dist.all_reduce)
        comm.STATE.always = True
        annotated = per_call(dist.all_reduce)
        comm.STATE.always = False
        rows.append((base, idle, annotated, per_call(describe)))
    dist.destroy_process_group()
    base, idle, annotated, described = (min(col) for col in zip(*rows))
    print(f"per call (all_reduce of 16 floats, 1-rank gloo, best of 9 x {calls} calls): "
          f"original {base:.1f} us; wrapper not recording +{max(idle - base, 0):.1f} us; "
          f"annotating +{max(annotated - base, 0):.1f} us (describing alone {described:.1f} us)")
    return max(annotated - base, 0.0)


def micro_ddp(steps: int) -> float:
    """ms per training step of a 1-rank DDP MLP with DDP's C++ all-reduce and with our annotated
    Python comm hook (not recording), interleaved, best of 7 chunks; prints, returns the extra."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from chakra_tools.capture import ddp as ddp_hook

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)

    def model():
        torch.manual_seed(0)
        m = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1)))
        return m, torch.optim.SGD(m.parameters(), lr=0.01)

    native = model()
    ddp_hook.install()
    hooked = model()
    x, y = torch.randn(32, 64), torch.randn(32, 1)

    def chunk(m, opt) -> float:
        start = time.perf_counter_ns()
        for _ in range(steps):
            nn.functional.mse_loss(m(x), y).backward()
            opt.step()
            opt.zero_grad()
        return (time.perf_counter_ns() - start) / steps / 1e6

    times = {"native": [], "hooked": []}
    for _ in range(7):
        times["native"].append(chunk(*native))
        times["hooked"].append(chunk(*hooked))
    dist.destroy_process_group()
    a, b = min(times["native"]), min(times["hooked"])
    print(f"DDP step (1-rank gloo, MLP 64-256-1, best of 7 x {steps} steps): C++ all-reduce "
          f"{a:.3f} ms; our Python comm hook {b:.3f} ms ({b / a:.3f}x, {b - a:+.3f} ms per bucket)")
    return b - a


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and one repetition")
    args = parser.parse_args()
    steps, reps, wait, active = (12, 1, 3, 4) if args.quick else (30, 2, 10, 10)
    per_call = micro(200 if args.quick else 1000)
    micro_ddp(20 if args.quick else 200)
    print(f"\nstep time, lower quartile over {steps - 2} steps x {reps} run(s); ratios against "
          f"the baseline (goal: our additions <= 5% of a step):")
    for name, command in examples(steps).items():
        print_row(name, bench_example(command, steps, reps, wait, active), per_call)
    return 0


if __name__ == "__main__":
    sys.exit(main())
