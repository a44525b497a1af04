"""Fidelity (b): replay each example capture and compare with the step time it measured.

    python bench/bench_fidelity.py              # every example, 2 captures each (~3 min)
    python bench/bench_fidelity.py --quick      # 1 capture each
    python bench/bench_fidelity.py --examples pipeline,ddp --captures 3

For each example (examples/*.py: 1 process for mlp and gpt, 2 workers spawned by spawn_ddp
itself, 2 ranks under torchrun for the others) it runs `trace-capture --active 4`, `trace-convert`, then `trace-replay --manifest`
twice: with the default network model and `--as-captured`. It prints the job error of each
(the captured window across ranks against the makespan, per step: docs/reference/trace-replay.md; figures in docs/validation.md) and the
mean |error| of the as-captured replays (goal: at most 5%). Needs torch.
"""

from __future__ import annotations

import argparse
import atexit
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SINGLE = ("mlp", "gpt", "compiled", "spawn_ddp")  # started as a script (spawn_ddp starts 2 workers)
EXAMPLES = ("mlp", "gpt", "compiled", "ddp", "pipeline", "tensor_parallel", "collectives", "fsdp",
            "spawn_ddp")
ERROR = re.compile(r"^error ([+-]?[\d.]+)%: ", re.M)  # the headline trace-replay prints first


def run(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def job_error(text: str) -> float:
    """The headline error: the job's (the step's for single-process runs, which record no job
    window); SystemExit where trace-replay printed none."""
    found = ERROR.search(text)
    if found is None:
        raise SystemExit(f"no headline error in trace-replay's output:\n{text[-2000:]}")
    return float(found.group(1))


def measure(example: str, folder: Path) -> tuple[float, float]:
    launch = ([sys.executable] if example in SINGLE else
              [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2"])
    run(str(BIN / "trace-capture"), "--active", "4", "--out", str(folder), "--force", "--",
        *launch, f"examples/{example}.py")
    et = folder.with_name(folder.name + "-et")
    run(str(BIN / "trace-convert"), str(folder), "-o", str(et))
    replay = [str(BIN / "trace-replay"), str(et), "--manifest", str(folder / "manifest.json")]
    return job_error(run(*replay)), job_error(run(*replay, "--as-captured"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one capture per example")
    parser.add_argument("--captures", type=int, default=2, help="captures per example")
    parser.add_argument("--examples", default=",".join(EXAMPLES), help="comma-separated")
    args = parser.parse_args()
    n = 1 if args.quick else args.captures
    work = Path(tempfile.mkdtemp(prefix="bench-fidelity-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)  # gigabytes per run otherwise
    print(f"{'example':<16} {'default':>20} {'as captured':>20}")
    captured = []
    for example in args.examples.split(","):
        rows = [measure(example, work / f"{example}-{i}") for i in range(n)]
        captured += [a for _, a in rows]
        fmt = lambda xs: ", ".join(f"{x:+.1f}%" for x in xs)  # noqa: E731
        print(f"{example:<16} {fmt(d for d, _ in rows):>20} {fmt(a for _, a in rows):>20}", flush=True)
    mean = sum(abs(x) for x in captured) / len(captured)
    print(f"mean |job error| as captured: {mean:.1f}% over {len(captured)} captures "
          f"(goal <= 5%; worst {max(captured, key=abs):+.1f}%)")


if __name__ == "__main__":
    main()
