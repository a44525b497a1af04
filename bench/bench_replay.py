"""Benchmark of the replayer against ASTRA-sim's analytical backend on the same kind of workload.

    python bench/bench_replay.py            # 8 ranks x 100k nodes, and 64-rank ResNet-50 DP
    python bench/bench_replay.py --quick    # 8 ranks x 10k nodes (a smoke run)

Workloads (generated here, deterministic):

- "8x100k": 8 ranks, 100,000 nodes each: a chain of GPU kernels (1-50 us) with an all-reduce
  (64 KiB-16 MiB) every 50 nodes, i.e. 2,000 all-reduces per rank; one Ring of 8 NPUs, 50 GB/s,
  500 ns; ring all-reduce, 4 chunks. ASTRA-sim's analytical backend replays this in about 13 s
  (about 62k simulated nodes per second, 1 GB).
- "resnet50x64": ResNet-50 data parallel on 64 ranks: per layer a forward kernel, an input-grad
  and a weight-grad kernel and an all-reduce of the layer's weights (4 bytes per parameter, the 54
  conv/fc layers of ASTRA-sim 1.0's Resnet50_DataParallel.txt, 102 MB in all); Ring 8 x Switch 8.
  ASTRA-sim's analytical backend: 1-3 s.

Each replay runs in its own subprocess; the figures are wall time, simulated nodes per second and
peak RSS growth over the imports (`ru_maxrss`). The 8-rank workload runs twice: on the compiled
event loop (`_kernel.c`, what a replay runs) and on the Python loop it is tested against.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

REFERENCE = {
    "8x100k": {"nodes_per_s": 62_000, "wall_s": 13.0, "rss_mb": 1024},
    "resnet50x64": {"wall_s": (1.0, 3.0)},
}

# ResNet-50's conv and fc weight counts (4 bytes each in the all-reduce), in layer order.
RESNET50_PARAMS = [9408] + [4096, 36864, 16384, 16384] + [16384, 36864, 16384] * 2 + \
    [32768, 147456, 65536, 131072] + [65536, 147456, 65536] * 3 + \
    [131072, 589824, 262144, 524288] + [262144, 589824, 262144] * 5 + \
    [524288, 2359296, 1048576, 2097152] + [1048576, 2359296, 1048576] * 2 + [2048000]


def _nodes_8x100k(rank: int, n: int):
    from chakra_tools.core.model import Attr, Node, NodeType

    rng = random.Random(rank)
    gpu = Attr("bool_val", False)
    for i in range(n):
        deps = (i - 1,) if i else ()
        if i % 50 == 49:
            size = Attr("int64_val", 1 << rng.choice(range(16, 25)))
            yield Node(i, "all_reduce", NodeType.COMM_COLL_NODE, deps, (), 0, 0,
                       {"comm_type": Attr("int64_val", 0), "comm_size": size, "is_cpu_op": gpu})
        else:
            yield Node(i, f"kernel_{i % 97}", NodeType.COMP_NODE, deps, (), 0, rng.randint(1, 50),
                       {"is_cpu_op": gpu})


def _nodes_resnet(rank: int):
    from chakra_tools.core.model import Attr, Node, NodeType

    gpu = Attr("bool_val", False)
    L = len(RESNET50_PARAMS)
    nid, prev, out = 0, None, []

    def add(name, ntype, deps, dur=0, attrs=None):
        nonlocal nid
        out.append(Node(nid, name, ntype, tuple(d for d in deps if d is not None), (), 0, dur,
                        {"is_cpu_op": gpu, **(attrs or {})}))
        nid += 1
        return nid - 1

    for i in range(L):
        prev = add(f"fwd{i}", NodeType.COMP_NODE, [prev], 100 + 5 * i)
    for i in reversed(range(L)):
        ig = add(f"ig{i}", NodeType.COMP_NODE, [prev], 100 + 5 * i)
        wg = add(f"wg{i}", NodeType.COMP_NODE, [ig], 100 + 5 * i)
        add(f"ar{i}", NodeType.COMM_COLL_NODE, [wg], 0,
            {"comm_type": Attr("int64_val", 0), "comm_size": Attr("int64_val", 4 * RESNET50_PARAMS[i])})
        prev = ig
    return out


def generate(kind: str, folder: Path, nodes: int) -> Path:
    from chakra_tools.core.etwrite import write_trace

    folder.mkdir(parents=True, exist_ok=True)
    if kind == "8x100k":
        for r in range(8):
            write_trace(folder / f"w.{r}.et", _nodes_8x100k(r, nodes))
        (folder / "net.yml").write_text("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    else:
        nodes_r = _nodes_resnet(0)
        for r in range(64):
            write_trace(folder / f"w.{r}.et", nodes_r)
        (folder / "net.yml").write_text("topology: [ Ring, Switch ]\nnpus_count: [ 8, 8 ]\n"
                                        "bandwidth: [ 200.0, 50.0 ]\nlatency: [ 100.0, 1000.0 ]\n")
    (folder / "sys.json").write_text(json.dumps({
        "scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 4, "all-reduce-implementation": ["ring", "ring"],
        "all-gather-implementation": ["ring", "ring"], "reduce-scatter-implementation": ["ring", "ring"],
        "all-to-all-implementation": ["ring", "ring"], "collective-optimization": "localBWAware",
        "local-mem-bw": 1600}))
    return folder / "w"


def _child(prefix: str, kernel: str) -> None:
    """Run one replay and print its figures as JSON (in a fresh process)."""
    from chakra_tools.replay import AnalyticalBackend, load_network, load_system
    from chakra_tools.replay.api import open_rankset
    from chakra_tools.replay.engine import Replayer

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    folder = Path(prefix).parent
    t0, c0 = time.perf_counter(), time.process_time()
    feeders, groups = open_rankset(prefix)
    be = AnalyticalBackend(load_network(folder / "net.yml"), load_system(folder / "sys.json"))
    res = Replayer(feeders, be, groups=groups, record_events=False, kernel=kernel).run()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    nodes = len(res.ev_node)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"nodes": nodes, "wall_s": wall, "cpu_s": cpu, "nodes_per_s": nodes / wall,
                      "nodes_per_cpu_s": nodes / cpu,
                      "rss_mb": (peak - base) / 1024, "makespan_ns": res.makespan_ns,
                      "collectives": len(res.collectives)}))


def measure(prefix: Path, kernel: str = "auto") -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(prefix), "--kernel", kernel], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 x 10k nodes instead of 8 x 100k")
    ap.add_argument("--nodes", type=int, default=None, help="nodes per rank of the 8-rank workload")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--kernel", default="auto", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.kernel)
        return
    nodes = args.nodes or (10_000 if args.quick else 100_000)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"generating workloads in {tmp} ...", flush=True)
        big = generate("8x100k", Path(tmp) / "big", nodes)
        resnet = generate("resnet50x64", Path(tmp) / "resnet", 0)
        a = measure(big)
        py = measure(big, "python")
        b = measure(resnet)
    ref = REFERENCE["8x100k"]
    print(f"\nworkload 8 ranks x {nodes:,} nodes ({a['collectives']:,} all-reduces):")
    print(f"  ours       {a['nodes_per_s']:>10,.0f} nodes/s  {a['wall_s']:6.2f} s  {a['rss_mb']:7.1f} MB"
          f"  (simulated {a['makespan_ns'] / 1e6:.1f} ms)")
    print(f"  ASTRA-sim  {ref['nodes_per_s']:>10,.0f} nodes/s  {ref['wall_s']:6.2f} s  {ref['rss_mb']:7.1f} MB"
          f"  (8 x 100k, measured elsewhere)")
    print(f"  ratio      {a['nodes_per_s'] / ref['nodes_per_s']:.2f}x the nodes/s (wall); "
          f"{a['nodes_per_cpu_s']:,.0f} nodes per CPU second ({a['nodes_per_cpu_s'] / ref['nodes_per_s']:.2f}x)")
    print(f"  the Python loop: {py['nodes_per_cpu_s']:,.0f} nodes per CPU second, {py['cpu_s']:.2f} s CPU, "
          f"{py['rss_mb']:.1f} MB; the compiled one {py['cpu_s'] / a['cpu_s']:.2f}x its speed"
          + ("" if py["makespan_ns"] == a["makespan_ns"] else "  MAKESPANS DIFFER"))
    print(f"\nworkload ResNet-50 data parallel, 64 ranks ({b['nodes']:,} nodes, {b['collectives']} all-reduces):")
    print(f"  ours       {b['wall_s']:6.2f} s  {b['nodes_per_s']:>10,.0f} nodes/s  {b['rss_mb']:7.1f} MB"
          f"  (simulated step {b['makespan_ns'] / 1e6:.2f} ms)")
    print(f"  (CPU {b['cpu_s']:.2f} s)\n  ASTRA-sim  1-3 s")


if __name__ == "__main__":
    main()
