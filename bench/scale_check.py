"""What-if at another scale, checked against real runs: capture a DDP job at 2 ranks, rescale it
(`trace-convert scale`), replay it on a network calibrated from the capture (`trace-convert
calibrate`), and compare with real captures of the same job at the target degrees.

    python bench/scale_check.py                    # 2 -> 1 and 2 -> 4 ranks (~1.5 min)
    python bench/scale_check.py --targets 1,4,8 --example ddp --repeats 3
    python bench/scale_check.py --source 1 --targets 2 --repeats 3   # 1 -> 2 ranks
    python bench/scale_check.py --example pipeline --source 2 --targets 4   # pp 2: dp 1 -> 2
    python bench/scale_check.py --example tensor_parallel --source 4 --targets 2   # tp 2: dp 2 -> 1

The model-parallel examples run with their model-parallel degree fixed at 2 (`pipeline.py
--stages 2`, `tensor_parallel.py --tp 2`), the rest of the ranks data-parallel replicas; rank
counts are then multiples of 2, and scale changes the data-parallel degree (ranks / 2).

Each repeat captures the 2-rank source, a 2-rank capture of examples/comm_sweep.py (collectives
of 1 KiB to 2 MiB) and a real run at every target degree, afresh. Per target degree and repeat
it prints: the measured step of the real run there (the job's captured window across ranks per
step; one rank: its step) with the spread of that run's own captured steps (min..max over ranks
and steps: the machine's noise within one run), the scaled capture's predicted step and its
error, and, to tell the rescale's error from the replay's, the real target capture replayed on
the same network (same modes) and the scaled prediction against that; then the compute per step
on rank 0 of the scaled set and of the real run (the sum of compute node durations: what a
replay without communication would charge), and the old degree's collective wait out of rank 0's
host ops (the converter's, build.py `_untraced_collective_waits`). With `--repeats K` > 1 a
summary follows: the median measured step, the median prediction and the error of the one
against the other, with the range of each over the repeats. Two networks: fitted to the source
capture itself (`EXAMPLE@N`), and to the comm_sweep capture (`comm_sweep@2`), each as ASTRA-sim
reads it (one Ring for every kind) and as its per-kind fit (`/kind`: trace-replay --network-fit).
Replays use trace-replay's default modes (every duration from the trace,
communication from the network), or `--host-time timeline` (host time where the record put it,
the waits re-created). Needs torch. With more ranks than cores the real runs are oversubscribed:
their compute slows down, which no network explains (docs/validation.md, Another data-parallel degree).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SOURCE_RANKS = 2
#: the model-parallel examples' own arguments and degree: their ranks are multiples of it
MODEL_PARALLEL = {"pipeline": (("--stages", "2"), 2), "tensor_parallel": (("--tp", "2"), 2)}


def run(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def capture(example: str, ranks: int, folder: Path) -> Path:
    """trace-capture --active 4 of examples/EXAMPLE.py under torchrun on `ranks`; converted."""
    args = MODEL_PARALLEL.get(example, ((), 1))[0]
    run(str(BIN / "trace-capture"), "--active", "4", "--out", str(folder), "--force", "--",
        str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(ranks), f"examples/{example}.py", *args)
    et = folder.with_name(folder.name + "-et")
    run(str(BIN / "trace-convert"), str(folder), "-o", str(et), "-q")
    return et


def step(et: Path, backend, manifest: Path, host_time: str) -> dict:
    """{measured_ns, predicted_ns, error}: the job's (a single rank: the step's)."""
    from chakra_tools.replay import CaptureModes, compare_with_manifest, replay

    doc = replay(et, backend, record_events=False, modes=CaptureModes(host_time=host_time)).to_dict(events=False)
    cmp = compare_with_manifest(doc, manifest)
    return cmp.get("job") or cmp["step"]


def own_steps_ns(manifest: Path) -> list[int]:
    """The captured steps' measured times of every rank of a run (its own noise)."""
    from chakra_tools.core.manifest import read_manifest

    man = read_manifest(manifest)
    out = []
    for rec in man.ranks:
        steps = rec.captured_steps or man.captured_steps
        out += [rec.step_times_ns[s] for s in steps if 0 <= s < len(rec.step_times_ns)]
    return out


