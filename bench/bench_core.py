"""Benchmark of the core: write, streaming read and validation of a large `.et`, against the
reference's own Python reader (mlc-chakra's protolib + et_def_pb2) on the same file.

    python bench/bench_core.py            # 1,000,000 nodes
    python bench/bench_core.py --quick    # 100,000 nodes (a smoke run)
    python bench/bench_core.py --nodes 2000000

Each measurement runs in its own subprocess, so one step's memory never shows up in the next; the
peak-RSS growth is `ru_maxrss` at the end of the step minus `ru_maxrss` after the imports. To show
that streaming read memory is flat, the read is measured twice: stopping after the first quarter of
the nodes, and over the whole file.

The trace is a realistic mix: COMP nodes with a few attributes (is_cpu_op, num_ops, tensor_size,
a short op schema string), a COMM_COLL (all-reduce / all-gather / reduce-scatter, with comm_type,
comm_size, pg_name) every 50 nodes, each node depending on 1-3 of the 100 nodes before it.
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
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing


# --------------------------------------------------------------------------------------------
# the trace
# --------------------------------------------------------------------------------------------

def make_nodes(n: int):
    from chakra_tools.core.model import Attr, Node, NodeType

    rng = random.Random(0)
    comp, coll = NodeType.COMP_NODE, NodeType.COMM_COLL_NODE
    cpu_false = Attr("bool_val", False)
    schemas = [Attr("string_val", s) for s in ("aten::mm(Tensor self, Tensor mat2) -> Tensor",
                                               "aten::add.Tensor(Tensor self, Tensor other) -> Tensor",
                                               "aten::relu(Tensor self) -> Tensor")]
    for i in range(n):
        deps = tuple(sorted({rng.randint(max(0, i - 100), i - 1) for _ in range(rng.randint(1, 3))})) if i else ()
        if i % 50 == 49:
            attrs = {"comm_type": Attr("int64_val", rng.choice((0, 2, 7))),
                     "comm_size": Attr("int64_val", rng.randint(1, 64) << 20),
                     "pg_name": Attr("string_val", "0"), "is_cpu_op": cpu_false}
            yield Node(i, "nccl:all_reduce", coll, deps, (), i * 10, rng.randint(10, 5000), attrs)
        else:
            attrs = {"is_cpu_op": cpu_false, "num_ops": Attr("int64_val", rng.randint(1, 1 << 30)),
                     "tensor_size": Attr("uint64_val", rng.randint(1, 1 << 24)), "op_schema": rng.choice(schemas)}
            yield Node(i, f"kernel_{i % 97}", comp, deps, (), i * 10, rng.randint(1, 500), attrs)


# --------------------------------------------------------------------------------------------
# the steps (each in its own process)
# --------------------------------------------------------------------------------------------

def step_generate(path: str, n: int) -> int:
    """Only build the nodes (what the write step spends outside the writer)."""
    count = 0
    for _ in make_nodes(n):
        count += 1
    return count


def step_write(path: str, n: int) -> int:
    from chakra_tools.core.etwrite import write_trace

    return write_trace(path, make_nodes(n))


def step_read(path: str, n: int) -> int:
    from chakra_tools.core.etio import iter_nodes

    count = 0
    for _ in iter_nodes(path):
        count += 1
        if count == n:  # stop early: the memory of a read of the first n nodes
            break
    return count


def step_validate(path: str, n: int) -> int:
    from chakra_tools.core.validate import validate_path

    report = validate_path(path)
    if report.error_count:
        raise SystemExit(f"unexpected validation errors: {report.to_dict()['counts']}")
    return report.nodes


def step_decode(path: str, n: int) -> int:
    """The reference's work done our way: our framing, each message parsed into a protobuf Node."""
    from chakra_tools.core.framing import iter_frames, open_binary
    from chakra_tools.core.schema.et_def_pb2 import Node

    count = -1  # the first frame is the GlobalMetadata
    with open_binary(path) as f:
        for _, msg in iter_frames(f, path):
            Node.FromString(msg)
            count += 1
    return count


def step_reference(path: str, n: int) -> int:
    from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
    from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

    f = openFileRd(path)
    decodeMessage(f, GlobalMetadata())
    count = 0
    node = Node()
    while decodeMessage(f, node):
        count += 1
    f.close()
    return count


STEPS = {"generate": step_generate, "write": step_write, "read": step_read, "validate": step_validate,
         "decode": step_decode, "reference": step_reference}
