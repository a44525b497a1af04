"""Our feeder and Chakra's FeederV3 (the one ASTRA-sim 2.0 runs) side by side, on the same inputs
in one run: nodes/s and peak memory, and the ratio.

    python bench/bench_feederv3.py --drain /tmp/astra/drain/feederv3_drain
    python bench/bench_feederv3.py --drain BIN --nodes 200000 --runs 1     # a short run
    python bench/bench_feederv3.py                                          # ours only, says why

The FeederV3 driver is optional and not part of chakra-tools: build it with
`bench/feederv3_drain/build.sh CHAKRA_DIR` against the Chakra sources of an ASTRA-sim checkout
(docs/validation.md, Feeder and replayer speed). Without `--drain` the comparison is skipped with a message and only our
figures are printed.

Inputs: a synthetic DAG (bench_feeder.make_nodes: 2,000,000 nodes by default); rank 0 of the
generated 8-rank GPT (examples/workloads/gpt_8rank.yml, 247 nodes) drained 1,000 times in one
process, a new feeder each time (per-file setup, as for a run of 1,024 rank files); the same
small file once; and the 1,024 rank files of a generated GPT (examples/workloads/gpt_1024rank.yml
cut to 8 layers and 2 microbatches: 34 or 35 nodes each), every feeder opened and held at once, as
a replay of 1,024 ranks holds them, then each drained (there the per-file open time and the memory
per held feeder are what count). Both sides do the same work per node: issue it in dependency
order, read the fields a simulator reads (type, name, duration, is_cpu_op and the kind's
attributes: ours via `ETFeeder.info`, decoded as the node is read, `eager_info=True`, as the
replayer opens its feeders), finish it. Each measurement runs in its own process, `--runs` times;
medians.

Memory, two figures, each side measured the same way (/proc/self/status VmHWM, in its own
process):
- whole process: the peak RSS. The Python interpreter alone (`python -c pass`, about 11 MiB) is
  larger than FeederV3's whole process (about 6 MiB on a small file), so on this figure no
  Python feeder can come near 1/20 of FeederV3; it is printed so that nobody has to guess.
- growth: the peak RSS less the RSS just before the first file is opened (ours: after
  `import chakra_tools.feed`; FeederV3: at the start of main, its libraries loaded), i.e. the
  memory the feeder itself makes the process touch. The fair figure for the feeders, with one
  caveat on tiny inputs: Python's heap already has free, touched pages after the imports, which
  hide a few tens of KiB of ours (a few hundred in the held case), where FeederV3's fresh heap
  shows every page it touches. So the held case also prints ours over the second half of the
  files alone (past those pages): the growth per feeder a larger replay would see.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))


def peak_rss_kb() -> int:
    """The process's peak resident set (VmHWM, kB): ru_maxrss would carry the parent's peak
    across fork and exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _ours(paths: list[str], repeat: int) -> None:
    """Child process: drain each file `repeat` times with a new ETFeeder, reading every node's info."""
    from chakra_tools.feed import ETFeeder

    base = peak_rss_kb()
    t0 = time.perf_counter()
    nodes = files = 0
    for _ in range(repeat):
        for p in paths:
            f = ETFeeder(p, eager_info=True)  # as the replayer opens its feeders: it reads every node
            info = f.info
            for nid in f.drain():
                info(nid)
                nodes += 1
            files += 1
    wall = time.perf_counter() - t0
    peak = peak_rss_kb()
    print(json.dumps({"nodes": nodes, "files": files, "wall_s": wall, "peak_rss_kb": peak, "base_rss_kb": base}))


