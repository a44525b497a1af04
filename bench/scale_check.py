"""What-if at another scale, checked against real runs: capture a DDP job at 2 ranks, rescale it
(`trace-convert scale`), replay it on a network calibrated from the capture (`trace-convert
calibrate`), and compare with real captures of the same job at the target degrees.

    python bench/scale_check.py                    # 2 -> 1 and 2 -> 4 ranks (~1.5 min)
    python bench/scale_check.py --targets 1,4,8 --example ddp --repeats 2

Per target degree it prints: the measured step of the real run there (the job's captured window
across ranks per step; one rank: its step), the scaled capture's predicted step and its error,
and, to tell the rescale's error from the replay's, the real target capture replayed on the same
network (same modes) and the scaled prediction against that. Two networks: fitted to the 2-rank
DDP capture itself, and to a 2-rank capture of examples/comm_sweep.py (collectives of 1 KiB to
2 MiB). Replays use trace-replay's default modes (every duration from the trace, communication
from the network), or `--host-time timeline` (host time where the record put it, the waits
re-created). Needs torch. With more ranks than cores the real runs are oversubscribed:
their compute slows down, which no network explains (docs/replay.md, What-if at another scale).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SOURCE_RANKS = 2


def run(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def capture(example: str, ranks: int, folder: Path) -> Path:
    """trace-capture --active 4 of examples/EXAMPLE.py under torchrun on `ranks`; converted."""
    run(str(BIN / "trace-capture"), "--active", "4", "--out", str(folder), "--force", "--",
        str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(ranks), f"examples/{example}.py")
    et = folder.with_name(folder.name + "-et")
    run(str(BIN / "trace-convert"), str(folder), "-o", str(et), "-q")
    return et


def step(et: Path, backend, manifest: Path, host_time: str) -> dict:
    """{measured_ns, predicted_ns, error}: the job's (a single rank: the step's)."""
    from chakra_tools.replay import CaptureModes, compare_with_manifest, replay

    doc = replay(et, backend, record_events=False, modes=CaptureModes(host_time=host_time)).to_dict(events=False)
    cmp = compare_with_manifest(doc, manifest)
    return cmp.get("job") or cmp["step"]


def check(example: str, targets: list[int], work: Path, host_time: str) -> list[dict]:
    from chakra_tools.convert.scale import scale
    from chakra_tools.replay.netfit import calibrate, format_calibration

    source = capture(example, SOURCE_RANKS, work / f"{example}-{SOURCE_RANKS}")
    sweep = capture("comm_sweep", SOURCE_RANKS, work / f"comm_sweep-{SOURCE_RANKS}")
    npus = max(targets + [SOURCE_RANKS])
    networks = {f"{example}@{SOURCE_RANKS}": calibrate(source, npus=npus), f"comm_sweep@{SOURCE_RANKS}": calibrate(sweep, npus=npus)}
    for name, cal in networks.items():
        print(f"-- network fitted to {name}:\n{format_calibration(cal)}\n", flush=True)
    rows = []
    for n in targets:
        real = capture(example, n, work / f"{example}-{n}")
        manifest = real.with_name(real.name[:-3]) / "manifest.json"
        scaled = work / f"{example}-{SOURCE_RANKS}to{n}"
        scale(source, n, scaled)
        for name, cal in networks.items():
            pred = step(scaled, cal.fit.backend(npus), manifest, host_time)
            base = step(real, cal.fit.backend(npus), manifest, host_time)
            rows.append({"target": n, "network": name, "measured_ns": pred["measured_ns"],
                         "predicted_ns": pred["predicted_ns"], "error": pred["error"],
                         "real_replayed_ns": base["predicted_ns"], "real_replay_error": base["error"],
                         "rescale_error": pred["predicted_ns"] / base["predicted_ns"] - 1})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--example", default="ddp", help="a data-parallel example (examples/EXAMPLE.py)")
    parser.add_argument("--targets", default="1,4", help="comma-separated rank counts to check")
    parser.add_argument("--quick", action="store_true", help="one target, 4 ranks (make bench passes it)")
    parser.add_argument("--repeats", type=int, default=1, help="times to run the whole check")
    parser.add_argument("--host-time", default="ops", choices=("ops", "timeline"),
                        help="trace-replay --host-time of every replay (ops: the default)")
    args = parser.parse_args()
    targets = [4] if args.quick else [int(t) for t in args.targets.split(",")]
    rows = []
    for i in range(args.repeats):
        rows += check(args.example, targets, Path(tempfile.mkdtemp(prefix="bench-scale-")), args.host_time)
    print(f"{'ranks':>5} {'network':<16} {'measured':>10} {'predicted':>10} {'error':>8}"
          f" {'real replayed':>14} {'its error':>10} {'rescale':>8}")
    for r in rows:
        print(f"{SOURCE_RANKS}->{r['target']:<2} {r['network']:<16} {r['measured_ns'] / 1e3:>8.0f}us "
              f"{r['predicted_ns'] / 1e3:>8.0f}us {r['error']:>+8.1%} {r['real_replayed_ns'] / 1e3:>12.0f}us "
              f"{r['real_replay_error']:>+10.1%} {r['rescale_error']:>+8.1%}")
    if args.repeats > 1:
        for key in sorted({(r["target"], r["network"]) for r in rows}):
            mine = sorted(r["error"] for r in rows if (r["target"], r["network"]) == key)
            print(f"{SOURCE_RANKS}->{key[0]} {key[1]}: median error {mine[len(mine) // 2]:+.1%} over {len(mine)} repeats")
    errs = [abs(r["error"]) for r in rows]
    print(f"mean |error| of the scaled predictions: {sum(errs) / len(errs):.1%} over {len(rows)} "
          f"(worst {max(rows, key=lambda r: abs(r['error']))['error']:+.1%}; goal: within 10%, mean 5%)")


if __name__ == "__main__":
    main()
