"""The congestion-aware network model against ASTRA-sim's congestion_aware analytical backend,
side by side on the same files: wall and CPU time of each, and how far apart their per-rank
finish times are.

    python bench/bench_congestion.py --astra /tmp/astra/.../AstraSim_Analytical_Congestion_Aware
    python bench/bench_congestion.py --quick          # smaller jobs
    ASTRA_SIM_CONGESTION_AWARE=BIN make bench          # in make bench, when the binary is built

Without the binary (REFERENCE §4 says how to build it at 518bd51: `-DBUILDTARGET=congestion_aware`)
only our side runs and the ratio is left out. Workloads, generated here (deterministic), on one
Switch of every rank (ASTRA-sim's congestion_aware backend takes one dimension only), 50 GB/s,
500 ns, ring algorithms, 4 chunks:

- "gpt": `trace-convert generate` of a GPT (tp 4 x dp 8 x pp 2 = 64 ranks; --quick: tp 2 x dp 2 x
  pp 2), whose tensor-parallel all-reduces, data-parallel reduce-scatters and pipeline sends
  meet on the switch's links;
- "chain": 8 ranks, each a chain of GPU kernels with an all-reduce every 5 nodes (2,000 all-reduces;
  --quick: 200), every rank's kernels a little longer than the last's, so members arrive apart.

Each side runs in its own process; CPU time is the child's user + system time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from chakra_tools.core.graph import Graph, RankSet  # noqa: E402
from chakra_tools.core.model import CommType, Node, NodeType, make_attrs  # noqa: E402

BIN = Path(sys.executable).parent
FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")
SYSTEM = {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
          "preferred-dataset-splits": 4, "collective-optimization": "localBWAware", "local-mem-bw": 1600,
          "boost-mode": 0, "roofline-enabled": 0, "peak-perf": 900,
          **{f"{c}-implementation": ["ring"] for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}}


def gpt(work: Path, quick: bool) -> int:
    degrees = dict(tp=2, dp=2, pp=2) if quick else dict(tp=4, dp=8, pp=2)
    config = dict(layers=8, hidden=2048, heads=16, seq=2048, batch=32 * degrees["dp"], vocab=50304,
                  microbatches=8, zero=1, device="H100", efficiency=0.5, **degrees)
    (work / "gpt.yml").write_text("\n".join(f"{k}: {v}" for k, v in config.items()) + "\n")
    subprocess.run([str(BIN / "trace-convert"), "generate", "--config", str(work / "gpt.yml"), "-o", str(work / "w"),
                    "--prefix", "w"], check=True, capture_output=True)
    return degrees["tp"] * degrees["dp"] * degrees["pp"]


def chain(work: Path, quick: bool) -> int:
    rng = random.Random(7)
    n, nodes = 8, 1000 if quick else 10_000
    sizes = [rng.choice((1 << 16, 1 << 20, 4 << 20)) for _ in range(nodes // 5)]
    ranks = {}
    for r in range(n):
        out = []
        for i in range(1, nodes + 1):
            deps = (i - 1,) if i > 1 else ()
            if i % 5 == 0:
                out.append(Node(i, f"ar{i}", NodeType.COMM_COLL_NODE, deps, attrs=make_attrs(
                    comm_type=CommType.ALL_REDUCE, comm_size=sizes[i // 5 - 1], is_cpu_op=False)))
            else:
                out.append(Node(i, f"k{i}", NodeType.COMP_NODE, deps, duration_micros=5 + r,
                                attrs=make_attrs(is_cpu_op=False)))
        ranks[r] = Graph(out, rank=r)
    (work / "w").mkdir()
    RankSet(ranks, {}).write(work / "w", "w")
    return n


WORKLOADS = {"gpt": gpt, "chain": chain}


def timed(argv: list[str], cwd: Path) -> tuple[str, float, float]:
    """(stdout, wall s, CPU s) of a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"{argv[0]} exit {out.returncode}: {(out.stdout + out.stderr)[-1500:]}")
    return out.stdout, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--astra", default=os.environ.get("ASTRA_SIM_CONGESTION_AWARE"),
                    help="AstraSim_Analytical_Congestion_Aware (default: $ASTRA_SIM_CONGESTION_AWARE)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if not args.astra:
        print("ASTRA-sim's congestion_aware binary not given (--astra or $ASTRA_SIM_CONGESTION_AWARE): ours only")
    print(f"{'workload':<8} {'ranks':>5}  {'ours wall/CPU':>15}  {'ASTRA-sim wall/CPU':>19}  {'CPU ratio':>9}  "
          f"{'per-rank difference':>19}")
    for name, make in WORKLOADS.items():
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            n = make(work, args.quick)
            (work / "network.yml").write_text(f"topology: [ Switch ]\nnpus_count: [ {n} ]\nbandwidth: [ 50.0 ]\n"
                                              "latency: [ 500.0 ]\n")
            (work / "system.json").write_text(json.dumps(SYSTEM))
            (work / "memory.json").write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
            out, wall, cpu = timed([str(BIN / "trace-replay"), str(work / "w"), "--network", "network.yml",
                                    "--system", "system.json", "--network-model", "congestion-aware",
                                    "--no-validate", "--json"], work)
            ours = {r["rank"]: r["finish_ns"] for r in json.loads(out)["ranks"]}
            ref_text = "-"
            ratio = diff = "-"
            if args.astra and (work / "w" / "comm_group.json").exists() and not json.loads(
                    (work / "w" / "comm_group.json").read_text()):
                (work / "w" / "comm_group.json").unlink()  # ASTRA-sim refuses an empty one
            if args.astra:
                groups = work / "w" / "comm_group.json"
                text, rwall, rcpu = timed([args.astra, f"--workload-configuration={work / 'w' / 'w'}",
                                           "--system-configuration=system.json",
                                           "--remote-memory-configuration=memory.json",
                                           "--network-configuration=network.yml",
                                           *([f"--comm-group-configuration={groups}"] if groups.exists() else [])],
                                          work)
                ref = {int(r): int(ns) for r, ns in FINISHED.findall(text)}
                ref_text = f"{rwall:6.2f}/{rcpu:6.2f} s"
                ratio = f"{rcpu / cpu:.2f}x"
                worst = max(abs(ours[r] - ref[r]) / ref[r] for r in ref)
                diff = f"{worst:.4%}"
            print(f"{name:<8} {n:>5}  {wall:6.2f}/{cpu:6.2f} s  {ref_text:>19}  {ratio:>9}  {diff:>19}", flush=True)
    print("CPU ratio: ASTRA-sim's CPU time over ours (above 1: ours is faster). A generated job's kernels carry "
          "duration_ns, which ASTRA-sim reads in whole microseconds: the two differ by that alone.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
