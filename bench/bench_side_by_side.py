"""Our replayer and ASTRA-sim's analytical backend side by side on the same files: wall time, CPU
time and peak memory of each, and how far apart their per-rank finish times are.

    python bench/bench_side_by_side.py --unaware BIN --aware BIN        # both of ASTRA-sim's backends
    python bench/bench_side_by_side.py --unaware BIN --ranks 256,1024 --astra-max 1024
    python bench/bench_side_by_side.py --quick                          # smaller jobs, ours only
    python bench/bench_side_by_side.py --unaware BIN --huge 0           # without the 131,072-rank job
    python bench/bench_side_by_side.py --unaware BIN --scaled OUT --ranks 1024,4096 --huge 0
    ASTRA_SIM_CONGESTION_UNAWARE=BIN ASTRA_SIM_CONGESTION_AWARE=BIN make bench

The binaries are ASTRA-sim 518bd51's `AstraSim_Analytical_Congestion_Unaware` and `_Aware`
(REFERENCE §4 says how to build them; `-DBUILDTARGET=congestion_aware` for the second). Without
one, only our side of that model runs and the ratio is left out.

- congestion-unaware (`trace-replay`'s default, validation included, as a user runs it): a
  GPT from `trace-convert generate` at each of `--ranks` (tp 8 x pp 4 x dp N/32; 64 ranks with
  --quick), on Ring 8 x Switch N/8 (50 and 25 GB/s, 500 and 700 ns), ring algorithms, 4 chunks;
  ours twice: by replica classes where they apply (`--replicas auto`, the default from 256 ranks;
  "4 cl": four ranks replayed) and every rank (`--replicas off`), and whether the two give every
  rank the same row; and validation's share of the replay by classes (`--no-validate` beside it);
- with `--scaled CAPTURE` (a converted capture's rank set, one you made: not a generated job),
  that capture too, `trace-convert scale`d to each of `--ranks` (its data-parallel degree times
  the degrees it keeps), on Ring 4 x Switch N/4 (50 and 25 GB/s, 500 and 1,000 ns), the same two
  replays and the same check;
- congestion-aware (`--network-model congestion-aware`; ASTRA-sim's backend takes one dimension
  only, so one Switch of every rank): a GPT of 64 ranks (tp 4 x dp 8 x pp 2; --quick 8), whose
  tensor-parallel all-reduces, data-parallel reduce-scatters and pipeline sends meet on the
  switch's links; and 8 ranks each a chain of kernels with an all-reduce every 5 nodes (2,000
  all-reduces; --quick 200), every rank's kernels a little longer than the last's.

Each side runs in its own process; CPU time is the child's user + system time, memory its peak
resident set. A generated job's kernels carry `duration_ns`, which ASTRA-sim reads in whole
microseconds: where the two differ, that is why (a few thousandths of a percent).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
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
#: the child's peak RSS (KiB) and CPU seconds, printed by this wrapper on stderr's last line
MEASURE = ("import resource, subprocess, sys; out = subprocess.run(sys.argv[1:]).returncode; "
           "r = resource.getrusage(resource.RUSAGE_CHILDREN); "
           "print(f'MEASURE {r.ru_maxrss} {r.ru_utime + r.ru_stime}', file=sys.stderr); sys.exit(out)")


def gpt(work: Path, tp: int, dp: int, pp: int, layers: int = 8, microbatches: int = 8) -> int:
    config = dict(layers=layers, hidden=2048, heads=16, seq=2048, batch=4 * microbatches * dp, vocab=50304,
                  microbatches=microbatches, zero=1, device="H100", efficiency=0.5, tp=tp, dp=dp, pp=pp)
    (work / "gpt.yml").write_text("\n".join(f"{k}: {v}" for k, v in config.items()) + "\n")
    subprocess.run([str(BIN / "trace-convert"), "generate", "--config", str(work / "gpt.yml"), "-o", str(work / "w"),
                    "--prefix", "w"], check=True, capture_output=True)
    return tp * dp * pp


def scaled(work: Path, capture: Path, ranks: int) -> int:
    """The capture at `capture` scaled to about `ranks` ranks (its kept degrees times a
    data-parallel degree), written rank by rank as w/w.<rank>.et; how many ranks it has."""
    from chakra_tools.convert.joblayout import communication, job_layout
    from chakra_tools.convert.scale import ScalePlan
    from chakra_tools.core.rankfiles import write_ranks

    rs = RankSet.load(capture)
    layout = job_layout(rs, None, None, communication(rs)).layout
    plan = ScalePlan(rs, max(1, ranks // (layout.tp * layout.pp)))
    write_ranks(work / "w", "w", plan.ranks(), plan.groups.groups, world_size=plan.new.world)
    return plan.new.world


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


def network(dims: list[tuple[str, int, float, float]]) -> str:
    return "".join(f"{key}: [ {', '.join(str(d[i]) for d in dims)} ]\n"
                   for i, key in enumerate(("topology", "npus_count", "bandwidth", "latency")))


def measured(argv: list[str], cwd: Path) -> tuple[str, float, float, float]:
    """(stdout, wall s, CPU s, peak MB) of a child process."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", MEASURE, *argv], cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    line = [ln for ln in out.stderr.splitlines() if ln.startswith("MEASURE ")][-1].split()
    if out.returncode != 0:
        raise RuntimeError(f"{argv[0]} exit {out.returncode}: {(out.stdout + out.stderr)[-1500:]}")
    return out.stdout, wall, float(line[2]), int(line[1]) / 1024