IMPORTS = {"generate": "chakra_tools.core.model", "write": "chakra_tools.core.etio", "read": "chakra_tools.core.etio",
           "decode": "chakra_tools.core.etio",
           "validate": "chakra_tools.core.validate", "reference": "chakra.src.third_party.utils.protolib"}


def child(step: str, path: str, n: int) -> None:
    import importlib

    importlib.import_module(IMPORTS[step])
    if step == "reference":
        importlib.import_module("chakra.schema.protobuf.et_def_pb2")
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    count = STEPS[step](path, n)
    seconds = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    print(json.dumps({"nodes": count, "seconds": seconds, "cpu": cpu, "rss_growth_kib": r1.ru_maxrss - r0.ru_maxrss}))


def run(step: str, path: Path, n: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--_step", step, "--_path", str(path), "--nodes", str(n)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"step {step} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------

def mib(kib: float) -> str:
    return f"{kib / 1024:7.1f} MiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100,000 nodes instead of 1,000,000")
    ap.add_argument("--nodes", type=int, default=None, help="number of nodes (default 1,000,000)")
    ap.add_argument("--_step", help=argparse.SUPPRESS)
    ap.add_argument("--_path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    n = args.nodes or (100_000 if args.quick else 1_000_000)
    if args._step:
        child(args._step, args._path, n)
        return 0

    with tempfile.TemporaryDirectory(prefix="bench_core.") as tmp:
        path = Path(tmp) / "bench.0.et"
        rows = []
        w = run("write", path, n)
        size = path.stat().st_size
        print(f"chakra-tools core benchmark: {n:,} nodes, {size / 2**20:.1f} MiB plain .et "
              f"(COMP with 4 attrs, COMM_COLL every 50th, 1-3 deps each); python {sys.version.split()[0]}")
        gen = run("generate", path, n)
        net = {**w, "seconds": max(w["seconds"] - gen["seconds"], 1e-9), "cpu": max(w["cpu"] - gen["cpu"], 1e-9)}
        rows.append(("(building the nodes alone)", gen))
        rows.append(("ours: write (TraceWriter), incl. building the nodes", w))
        rows.append(("ours: write (TraceWriter), net of building", net))
        quarter = run("read", path, n // 4)
        full = run("read", path, n)
        rows.append((f"ours: streaming read (iter_nodes), first {n // 4:,}", quarter))
        rows.append(("ours: streaming read (iter_nodes), all", full))
        rows.append(("ours: validate (validate_path, streaming)", run("validate", path, n)))
        decode = run("decode", path, n)
        rows.append(("ours: frames + protobuf decode only (reference's work)", decode))
        ref = run("reference", path, n)
        rows.append(("reference: mlc-chakra protolib + et_def_pb2.Node", ref))

        print(f"\n{'step':<54}{'nodes/s':>10}{'wall s':>8}{'nodes/CPU-s':>13}{'CPU s':>8}{'peak RSS growth':>17}")
        for name, r in rows:
            rate, crate = r["nodes"] / max(r["seconds"], 1e-9), r["nodes"] / max(r["cpu"], 1e-9)
            print(f"{name:<54}{rate:>10,.0f}{r['seconds']:>8.2f}{crate:>13,.0f}{r['cpu']:>8.2f}"
                  f"{mib(r['rss_growth_kib']):>17}")
        for name, r in rows:
            if r["nodes"] not in (n, n // 4):
                raise SystemExit(f"{name}: counted {r['nodes']:,} nodes, expected {n:,}")
        ours, theirs = full["nodes"] / full["seconds"], ref["nodes"] / ref["seconds"]
        c_ours, c_theirs = full["nodes"] / full["cpu"], ref["nodes"] / ref["cpu"]
        print(f"\nratio ours/reference, read nodes/s: {ours / theirs:.2f}x wall, {c_ours / c_theirs:.2f}x CPU "
              f"(ours builds an immutable Node with typed attributes; the reference only parses into one "
              f"reused protobuf message)")
        print(f"like for like (framing + protobuf decode, no records): "
              f"{decode['nodes'] / decode['seconds'] / theirs:.2f}x the reference's nodes/s, "
              f"{mib(decode['rss_growth_kib']).strip()} vs {mib(ref['rss_growth_kib']).strip()} peak RSS growth")
        grow = full["rss_growth_kib"] - quarter["rss_growth_kib"]
        print(f"streaming read memory: peak RSS growth {mib(quarter['rss_growth_kib']).strip()} after "
              f"{n // 4:,} nodes vs {mib(full['rss_growth_kib']).strip()} after {n:,} "
              f"({'flat' if grow < 16 * 1024 else 'NOT flat'}: {grow / 1024:+.1f} MiB for 4x the nodes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
