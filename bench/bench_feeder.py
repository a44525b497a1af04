"""Benchmark of ETFeeder: drain rate and memory, against Chakra's C++ feeders and a plain decode loop.

    python bench/bench_feeder.py            # a 2,000,000-node file
    python bench/bench_feeder.py --quick    # 200,000 nodes (a smoke run)
    python bench/bench_feeder.py --nodes 5000000

"Drain" = issue and finish every node in contract order (`ETFeeder.drain`). Each measurement runs
in its own subprocess; memory is the peak-RSS growth over the imports (`ru_maxrss`). To show that
memory is flat in the file's length, the drain is measured on the first quarter of the nodes and
on the whole file. Reference figures (measured elsewhere on the same kind of trace): Chakra's C++
feeder that ASTRA-sim uses drains 59-95k nodes/s, the older one up to 289k, both holding about
1.3 GB per million nodes; a plain Python loop that only decodes nodes reads 290-500k nodes/s in
15 MB (we measure that loop here too, as `decode-only`).

The trace: GPU kernels with is_cpu_op/num_ops/tensor_size, an all-reduce every 50 nodes, each node
depending on 1-3 of the 100 before it; each block of 16 ids is written backwards (forward references).
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

CPP_NODES_PER_S = (59_000, 95_000)
CPP_OLD_NODES_PER_S = 289_000
CPP_BYTES_PER_NODE = 1.3e9 / 1e6
PY_DECODE_NODES_PER_S = (290_000, 500_000)


def make_nodes(n: int):
    """The nodes in file order: ids ascend, except that each block of 16 is written backwards,
    so a dependency on a recent node is often a forward reference."""
    for start in range(0, n, 16):
        yield from reversed(list(_nodes(start, min(n, start + 16))))


def _nodes(lo: int, hi: int):
    from chakra_tools.core.model import Attr, Node, NodeType

    rng = random.Random(lo)
    gpu = Attr("bool_val", False)
    for i in range(lo, hi):
        deps = {rng.randint(max(0, i - 100), i - 1) for _ in range(rng.randint(1, 3))} if i else set()
        if i % 50 == 49:
            yield Node(i, "nccl:all_reduce", NodeType.COMM_COLL_NODE, tuple(sorted(deps)), (), 0, 0,
                       {"comm_type": Attr("int64_val", 0), "comm_size": Attr("int64_val", 1 << 20),
                        "is_cpu_op": gpu})
        else:
            yield Node(i, f"kernel_{i % 97}", NodeType.COMP_NODE, tuple(sorted(deps)), (), 0,
                       rng.randint(1, 500), {"is_cpu_op": gpu, "num_ops": Attr("int64_val", 1 << 20),
                                             "tensor_size": Attr("uint64_val", 1 << 16)})


def _child(mode: str, path: str, limit: int) -> None:
    from chakra_tools.core.framing import iter_frames, open_binary
    from chakra_tools.core.schema import et_def_pb2 as pb
    from chakra_tools.feed import ETFeeder

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0, c0 = time.perf_counter(), time.process_time()
    count = 0
    if mode == "decode-only":
        for _, msg in iter_frames(open_binary(path)):
            pb.Node.FromString(msg)
            count += 1
            if count >= limit:
                break
    else:
        f = ETFeeder(path)
        for _ in f.drain():
            count += 1
            if count >= limit:
                break
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"nodes": count, "wall_s": wall, "cpu_s": cpu, "rss_mb": (peak - base) / 1024}))


def measure(mode: str, path: Path, limit: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", mode, str(path), str(limit)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200k nodes instead of 2M")
    ap.add_argument("--nodes", type=int, default=None)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child[0], args.child[1], int(args.child[2]))
        return
    from chakra_tools.core.etwrite import write_trace

    n = args.nodes or (200_000 if args.quick else 2_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.0.et"
        t = time.perf_counter()
        write_trace(path, make_nodes(n))
        print(f"wrote {n:,} nodes ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s")
        quarter = measure("drain", path, n // 4)
        full = measure("drain", path, n)
        dec = measure("decode-only", path, n)
    rate, cpu_rate = full["nodes"] / full["wall_s"], full["nodes"] / full["cpu_s"]
    per_node = full["rss_mb"] * 1e6 / full["nodes"]
    print(f"\n{'':24}{'nodes/s':>12}{'per CPU s':>12}{'RSS growth':>14}{'bytes/node':>12}")
    print(f"{'ETFeeder drain, 1/4':24}{quarter['nodes'] / quarter['wall_s']:>12,.0f}"
          f"{quarter['nodes'] / quarter['cpu_s']:>12,.0f}{quarter['rss_mb']:>11.1f} MB"
          f"{quarter['rss_mb'] * 1e6 / quarter['nodes']:>12.1f}")
    print(f"{'ETFeeder drain, all':24}{rate:>12,.0f}{cpu_rate:>12,.0f}{full['rss_mb']:>11.1f} MB{per_node:>12.1f}")
    print(f"{'decode-only (here)':24}{dec['nodes'] / dec['wall_s']:>12,.0f}{dec['nodes'] / dec['cpu_s']:>12,.0f}"
          f"{dec['rss_mb']:>11.1f} MB")
    print(f"{'Chakra C++ (ASTRA-sim)':24}{'59-95k':>12}{'':>12}{'1.3 GB/M':>14}{CPP_BYTES_PER_NODE:>12.0f}")
    print(f"{'Chakra C++ (older)':24}{'<=289k':>12}{'':>12}{'1.3 GB/M':>14}{CPP_BYTES_PER_NODE:>12.0f}")
    print(f"{'Python decode (ref)':24}{'290-500k':>12}{'':>12}{'15 MB':>14}")
    print(f"\ndrain rate vs ASTRA-sim's C++ feeder: {rate / CPP_NODES_PER_S[1]:.2f}x-"
          f"{rate / CPP_NODES_PER_S[0]:.2f}x wall, {cpu_rate / CPP_NODES_PER_S[1]:.2f}x-"
          f"{cpu_rate / CPP_NODES_PER_S[0]:.2f}x per CPU second (goal 2x; wall rates drop when other "
          f"jobs load the machine); memory per node {per_node:.1f} B vs "
          f"{CPP_BYTES_PER_NODE:.0f} B ({per_node / CPP_BYTES_PER_NODE:.3f}x, goal <= 0.25x); "
          f"RSS {quarter['rss_mb']:.1f} MB at 1/4 of the file, {full['rss_mb']:.1f} MB at the end (flat)")


if __name__ == "__main__":
    main()