def astra_run(work: Path, astra: str) -> tuple[dict[int, int], str, float]:
    """ASTRA-sim on the set in `work`: its finish per rank, the figures printed, its CPU seconds."""
    groups = work / "w" / "comm_group.json"
    text, rwall, rcpu, rmb = measured([astra, f"--workload-configuration={work / 'w' / 'w'}",
                                       "--system-configuration=system.json",
                                       "--remote-memory-configuration=memory.json",
                                       "--network-configuration=network.yml",
                                       *([f"--comm-group-configuration={groups}"] if groups.exists() else [])], work)
    return ({int(r): int(ns) for r, ns in FINISHED.findall(text)}, f"{rwall:7.2f} / {rcpu:7.2f} s / {rmb:6.0f} MB",
            rcpu)


def prepare(work: Path) -> None:
    (work / "system.json").write_text(json.dumps(SYSTEM))
    (work / "memory.json").write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
    groups = work / "w" / "comm_group.json"
    if groups.exists() and not json.loads(groups.read_text()):
        groups.unlink()  # ASTRA-sim refuses an empty one


def side_by_side(name: str, work: Path, n: int, model: str, reference: tuple | None, replicas: str = "auto") -> dict:
    """One line: ours (`--replicas` as given) against ASTRA-sim's run (`astra_run`, None: not
    run); returns our per-rank rows."""
    out, wall, cpu, mb = measured([str(BIN / "trace-replay"), str(work / "w"), "--network", "network.yml",
                                   "--system", "system.json", "--network-model", model, "--json",
                                   "--replicas", replicas], work)
    doc = json.loads(out)
    ours = {r["rank"]: r["finish_ns"] for r in doc["ranks"]}
    classes = doc["config"].get("replicas", {}).get("replayed")
    if isinstance(classes, list):
        name = f"{name}, {len(classes)} cl"
    elif replicas == "off":
        name = f"{name}, all"
    ref_text, ratio, diff = "-", "-", "-"
    if reference is not None:
        ref, ref_text, rcpu = reference
        ratio = f"{rcpu / cpu:.2f}x"
        diff = f"{max(abs(ours[r] - ref[r]) / ref[r] for r in ref):.4%}" if len(ref) == len(ours) else "ranks missing"
    print(f"{model:<19} {name:<11} {n:>6}  {wall:7.2f} / {cpu:7.2f} s / {mb:6.0f} MB  {ref_text:>31}  {ratio:>7}  "
          f"{diff:>10}", flush=True)
    return doc["ranks"]


def unaware(name: str, work: Path, n: int, args) -> None:
    """The congestion-unaware rows of the set in `work` (its network.yml written): ASTRA-sim's run
    where asked, ours by classes and every rank, whether the two agree, validation's share."""
    prepare(work)
    reference = astra_run(work, args.unaware) if args.unaware and n <= args.astra_max else None
    if args.unaware and reference is None:
        print(f"(ASTRA-sim not run at {n:,} ranks: about half an hour; --astra-max {n} runs it)")
    by_class = side_by_side(name, work, n, "congestion-unaware", reference)
    whole = side_by_side(name, work, n, "congestion-unaware", reference, replicas="off")
    print(f"{'':<19} {'':<11} {n:>6}  every rank's row by classes equal to the full replay's: "
          f"{by_class == whole}", flush=True)
    validation_share(work, n)