def _ours_held(paths: list[str]) -> None:
    """Child process: open every file's ETFeeder first and hold them (as a replay of len(paths)
    ranks does), then drain each."""
    from chakra_tools.feed import ETFeeder

    base = peak_rss_kb()
    t0 = time.perf_counter()
    half = len(paths) // 2
    feeders = [ETFeeder(p, eager_info=True) for p in paths[:half]]
    half_rss = peak_rss_kb()  # the second half's growth: past the free pages the imports left
    feeders += [ETFeeder(p, eager_info=True) for p in paths[half:]]
    open_s = time.perf_counter() - t0
    open_rss = peak_rss_kb()
    nodes = 0
    for f in feeders:
        info = f.info
        for nid in f.drain():
            info(nid)
            nodes += 1
    wall = time.perf_counter() - t0
    print(json.dumps({"nodes": nodes, "files": len(paths), "wall_s": wall, "open_s": open_s,
                      "peak_rss_kb": peak_rss_kb(), "open_rss_kb": open_rss, "base_rss_kb": base,
                      "half_rss_kb": half_rss, "half_files": half}))


def measure(cmd: list[str]) -> dict:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_case(drain: str | None, paths: list[str], repeat: int, runs: int) -> dict[str, dict]:
    """Median nodes/s and peak memory of each side over `runs` runs, alternating the sides;
    repeat 0: every file held open at once, then drained."""
    if repeat:
        sides = {"ours": [sys.executable, __file__, "--child", str(repeat), *paths]}
    else:
        sides = {"ours": [sys.executable, __file__, "--child-held", *paths]}
    if drain:
        sides["FeederV3"] = [drain, *(("--repeat", str(repeat)) if repeat else ("--hold",)), *paths]
    got: dict[str, list[dict]] = {k: [] for k in sides}
    for _ in range(runs):
        for name, cmd in sides.items():
            got[name].append(measure(cmd))
    return {name: summarize(rs) for name, rs in got.items()}


def summarize(rs: list[dict]) -> dict:
    out = {"nodes": rs[0]["nodes"], "files": rs[0]["files"],
           "nodes_per_s": statistics.median(r["nodes"] / r["wall_s"] for r in rs),
           "peak_mib": statistics.median(r["peak_rss_kb"] for r in rs) / 1024,
           "growth_mib": statistics.median(r["peak_rss_kb"] - r["base_rss_kb"] for r in rs) / 1024}
    if "open_s" in rs[0]:
        out["open_us_per_file"] = statistics.median(r["open_s"] / r["files"] for r in rs) * 1e6
        out["held_kib_per_file"] = statistics.median((r["open_rss_kb"] - r["base_rss_kb"]) / r["files"] for r in rs)
    if "half_rss_kb" in rs[0] and rs[0]["files"] > rs[0]["half_files"]:
        out["held_kib_second_half"] = statistics.median((r["open_rss_kb"] - r["half_rss_kb"]) / (r["files"] - r["half_files"])
                                                        for r in rs)
    return out


def gpt_rank0(work: Path) -> Path:
    """Rank 0 of the generated 8-rank GPT (247 nodes)."""
    from chakra_tools.frontends.generate import TransformerConfig, generate

    rs = generate(TransformerConfig.from_file(ROOT / "examples" / "workloads" / "gpt_8rank.yml"))
    rs.write(work / "gpt8", "workload")
    return work / "gpt8" / "workload.0.et"