def compute_per_step_ns(et: Path, steps: int) -> float:
    """Rank 0's compute node durations summed, per captured step."""
    from chakra_tools.core.graph import RankSet
    from chakra_tools.core.model import NodeType

    g = RankSet.load(et)[0]
    return sum(n.duration_micros for n in g.nodes.values() if n.type is NodeType.COMP_NODE) * 1e3 / max(1, steps)


def check(example: str, targets: list[int], work: Path, host_time: str, repeat: int,
          source_ranks: int = SOURCE_RANKS) -> list[dict]:
    from chakra_tools.convert.scale import scale
    from chakra_tools.core.manifest import read_manifest
    from chakra_tools.replay.calfile import format_calibration
    from chakra_tools.replay.netfit import calibrate

    print(f"-- repeat {repeat}: captures in {work}", flush=True)
    source = capture(example, source_ranks, work / f"{example}-{source_ranks}")
    # the sweep runs on 2 ranks whatever the source: a 1-rank capture has no network to fit
    sweep = capture("comm_sweep", 2, work / "comm_sweep-2")
    npus = max(targets + [source_ranks, 2])
    networks = {"comm_sweep@2": calibrate(sweep, npus=npus)}
    if source_ranks > 1:
        networks = {f"{example}@{source_ranks}": calibrate(source, npus=npus), **networks}
    for name, cal in networks.items():
        print(f"-- repeat {repeat}: network fitted to {name}:\n{format_calibration(cal)}\n", flush=True)
    rows = []
    for n in targets:
        real = capture(example, n, work / f"{example}-{n}")
        manifest = real.with_name(real.name[:-3]) / "manifest.json"
        steps = len(read_manifest(manifest).captured_steps)
        own = own_steps_ns(manifest)
        scaled = work / f"{example}-{source_ranks}to{n}"
        taken = scale(source, n // MODEL_PARALLEL.get(example, ((), 1))[1], scaled).waits_ns.get(0, 0) / max(1, steps)
        work_scaled, work_real = compute_per_step_ns(scaled, steps), compute_per_step_ns(real, steps)
        # each network as ASTRA-sim reads it (one Ring for every kind) and as its per-kind fit
        # prices it (trace-replay --network-fit)
        backends = {label: backend for name, cal in networks.items()
                    for label, backend in ((name, lambda c=cal: c.fit.backend(npus)),
                                           (f"{name}/kind", lambda c=cal: c.kind_priced(npus)))}
        for name, backend in backends.items():
            pred = step(scaled, backend(), manifest, host_time)
            base = step(real, backend(), manifest, host_time)
            rows.append({"repeat": repeat, "source": source_ranks, "target": n, "network": name, "measured_ns": pred["measured_ns"],
                         "own_min_ns": min(own), "own_max_ns": max(own),
                         "predicted_ns": pred["predicted_ns"], "error": pred["error"],
                         "real_replayed_ns": base["predicted_ns"], "real_replay_error": base["error"],
                         "rescale_error": pred["predicted_ns"] / base["predicted_ns"] - 1,
                         "compute_scaled_ns": work_scaled, "compute_real_ns": work_real,
                         "wait_taken_ns": taken})
    return rows


def _us(ns: float) -> str:
    return f"{ns / 1e3:.0f}us"


def _spread(xs: list[float]) -> str:
    return f"{_us(min(xs))}..{_us(max(xs))}"


def summary(rows: list[dict]) -> list[dict]:
    """Per (target, network): medians over the repeats of the measured step and the prediction."""
    out = []
    for key in sorted({(r["target"], r["network"]) for r in rows}):
        mine = [r for r in rows if (r["target"], r["network"]) == key]
        m = median(r["measured_ns"] for r in mine)
        p = median(r["predicted_ns"] for r in mine)
        out.append({"target": key[0], "network": key[1], "repeats": len(mine), "measured_ns": m, "predicted_ns": p,
                    "error": p / m - 1, "measured": [r["measured_ns"] for r in mine],
                    "predicted": [r["predicted_ns"] for r in mine],
                    "real_replayed_ns": median(r["real_replayed_ns"] for r in mine),
                    "compute_scaled_ns": median(r["compute_scaled_ns"] for r in mine),
                    "compute_real_ns": median(r["compute_real_ns"] for r in mine),
                    "wait_taken_ns": median(r["wait_taken_ns"] for r in mine)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--example", default="ddp",
                        help="examples/EXAMPLE.py: ddp (or another data-parallel one), pipeline or tensor_parallel")
    parser.add_argument("--targets", default="1,4", help="comma-separated rank counts to check")
    parser.add_argument("--source", type=int, default=SOURCE_RANKS,
                        help="ranks of the captured source (1: a single-process DDP run scaled up; its "
                             "network then comes from the 2-rank sweep alone)")
    parser.add_argument("--quick", action="store_true", help="one target, 4 ranks (make bench passes it)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="captures at each scale (source, sweep, every target); medians over them")
    parser.add_argument("--host-time", default="ops", choices=("ops", "timeline"),
                        help="trace-replay --host-time of every replay (ops: the default; timeline replays the "
                             "source's recorded gaps, the old degree's waits among them: docs/reference/trace-convert.md)")
    parser.add_argument("--json", type=Path, help="also write every repeat's row and the medians here")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats: at least 1")
    targets = [4] if args.quick else [int(t) for t in args.targets.split(",")]
    mp = MODEL_PARALLEL.get(args.example, ((), 1))[1]
    if any(n % mp for n in [*targets, args.source]):
        parser.error(f"{args.example} runs {mp}-way model parallel: --source and --targets are multiples of {mp}")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    cores, most = os.cpu_count() or 1, max(*targets, args.source, 2)
    if most > cores:
        print(f"note: {most} ranks on {cores} cores: the runs with more ranks than cores are oversubscribed (their "
              "compute slows down and their communication waits for the scheduler, which no network or rescale "
              "explains); the goal can only be checked on a machine with a core per rank", flush=True)
    rows = []
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as work:
            rows += check(args.example, targets, Path(work), args.host_time, i + 1, args.source)
    print(f"{'rep':>3} {'ranks':>5} {'network':<22} {'measured':>9} {'its steps':>15} {'predicted':>9} {'error':>8}"
          f" {'real replayed':>13} {'its error':>9} {'rescale':>8} {'compute scaled/real':>20}")
    for r in rows:
        print(f"{r['repeat']:>3} {r['source']}->{r['target']:<2} {r['network']:<22} {_us(r['measured_ns']):>9} "
              f"{_us(r['own_min_ns']) + '..' + _us(r['own_max_ns']):>15} {_us(r['predicted_ns']):>9} "
              f"{r['error']:>+8.1%} {_us(r['real_replayed_ns']):>13} {r['real_replay_error']:>+9.1%} "
              f"{r['rescale_error']:>+8.1%} {_us(r['compute_scaled_ns']) + '/' + _us(r['compute_real_ns']):>20}")
    med = summary(rows)
    if args.json:
        args.json.write_text(json.dumps({"load_average": os.getloadavg(), "rows": rows, "medians": med}, indent=1))
    if args.repeats > 1:
        print(f"\nmedians over {args.repeats} repeats (range over the repeats in brackets):")
        for s in med:
            print(f"{args.source}->{s['target']:<2} {s['network']:<22} measured {_us(s['measured_ns'])} "
                  f"[{_spread(s['measured'])}], predicted {_us(s['predicted_ns'])} [{_spread(s['predicted'])}]: "
                  f"{s['error']:+.1%}; real run replayed {_us(s['real_replayed_ns'])}; compute/step "
                  f"scaled {_us(s['compute_scaled_ns'])}, real {_us(s['compute_real_ns'])}; collective wait "
                  f"out of rank 0's host ops {_us(s['wait_taken_ns'])}/step")
    errs = [abs(s["error"]) for s in med]
    worst = max(med, key=lambda s: abs(s["error"]))["error"]
    print(f"mean |error| of the scaled predictions{' (medians)' if args.repeats > 1 else ''}: "
          f"{sum(errs) / len(errs):.1%} over {len(med)} (worst {worst:+.1%}; goal: within 10%, mean 5%)")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