def validation_share(work: Path, n: int, runs: int = 5) -> None:
    """What validating first adds to `trace-replay` (by classes, the default from 256 ranks): the
    least CPU of `runs` alternating runs with and without `--no-validate` (goal: at most 10%)."""
    base = [str(BIN / "trace-replay"), str(work / "w"), "--network", "network.yml", "--system", "system.json"]
    cpu: dict[tuple, list[float]] = {(): [], ("--no-validate",): []}
    for _ in range(runs):  # alternating, so that a change in the machine's load falls on both
        for flag, times in cpu.items():
            times.append(measured(base + list(flag), work)[2])
    validating, not_validating = min(cpu[()]), min(cpu[("--no-validate",)])
    print(f"{'':<19} {'':<11} {n:>6}  validation's share of the replay: "
          f"{(validating - not_validating) / validating:.1%} ({validating:.3f} s CPU validating, "
          f"{not_validating:.3f} s not; least of {runs}; goal <= 10%)", flush=True)


def huge(ranks: int) -> None:
    """A generated GPT of `ranks` ranks (tp 8 x pp 4; 4 layers, 4 microbatches, so that it fits on
    disk and is written in minutes) replayed by its replica classes; ASTRA-sim is not run (hours)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        gpt(work, 8, ranks // 32, 4, layers=4, microbatches=4)
        made = time.perf_counter() - t0
        (work / "network.yml").write_text(network([("Ring", 8, 50.0, 500.0), ("Switch", ranks // 8, 25.0, 700.0)]))
        print(f"(generated in {made:.0f} s)", flush=True)
        prepare(work)
        side_by_side("gpt", work, ranks, "congestion-unaware", None)


def compiled_bytecode() -> None:
    """Compile the package's modules to bytecode, as installing it from a wheel does: where
    PYTHONDONTWRITEBYTECODE is set (this workplace sets it) an editable checkout would otherwise
    compile every module it imports on every command, 0.1 s of a 256-rank replay's 0.4 s."""
    import compileall

    compileall.compile_dir(str(HERE.parent / "chakra_tools"), quiet=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unaware", default=os.environ.get("ASTRA_SIM_CONGESTION_UNAWARE"),
                    help="AstraSim_Analytical_Congestion_Unaware (default: $ASTRA_SIM_CONGESTION_UNAWARE)")
    ap.add_argument("--aware", default=os.environ.get("ASTRA_SIM_CONGESTION_AWARE"),
                    help="AstraSim_Analytical_Congestion_Aware (default: $ASTRA_SIM_CONGESTION_AWARE)")
    ap.add_argument("--ranks", default="256,1024,4096,16384",
                    help="the congestion-unaware GPT's rank counts (multiples of 64)")
    ap.add_argument("--astra-max", type=int, default=4096,
                    help="the largest rank count ASTRA-sim runs at (16,384 ranks take it about half an hour)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scaled", type=Path, default=None, metavar="CAPTURE",
                    help="also a converted capture (its rank-set folder) scaled to each of --ranks")
    ap.add_argument("--huge", type=int, default=None, metavar="RANKS",
                    help="also a GPT of this many ranks replayed by its replica classes, ours only (default "
                         "131072: about 3 minutes to write, 1.2 GB; 0 skips it; --quick skips it)")
    args = ap.parse_args()
    compiled_bytecode()
    for label, given in (("congestion_unaware", args.unaware), ("congestion_aware", args.aware)):
        if not given:
            print(f"ASTRA-sim's {label} binary not given: ours only for that model")
    print(f"{'model':<19} {'workload':<11} {'ranks':>6}  {'ours wall / CPU / peak':>30}  "
          f"{'ASTRA-sim wall / CPU / peak':>31}  {'CPU x':>7}  {'apart':>10}")
    ranks = [64] if args.quick else [int(x) for x in args.ranks.split(",")]
    for n in ranks:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            gpt(work, 8, n // 32, 4)
            (work / "network.yml").write_text(network([("Ring", 8, 50.0, 500.0), ("Switch", n // 8, 25.0, 700.0)]))
            unaware("gpt", work, n, args)
    for n in ranks if args.scaled else ():
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            n = scaled(work, args.scaled, n)
            (work / "network.yml").write_text(network([("Ring", 4, 50.0, 500.0), ("Switch", n // 4, 25.0, 1000.0)]))
            unaware("scaled", work, n, args)
    huge_ranks = args.huge if args.huge is not None else (0 if args.quick else 131072)
    if huge_ranks:
        huge(huge_ranks)
    for name in ("gpt", "chain"):
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            n = (gpt(work, 2, 2, 2) if args.quick else gpt(work, 4, 8, 2)) if name == "gpt" else chain(work, args.quick)
            (work / "network.yml").write_text(network([("Switch", n, 50.0, 500.0)]))
            prepare(work)
            side_by_side(name, work, n, "congestion-aware", astra_run(work, args.aware) if args.aware else None)
    print("CPU x: ASTRA-sim's CPU time over ours (above 1: ours is faster); ours validates the rank set first, "
          "as trace-replay does by default.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