def gpt_ranks(work: Path, ranks: int) -> list[Path]:
    """The rank files of the 1,024-rank GPT, cut to 8 layers and 2 microbatches (34 or 35 nodes
    each); `ranks` of them."""
    from dataclasses import replace

    from chakra_tools.frontends.generate import TransformerConfig, generate

    cfg = TransformerConfig.from_file(ROOT / "examples" / "workloads" / "gpt_1024rank.yml")
    generate(replace(cfg, layers=8, microbatches=2)).write(work / "gpt1024", "workload")
    return [work / "gpt1024" / f"workload.{r}.et" for r in range(ranks)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drain", help="the FeederV3 drain binary (bench/feederv3_drain/build.sh)")
    ap.add_argument("--nodes", type=int, default=2_000_000, help="synthetic DAG size (default 2,000,000)")
    ap.add_argument("--repeat", type=int, default=1000, help="times the GPT rank file is drained (default 1,000)")
    ap.add_argument("--runs", type=int, default=3, help="runs per side and input; medians (default 3)")
    ap.add_argument("--ranks", type=int, default=1024,
                    help="rank files of the held case, at most 1,024 (default 1,024; 0 skips it)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--child-held", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="a smoke run (make bench --quick): small inputs, one run")
    args = ap.parse_args()
    if args.quick:
        args.nodes, args.repeat, args.runs, args.ranks = 20_000, 10, 1, 64
    if args.child:
        _ours(args.child[1:], int(args.child[0]))
        return
    if args.child_held:
        _ours_held(args.child_held)
        return
    if not args.drain:
        print("FeederV3 comparison skipped: no --drain given (build one with bench/feederv3_drain/build.sh "
              "CHAKRA_DIR, where CHAKRA_DIR holds ASTRA-sim's Chakra sources); our figures only\n")
    from bench_feeder import make_nodes
    from chakra_tools.core.etwrite import write_trace

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        dag = work / "dag.0.et"
        write_trace(dag, make_nodes(args.nodes))
        gpt = gpt_rank0(work)
        cases = [(f"synthetic DAG, {args.nodes:,} nodes", [str(dag)], 1),
                 (f"GPT rank 0 (247 nodes) x{args.repeat:,}", [str(gpt)], args.repeat),
                 ("one small file (247 nodes), once", [str(gpt)], 1)]
        if args.ranks:
            ranks = [str(p) for p in gpt_ranks(work, min(args.ranks, 1024))]
            cases.append((f"{len(ranks):,} rank files, held at once", ranks, 0))
        rows = [(name, run_case(args.drain, paths, repeat, args.runs)) for name, paths, repeat in cases]
    print(report(rows, bool(args.drain)))


def report(rows: list[tuple[str, dict[str, dict]]], compared: bool) -> str:
    """The table: nodes/s; memory as the whole process's peak RSS and as its growth over the
    process before the first file (both in MiB); the ratios ours / FeederV3."""
    out = [f"{'input':40}{'side':>10}{'nodes/s':>12}{'whole-process':>15}{'growth':>10}",
           f"{'':40}{'':>10}{'':>12}{'peak MiB':>15}{'MiB':>10}"]
    held = []
    for name, sides in rows:
        for side, s in sides.items():
            out.append(f"{name:40}{side:>10}{s['nodes_per_s']:>12,.0f}{s['peak_mib']:>15.1f}"
                       f"{s['growth_mib']:>10.3f}")
            if "open_us_per_file" in s:
                held.append(f"  {side}: opening {s['files']:,} files {s['open_us_per_file']:,.0f} us per file; "
                            f"{s['held_kib_per_file']:,.2f} KiB growth per held feeder"
                            + (f" ({s['held_kib_second_half']:,.2f} over the second half of the files)"
                               if "held_kib_second_half" in s else ""))
        if "FeederV3" in sides and "held_kib_per_file" in sides["FeederV3"]:
            ours, ref = sides["ours"]["held_kib_per_file"], sides["FeederV3"]["held_kib_per_file"]
            held.append(f"  per held feeder: ours {ours:,.2f} KiB, FeederV3 {ref:,.2f} KiB: "
                        f"{ours / ref:.3f}x (1/{ref / ours:.1f}; goal <= 0.050x)" if ours > 0 and ref > 0 else
                        "  per held feeder: no growth measured on one side, no ratio")
        if "FeederV3" in sides:
            ours, ref = sides["ours"], sides["FeederV3"]
            mem = ours["growth_mib"] / ref["growth_mib"] if ref["growth_mib"] > 0 else float("nan")
            out.append(f"{'':40}{'ours/V3':>10}{ours['nodes_per_s'] / ref['nodes_per_s']:>11.2f}x"
                       f"{ours['peak_mib'] / ref['peak_mib']:>14.2f}x{mem:>9.3f}x")
    if held:
        out += ["", "held case (the feeders of all rank files open at once):", *held]
    out += ["", "memory: whole-process = peak RSS (ours includes the Python interpreter, ~11 MiB bare);",
            "growth = peak RSS less the RSS before the first file is opened (imports and libraries",
            "excluded on both sides): what the feeder itself makes the process touch"]
    if compared:
        out.append("goal: ours >= 2x FeederV3's nodes/s on every input, at <= 1/20 of its memory (growth)")
    return "\n".join(out)


if __name__ == "__main__":
    main()
