"""Per-rank finish times of our replayer against a locally built ASTRA-sim 2.0 (analytical,
congestion-unaware) on the same files and configs: skewed collectives per algorithm, and the
8-rank remote-memory workloads of issue 18 (docs/validation.md, Replay against ASTRA-sim).

    python bench/astra_parity.py --astra /tmp/astra/astra-sim/build/astra_analytical/build/bin/AstraSim_Analytical_Congestion_Unaware
    python bench/astra_parity.py --astra BIN --scaled   # trace-convert scale's outputs (check_scaled)
    python bench/astra_parity.py --astra BIN --rankset RUN-et --calibration NET   # a capture, its fitted network
    python bench/astra_parity.py --astra .../AstraSim_Analytical_Congestion_Aware --model congestion-aware --random 200

Needs the ASTRA-sim binary (REFERENCE §4 says how to build one at 518bd51); nothing in
chakra-tools or its tests depends on it. Each case writes its rank files and configs into a
temporary folder, runs ASTRA-sim there (it writes log/ into its working directory) and reads its
"sys[i] finished, N cycles" lines, then replays the same files with `trace-replay`'s defaults.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
from math import prod
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chakra_tools.core.graph import Graph, RankSet  # noqa: E402
from chakra_tools.core.model import CommType, Node, NodeType, make_attrs  # noqa: E402
from chakra_tools.replay import open_rankset  # noqa: E402
from chakra_tools.replay.spec import SystemSpec  # noqa: E402
from chakra_tools.replay.api import run_replay  # noqa: E402

T = NodeType
MIB = 1 << 20


def comp(i, us, deps=()):
    return Node(i, f"comp{i}", T.COMP_NODE, tuple(deps), duration_micros=us, attrs=make_attrs(is_cpu_op=False))


def allreduce(i, size, deps=(), kind=CommType.ALL_REDUCE):
    return Node(i, f"coll{i}", T.COMM_COLL_NODE, tuple(deps),
                attrs=make_attrs(comm_type=kind, comm_size=size, is_cpu_op=False))


def mem(i, kind, size, deps=()):
    return Node(i, f"{kind}{i}", T.MEM_LOAD_NODE if kind == "load" else T.MEM_STORE_NODE, tuple(deps),
                attrs=make_attrs(tensor_size=size, is_cpu_op=False))


def grouped_allreduce(i, size, pg, deps=()):
    return Node(i, f"coll{i}", T.COMM_COLL_NODE, tuple(deps),
                attrs=make_attrs(comm_type=CommType.ALL_REDUCE, comm_size=size, is_cpu_op=False, pg_name=pg))


def in_groups(groups, offsets_us, size=MIB):
    """Rank r computes offsets_us[r] µs, then an all-reduce of `size` bytes in its group of `groups`
    (name -> ranks, the comm_group.json ASTRA-sim is given)."""
    group_of = {r: name for name, members in groups.items() for r in members}
    return {r: [comp(1, offsets_us[r]), grouped_allreduce(2, size, group_of[r], (1,))] if offsets_us[r]
            else [grouped_allreduce(2, size, group_of[r])] for r in range(len(offsets_us))}


def skewed(n, offsets_us, size=MIB, kind=CommType.ALL_REDUCE):
    """Rank r computes offsets_us[r] µs, then one collective (all-reduce) of `size` bytes."""
    return {r: [comp(1, offsets_us[r]), allreduce(2, size, (1,), kind)] if offsets_us[r]
            else [allreduce(2, size, (), kind)] for r in range(n)}


def memory_chain(n, with_allreduce=True):
    """Per rank: load (1-4 MiB) -> compute 10(r+1) µs -> store 2 MiB -> 8 MiB all-reduce -> load 1 MiB."""
    out = {}
    for r in range(n):
        nodes = [mem(1, "load", (1 + r % 4) * MIB), comp(2, 10 * (r + 1), (1,)), mem(3, "store", 2 * MIB, (2,))]
        if with_allreduce:
            nodes += [allreduce(4, 8 * MIB, (3,)), mem(5, "load", MIB, (4,))]
        out[r] = nodes
    return out


def memory_beside(n):
    """Loads and stores beside the compute and the all-reduce (no dependency between the two)."""
    return {r: [mem(1, "load", (1 + r % 4) * MIB), mem(2, "store", 2 * MIB, (1,)), mem(3, "load", 3 * MIB, (2,)),
                comp(4, 10 * (r + 1)), allreduce(5, 8 * MIB, (4,)), comp(6, 5, (5,))] for r in range(n)}


def system(algorithm="ring", opt="localBWAware", splits=4):
    return {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
            "preferred-dataset-splits": splits, "collective-optimization": opt, "local-mem-bw": 1600,
            "boost-mode": 0, "roofline-enabled": 0, "peak-perf": 900,
            **{f"{c}-implementation": [algorithm]
               for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}}


def per_dimension(sysc: dict, ndims: int) -> dict:
    """One implementation per network dimension (ASTRA-sim asserts no more than the dimensions);
    a longer list, or a tuple (one entry for every dimension, written as it is), is kept."""
    return {k: v * ndims if k.endswith("-implementation") and isinstance(v, list) and len(v) == 1 else v
            for k, v in sysc.items()}


def mixed(**impls) -> dict:
    """system() with some collectives' implementations per dimension, e.g. all_reduce=[...]."""
    return {**system(), **{f"{k.replace('_', '-')}-implementation": v for k, v in impls.items()}}


def network(dims):
    if isinstance(dims, str):  # a network YAML as written
        return dims
    return ("topology: [ " + ", ".join(d[0] for d in dims) + " ]\nnpus_count: [ " + ", ".join(str(d[1]) for d in dims)
            + " ]\nbandwidth: [ " + ", ".join(str(d[2]) for d in dims) + " ]\nlatency: [ "
            + ", ".join(str(d[3]) for d in dims) + " ]\n")


NO_MEMORY = {"memory-type": "NO_MEMORY_EXPANSION"}
PER_NPU = {"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-latency": 500, "remote-mem-bw": 100}
PER_NODE = {"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-latency": 500, "remote-mem-bw": 100,
            "num-nodes": 2, "num-npus-per-node": 4}
POOL = {"memory-type": "MEMORY_POOL", "remote-mem-latency": 800, "remote-mem-bw": 256}
POOL_FRACTIONAL = {"memory-type": "MEMORY_POOL", "remote-mem-latency": 800.7, "remote-mem-bw": 12.5}
RING4, RING8 = [("Ring", 4, 50, 500)], [("Ring", 8, 50, 500)]
GRID = [("Ring", 4, 50, 500), ("Switch", 2, 25, 700)]

CASES = [  # name, ranks, network dims, system, memory
    ("4-rank ring AR, skew 0/3/7/12 us", skewed(4, [0, 3, 7, 12]), RING4, system(), NO_MEMORY),
    ("8-rank ring AR, skew 5 us steps", skewed(8, [5 * r for r in range(8)]), RING8, system(), NO_MEMORY),
    ("8-rank ring AR, one late rank", skewed(8, [0, 0, 0, 40, 0, 0, 0, 0]), RING8, system(), NO_MEMORY),
    ("4-rank direct AR, skew", skewed(4, [0, 3, 7, 12]), RING4, system("direct"), NO_MEMORY),
    ("8-rank direct AR, skew", skewed(8, [5 * r for r in range(8)]), RING8, system("direct"), NO_MEMORY),
    ("4-rank halvingDoubling AR, skew", skewed(4, [0, 3, 7, 12]), RING4, system("halvingDoubling"), NO_MEMORY),
    ("8-rank halvingDoubling AR, skew", skewed(8, [5 * r for r in range(8)]), RING8, system("halvingDoubling"), NO_MEMORY),
    ("8-rank doubleBinaryTree AR, skew", skewed(8, [5 * r for r in range(8)]), RING8, system("doubleBinaryTree"), NO_MEMORY),
    ("8-rank doubleBinaryTree AR, no skew", skewed(8, [0] * 8), RING8, system("doubleBinaryTree"), NO_MEMORY),
    ("4-rank doubleBinaryTree, two ARs of one chunk", {r: [allreduce(1, MIB), comp(2, 3 * r, (1,)), allreduce(3, MIB, (2,))]
                                                      for r in range(4)}, RING4, system("doubleBinaryTree", splits=1),
     NO_MEMORY),
    ("8-rank doubleBinaryTree, three ARs of 3 chunks", {r: [allreduce(1, MIB), allreduce(2, 2 * MIB, (1,)),
                                                           comp(3, 2 * r, (2,)), allreduce(4, MIB, (3,))]
                                                       for r in range(8)}, RING8, system("doubleBinaryTree", splits=3),
     NO_MEMORY),
    ("4-rank doubleBinaryTree AR, skew", skewed(4, [0, 3, 7, 12]), RING4, system("doubleBinaryTree"), NO_MEMORY),
    ("2-rank doubleBinaryTree AR, skew", skewed(2, [0, 7]), [("Ring", 2, 50, 500)], system("doubleBinaryTree"),
     NO_MEMORY),
    ("16-rank doubleBinaryTree AR, skew", skewed(16, [(7 * r) % 11 for r in range(16)]), [("Ring", 16, 50, 500)],
     system("doubleBinaryTree"), NO_MEMORY),
    ("4x2 ring+switch doubleBinaryTree AR, skew", skewed(8, [0, 2, 0, 9, 4, 0, 0, 1]), GRID,
     system("doubleBinaryTree"), NO_MEMORY),
    ("4x2 ring+switch doubleBinaryTree, two ARs of 3 chunks", {r: [allreduce(1, MIB), comp(2, 3 * r, (1,)),
                                                                allreduce(3, 3 * MIB, (2,))] for r in range(8)},
     GRID, system("doubleBinaryTree", splits=3), NO_MEMORY),
    ("4x2 doubleBinaryTree AR on the ring only (reduce-scatter: direct)", skewed(8, [0, 2, 0, 9, 4, 0, 0, 1]), GRID,
     mixed(all_reduce=["doubleBinaryTree", "ring"], reduce_scatter=["direct", "direct"]), NO_MEMORY),
    ("8-rank doubleBinaryTree all-gather, skew", skewed(8, [5 * r for r in range(8)], kind=CommType.ALL_GATHER),
     RING8, system("doubleBinaryTree"), NO_MEMORY),
    ("8-rank doubleBinaryTree reduce-scatter, skew",
     skewed(8, [5 * r for r in range(8)], kind=CommType.REDUCE_SCATTER), RING8, system("doubleBinaryTree"), NO_MEMORY),
    ("6-rank doubleBinaryTree AR (not a power of two), skew", skewed(6, [0, 3, 7, 12, 1, 0]), [("Ring", 6, 50, 500)],
     system("doubleBinaryTree"), NO_MEMORY),
    ("4x3 ring+switch doubleBinaryTree AR (3 not a power of two)", skewed(12, [0] * 12),
     [("Ring", 4, 50, 500), ("Switch", 3, 25, 700)], system("doubleBinaryTree"), NO_MEMORY),
    ("4x2 ring+switch AR, skew", skewed(8, [0, 2, 0, 9, 4, 0, 0, 1]), GRID, system(), NO_MEMORY),
    ("4x2 ring+switch AR, symmetric", skewed(8, [0] * 8), GRID, system(), NO_MEMORY),
    ("4x2 ring+switch AR baseline, skew", skewed(8, [0, 2, 0, 9, 4, 0, 0, 1]), GRID, system(opt="baseline"), NO_MEMORY),
    ("8-rank ring all-gather, skew 5 us steps", skewed(8, [5 * r for r in range(8)], kind=CommType.ALL_GATHER),
     RING8, system(), NO_MEMORY),
    ("8-rank ring reduce-scatter, skew 5 us steps",
     skewed(8, [5 * r for r in range(8)], kind=CommType.REDUCE_SCATTER), RING8, system(), NO_MEMORY),
    ("8-rank ring all-to-all, skew 5 us steps", skewed(8, [5 * r for r in range(8)], kind=CommType.ALL_TO_ALL),
     RING8, system(), NO_MEMORY),
    ("8-rank halvingDoubling reduce-scatter, skew",
     skewed(8, [5 * r for r in range(8)], kind=CommType.REDUCE_SCATTER), RING8, system("halvingDoubling"), NO_MEMORY),
    ("8-rank direct all-gather, skew", skewed(8, [5 * r for r in range(8)], kind=CommType.ALL_GATHER),
     RING8, system("direct"), NO_MEMORY),
    ("4x2 ring+switch all-gather, skew", skewed(8, [0, 2, 0, 9, 4, 0, 0, 1], kind=CommType.ALL_GATHER), GRID,
     system(), NO_MEMORY),
    ("8-rank symmetric ring AR", skewed(8, [0] * 8, 8 * MIB), RING8, system(), NO_MEMORY),
    ("memory chain, PER_NPU 500 ns / 100 GB/s", memory_chain(8), RING8, system(), PER_NPU),
    ("memory chain, PER_NODE 2x4", memory_chain(8), RING8, system(), PER_NODE),
    ("memory chain, POOL 800 ns / 256 GB/s", memory_chain(8), RING8, system(), POOL),
    ("memory chain, POOL 800.7 ns / 12.5 GB/s", memory_chain(8), RING8, system(), POOL_FRACTIONAL),
    ("memory beside compute + AR, PER_NODE 2x4", memory_beside(8), RING8, system(), PER_NODE),
    ("memory beside compute + AR, POOL 800/256", memory_beside(8), RING8, system(), POOL),
    ("memory chain without the AR, POOL", memory_chain(8, False), RING8, system(), POOL),
]

# communicator groups smaller than the system: ASTRA-sim runs them with Ring where the collective's
# implementation list has more than one entry (CommunicatorGroup::get_collective_plan)
DIM0_GROUPS = {"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]}
DIM1_GROUPS = {"1": [0, 4], "2": [1, 5], "3": [2, 6], "4": [3, 7]}
SUBGRID_GROUPS = {"1": [0, 1, 4, 5], "2": [2, 3, 6, 7]}
CROSS_PAIRS = {"1": [0, 5], "2": [1, 4], "3": [2, 7], "4": [3, 6]}
STRIDED_GROUPS = {"1": [0, 2, 4, 6], "2": [1, 3, 5, 7]}
GROUP_CASES = [  # name, groups, ranks, network dims, system, memory
    (f"4x2 {algo}, groups along dim {k}", groups, in_groups(groups, [0, 3, 7, 12, 1, 0, 5, 2]), GRID, system(algo),
     NO_MEMORY)
    for algo in ("ring", "halvingDoubling", "direct", "doubleBinaryTree")
    for k, groups in ((0, DIM0_GROUPS), (1, DIM1_GROUPS))
] + [("8-rank doubleBinaryTree, groups of 4 (one-entry list)", DIM0_GROUPS,
      in_groups(DIM0_GROUPS, [0, 3, 7, 12, 1, 0, 5, 2]), RING8, system("doubleBinaryTree"), NO_MEMORY),
     # groups across both dimensions: ASTRA-sim runs one ring over the members, each message timed
     # on the first dimension where its two ends differ
     ("4x2 ring, 2x2 sub-grid groups {0,1,4,5} {2,3,6,7}", SUBGRID_GROUPS,
      in_groups(SUBGRID_GROUPS, [0, 3, 7, 12, 1, 0, 5, 2]), GRID, system(), NO_MEMORY),
     ("4x2 ring, pairs across both dimensions {0,5} {1,4} {2,7} {3,6}", CROSS_PAIRS,
      in_groups(CROSS_PAIRS, [0, 3, 7, 12, 1, 0, 5, 2]), GRID, system(), NO_MEMORY)] + [
    # one implementation for both dimensions (a list of one entry is kept for groups)
    (f"4x2 {algo} as the one entry, {name} groups", groups, in_groups(groups, [0, 3, 7, 12, 1, 0, 5, 2]), GRID,
     {**system(), **{f"{c}-implementation": (algo,) for c in ("all-reduce", "all-gather", "reduce-scatter",
                                                              "all-to-all")}}, NO_MEMORY)
    for algo in ("halvingDoubling", "direct")
    for name, groups in (("dim 0", DIM0_GROUPS), ("2x2 sub-grid", SUBGRID_GROUPS), ("cross-pair", CROSS_PAIRS))] + [
    (f"8-rank {algo}, {name} groups of 4", groups, in_groups(groups, [0, 3, 7, 12, 1, 0, 5, 2]), RING8, system(algo),
     NO_MEMORY)
    for algo in ("ring", "halvingDoubling", "direct")
    for name, groups in (("contiguous", DIM0_GROUPS), ("strided", STRIDED_GROUPS))]

FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")


def random_partition(rng: random.Random, n: int) -> dict[str, list[int]]:
    """Equal communicator groups of n ranks: contiguous blocks, strided, or shuffled, each
    group's members listed in the order the partition gives (not always ascending)."""
    size = rng.choice([g for g in (2, 4, 8) if g < n and n % g == 0])
    how = rng.choice(("contiguous", "strided", "shuffled"))
    ranks = list(range(n))
    if how == "strided":
        ranks = [r for s in range(n // size) for r in range(s, n, n // size)]
    elif how == "shuffled":
        rng.shuffle(ranks)
    return {str(k + 1): ranks[k * size:(k + 1) * size] for k in range(n // size)}


def random_case(rng: random.Random, max_dims: int = 3) -> tuple:
    """A case nobody wrote: a random network of 1-3 dimensions (Ring, Switch or FullyConnected,
    2-8 NPUs each, random bandwidth and latency), a random system (algorithm per dimension and per
    collective, chunks, active chunks, endpoint delay, optimisation, local memory bandwidth), and
    a random program that every rank runs with its own compute times: compute (GPU or host),
    collectives of random kind and size (on the world or on equal communicator groups, some not
    in rank order), a ring of send/receive, remote-memory loads and stores (with a random memory
    expansion), chained or side by side. Communication keeps one order on every rank, as a real
    program's does. Left out because ASTRA-sim 518bd51 aborts on them: an endpoint delay or link
    latency of 0 (EventQueue assertion), halvingDoubling or doubleBinaryTree all-to-all."""
    ndims = min(max_dims, rng.choice((1, 1, 2, 2, 3)))
    dims = []
    for _ in range(ndims):
        dims.append((rng.choice(("Ring", "Switch", "FullyConnected")), rng.choice((2, 4, 4, 8)),
                     rng.choice((12.5, 25, 50, 100, 200)), rng.choice((1, 100, 500, 700, 2500))))
    n = prod(d[1] for d in dims)
    algos = ("ring", "direct", "halvingDoubling", "doubleBinaryTree")
    sysc = system(splits=rng.choice((1, 2, 3, 4, 8)), opt=rng.choice(("localBWAware", "baseline")))
    one_entry = rng.random() < 0.25  # one implementation for every dimension, written as one entry
    for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        choices = algos[:2] if c == "all-to-all" else algos
        sysc[f"{c}-implementation"] = (rng.choice(choices),) if one_entry else [rng.choice(choices) for _ in dims]
    sysc["active-chunks-per-dimension"] = rng.choice((1, 1, 2))
    sysc["endpoint-delay"] = rng.choice((1, 10, 25))
    sysc["local-mem-bw"] = rng.choice((50, 1600))
    sysc["scheduling-policy"] = rng.choice(("LIFO", "FIFO"))
    groups, memc, ranks = random_program(rng, n)
    name = (f"random: {'x'.join(f'{d[0]}{d[1]}' for d in dims)}, {len(ranks[0])} nodes, "
            f"{list(sysc['all-reduce-implementation'])} {sysc['collective-optimization']} "
            f"splits {sysc['preferred-dataset-splits']}" + describe_program(groups, memc))
    return name, groups, ranks, dims, sysc, memc


def describe_program(groups: dict, memc: dict) -> str:
    return ((f", groups of {len(next(iter(groups.values())))}" if groups else "")
            + (f", {memc['memory-type']}" if memc is not NO_MEMORY else ""))


def random_program(rng: random.Random, n: int, roofline: bool = False) -> tuple[dict, dict, dict]:
    """(groups, memory config, rank -> nodes): random_case's program on n ranks (`roofline`:
    FLOPs on every compute node, which ASTRA-sim needs with roofline-enabled)."""
    groups = random_partition(rng, n) if n > 2 and rng.random() < 0.4 else {}
    group_of = {r: name for name, members in groups.items() for r in members}
    memc = NO_MEMORY
    if rng.random() < 0.3:
        memc = rng.choice((PER_NPU, POOL, {**PER_NODE, "num-nodes": max(1, n // 4), "num-npus-per-node": min(4, n)},
                           {"memory-type": "MEMORY_POOL", "remote-mem-latency": rng.choice((100, 800)),
                            "remote-mem-bw": rng.choice((50, 256))}))
    kinds = (CommType.ALL_REDUCE, CommType.ALL_REDUCE, CommType.ALL_GATHER, CommType.REDUCE_SCATTER,
             CommType.ALL_TO_ALL)
    program = []  # (kind, payload, deps) shared by every rank
    last_comm = None
    for i in range(1, rng.randint(3, 12) + 1):
        deps = {i - 1} | {rng.randint(1, i - 1) for _ in range(rng.randint(0, 1))} \
            if i > 1 and rng.random() < 0.8 else set()
        r = rng.random()
        if r < 0.4:
            # host ops rarely: ASTRA-sim 518bd51 often aborts in its statistics on one
            program.append(("comp", rng.choice((True,) + (False,) * 6 + (None,) * 5), tuple(sorted(deps))))
            continue
        if r < 0.5 and memc is not NO_MEMORY:
            program.append((rng.choice(("load", "store")), rng.choice((4096, MIB, 3 * MIB)), tuple(sorted(deps))))
            continue
        # every rank issues its communication in one order, as a real program does (a collective
        # that ranks issue in different orders meets the wrong peers, in ASTRA-sim and here)
        deps |= {last_comm} if last_comm else set()
        last_comm = i
        if r < 0.85:
            program.append(("coll", (rng.choice(kinds), rng.choice((4096, 65536, MIB, 3 * MIB + 17, 8 * MIB)),
                                     bool(groups) and rng.random() < 0.6), tuple(sorted(deps))))
        else:
            program.append(("p2p", rng.choice((4096, MIB)), tuple(sorted(deps))))
    ranks = {}
    for rank in range(n):
        nodes, nid = [], 0
        for kind, payload, deps in program:
            nid += 1
            if kind == "comp":
                # FLOPs and bytes for a system with roofline-enabled (its time then, not the duration)
                flops = rng.choice((10**9, 3 * 10**10) if roofline else (None, 10**9, 3 * 10**10)) \
                    if payload is not True or roofline else None
                nodes.append(Node(nid, f"comp{nid}", T.COMP_NODE, deps, duration_micros=rng.randint(0, 40),
                                  attrs=make_attrs(is_cpu_op=payload, num_ops=flops,
                                                   tensor_size=rng.choice((1 << 20, 1 << 26)) if flops else None)))
            elif kind in ("load", "store"):
                nodes.append(mem(nid, kind, payload, deps))
            elif kind == "coll":
                nodes.append(Node(nid, f"coll{nid}", T.COMM_COLL_NODE, deps,
                                  attrs=make_attrs(comm_type=payload[0], comm_size=payload[1], is_cpu_op=False,
                                                   pg_name=group_of[rank] if payload[2] else None)))
            else:
                nodes.append(Node(nid, f"send{nid}", T.COMM_SEND_NODE, deps,
                                  attrs=make_attrs(comm_dst=(rank + 1) % n, comm_tag=nid, comm_size=payload,
                                                   is_cpu_op=False)))
        ranks[rank] = nodes
    # a receive for each send, from the rank before, after the send's own dependencies
    for rank, nodes in ranks.items():
        for node in list(nodes):
            if node.type == T.COMM_SEND_NODE:
                nodes.append(Node(len(nodes) + 1, f"recv{node.id}", T.COMM_RECV_NODE, node.data_deps,
                                  attrs=make_attrs(comm_src=(rank - 1) % n, comm_tag=node.id,
                                                   comm_size=node.comm_size, is_cpu_op=False)))
    return groups, memc, ranks


SHIPPED = [  # (system JSON, network YAML) pairs of an ASTRA-sim checkout that run as they are
    (f"inputs/system/analytical/{name}.json", f"inputs/network/{name}.yml")
    for name in ("dgx_v100_4gpu", "hgx_h100_2gpu", "hgx_h100_4gpu", "hgx_h100_8gpu", "hgx_h100_16gpu",
                 "hgx_h100_32gpu", "tpu_v3_8", "tpu_v3_32_ring", "tpu_v3_32_2dtorus")] + [
    ("examples/system/native_collectives/HGX-H100-validated.json", "examples/network/analytical/HGX-H100-validated.yml")
] + [("examples/system/native_collectives/Ring_4chunks.json", f"examples/network/analytical/Ring_{n}npus.yml")
     for n in (4, 8, 16)]


def shipped_case(rng: random.Random, astra_dir: Path, k: int) -> tuple:
    """A random program on the k-th (mod) pair of SHIPPED, the configs as ASTRA-sim ships them
    (fractional bandwidths and latencies, roofline, endpoint delay 1)."""
    sys_path, net_path = SHIPPED[k % len(SHIPPED)]
    # track-local-mem (a memory-use trace, no timing) needs tensor shapes on every node: left off
    sysc = {key: tuple(v) if isinstance(v, list) else v
            for key, v in json.loads((astra_dir / sys_path).read_text()).items()
            if key not in ("track-local-mem", "local-mem-trace-filename")}
    text = (astra_dir / net_path).read_text()
    counts = re.search(r"npus_count:\s*\[([^\]]*)\]", text).group(1)
    n = prod(int(c) for c in counts.split(","))
    groups, memc, ranks = random_program(rng, n, roofline=bool(sysc.get("roofline-enabled")))
    name = f"shipped: {Path(sys_path).name} + {Path(net_path).name}, {len(ranks[0])} nodes" + describe_program(groups, memc)
    return name, groups, ranks, text, sysc, memc


def run_astra(binary: str, work: Path, ranks: int | None = None) -> dict[int, int]:
    """ASTRA-sim's finish time per rank; a RuntimeError where it fails. With `ranks`, an exit
    after every rank finished counts (larger sets often abort in ASTRA-sim's teardown)."""
    groups = work / "comm_group.json"
    out = subprocess.run([binary, f"--workload-configuration={work / 'w'}",
                          f"--system-configuration={work / 'system.json'}",
                          f"--remote-memory-configuration={work / 'memory.json'}",
                          f"--network-configuration={work / 'network.yml'}",
                          *([f"--comm-group-configuration={groups}"] if groups.exists() else [])],
                         cwd=work, capture_output=True, text=True, timeout=120)
    got = {int(r): int(ns) for r, ns in FINISHED.findall(out.stdout + out.stderr)}
    if not got or (out.returncode != 0 and len(got) != ranks):  # some ranks may have printed before it aborted
        why = next((line.strip() for line in (out.stdout + out.stderr).splitlines()
                    if "what():" in line or "Assertion" in line or "Exiting because" in line), "")
        raise RuntimeError(f"ASTRA-sim ended with exit {out.returncode} ({len(got)} ranks finished) {why}\n{out.stdout[-2000:]}")
    return got


def run_ours(work: Path, model: str = "congestion-unaware") -> dict[int, int]:
    feeders, groups = open_rankset(work / "w")
    spec = SystemSpec(work / "network.yml", work / "system.json", work / "memory.json", network_model=model)
    result = run_replay(work / "w", feeders, spec.backend(max(feeders) + 1), groups=groups)
    return {x["rank"]: x["finish_ns"] for x in result.ranks}


def check_rankset(binary: str, rankset: Path, calibration: Path) -> None:
    """A capture (converted or scaled) on the network fitted to it, in ASTRA-sim and in ours: what
    `trace-replay RUN-et --network NET/network.yml --system NET/system.json` predicts is what
    ASTRA-sim predicts from the same files (a 2-rank DDP capture: 0.013% apart)."""
    rs = RankSet.load(rankset)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rs.write(work, "w")
        for name in ("network.yml", "system.json"):
            shutil.copy(calibration / name, work / name)
        (work / "memory.json").write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
        ref, ours = run_astra(binary, work, len(rs)), run_ours(work)
    diffs = {r: (ours[r] - ref[r]) / ref[r] * 100 for r in sorted(ref)}
    print(f"{rankset} on {calibration}: largest difference {max(diffs.values(), key=abs):+.4f}% "
          f"({max((ours[r] - ref[r] for r in ref), key=abs):+,} ns)")
    print("  rank  " + "".join(f"{r:>12}" for r in sorted(ref)))
    print("  ASTRA " + "".join(f"{ref[r]:>12,}" for r in sorted(ref)))
    print("  ours  " + "".join(f"{ours[r]:>12,}" for r in sorted(ref)))


def scaled_cases() -> list[tuple[str, RankSet, RankSet]]:
    """(name, a rank set `trace-convert scale` wrote, the same job written at that degree by its
    own front end): ASTRA-sim 1.0's hybrid Transformer (tp 4) from 8 NPUs to 4 and 16, and the
    generator's tp 2, pp 2 and tp 2 x pp 2 jobs from dp 2 to 4."""
    from chakra_tools.convert.scale import scale_rankset
    from chakra_tools.frontends import TextOptions, TransformerConfig, generate, read_text_workload, text_to_rankset

    text = Path(__file__).resolve().parent.parent.parent / "shared/fixtures/external/astra-sim/text_workloads"
    wl = read_text_workload(text / "Transformer_HybridParallel.txt")
    source = text_to_rankset(wl, TextOptions(npus=8))[0]
    out = [(f"Transformer_HybridParallel.txt, 8 -> {n} NPUs", scale_rankset(source, n // 4)[0],
            text_to_rankset(wl, TextOptions(npus=n))[0]) for n in (4, 16)]
    base = dict(layers=2, hidden=512, heads=8, seq=256, vocab=8192, device="H100", efficiency=0.5)
    for kw in (dict(tp=2), dict(pp=2, microbatches=2), dict(tp=2, pp=2, microbatches=2)):
        degrees = " x ".join(f"{k} {v}" for k, v in kw.items() if k != "microbatches")
        out.append((f"generated {degrees}, dp 2 -> 4", scale_rankset(generate(TransformerConfig(**base, dp=2, batch=16, **kw)), 4)[0],
                    generate(TransformerConfig(**base, dp=4, batch=32, **kw))))
    return out


def check_scaled(binary: str) -> None:
    """ASTRA-sim and our replay, each on a scaled set and on the same job its front end wrote at
    that degree (a Ring of the set's NPUs, 50 GB/s, 500 ns; ring algorithms, one chunk): ASTRA-sim
    reads both the same, and so do we. Ours against ASTRA-sim differs only where a node's
    `duration_ns` is not whole microseconds (ASTRA-sim reads `duration_micros`)."""
    for name, scaled, own in scaled_cases():
        finish = {}
        for label, rs in (("scaled", scaled), ("own", own)):
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp)
                rs.write(work, "w")
                (work / "network.yml").write_text(network((("Ring", len(rs), 50.0, 500.0),)))
                (work / "system.json").write_text(json.dumps(system("ring", "baseline", 1)))
                (work / "memory.json").write_text(json.dumps(NO_MEMORY))
                finish[label] = (run_astra(binary, work, len(rs)), run_ours(work))
        (astra_s, ours_s), (astra_o, ours_o) = finish["scaled"], finish["own"]
        worst = max(abs(ours_s[r] - astra_s[r]) / astra_s[r] for r in astra_s)
        print(f"{name}: {len(scaled)} ranks; ASTRA-sim {'the same' if astra_s == astra_o else 'DIFFERENT'} on the "
              f"scaled set and the job's own ({max(astra_s.values()):,} ns), ours "
              f"{'the same' if ours_s == ours_o else 'DIFFERENT'} ({max(ours_s.values()):,} ns); ours against "
              f"ASTRA-sim: worst rank {worst:.4%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--astra", required=True, help="AstraSim_Analytical_Congestion_Unaware (or _Aware, with --model)")
    ap.add_argument("--model", default="congestion-unaware", choices=("congestion-unaware", "congestion-aware"),
                    help="our network model, against the binary of the same name (congestion-aware: cases of one "
                         "dimension, all ASTRA-sim's congestion_aware backend runs)")
    ap.add_argument("--only", help="run the cases whose name contains this")
    ap.add_argument("--random", type=int, metavar="N", help="N random cases instead (random_case)")
    ap.add_argument("--seed", type=int, default=0, help="the first random case's seed (case k: seed + k)")
    ap.add_argument("--keep", type=Path, help="copy each differing random case's folder under this")
    ap.add_argument("--configs", type=Path, metavar="ASTRA_SIM_DIR",
                    help="with --random: random programs on the system and network configs an ASTRA-sim "
                         "checkout ships (SHIPPED), in turn")
    ap.add_argument("--scaled", action="store_true",
                    help="instead: trace-convert scale's model-parallel outputs against the jobs their front ends "
                         "write at that degree, in ASTRA-sim and ours (check_scaled)")
    ap.add_argument("--rankset", type=Path, metavar="RUN-et",
                    help="instead: this converted (or scaled) rank set on --calibration's network, in ASTRA-sim "
                         "and ours (check_rankset)")
    ap.add_argument("--calibration", type=Path, metavar="NET", help="with --rankset: a trace-convert calibrate folder")
    args = ap.parse_args()
    if args.scaled:
        return check_scaled(args.astra)
    if args.rankset:
        if not args.calibration:
            ap.error("--rankset needs --calibration NET (trace-convert calibrate's folder)")
        return check_rankset(args.astra, args.rankset, args.calibration)
    worst, worst_ns, compared, refused, ties = 0.0, 0, 0, 0, 0
    aware = args.model == "congestion-aware"
    cases = [(name, {}, *rest) for name, *rest in CASES] + GROUP_CASES
    if aware:  # ASTRA-sim's congestion_aware backend runs one dimension only
        cases = [c for c in cases if isinstance(c[3], str) or len(c[3]) == 1]
    if args.random:
        make = (lambda k: shipped_case(random.Random(args.seed + k), args.configs, args.seed + k)) \
            if args.configs else (lambda k: random_case(random.Random(args.seed + k), 1 if aware else 3))
        cases = [(f"seed {args.seed + k}: {c[0]}", *c[1:]) for k in range(args.random) for c in [make(k)]]
    for name, groups, ranks, dims, sysc, memc in cases:
        if args.only and args.only not in name:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            RankSet({r: Graph(nodes, rank=r) for r, nodes in ranks.items()}, groups).write(work, "w")
            if not groups:
                (work / "comm_group.json").unlink(missing_ok=True)
            (work / "system.json").write_text(json.dumps(per_dimension(sysc, len(dims) if not isinstance(dims, str) else 1)))
            (work / "memory.json").write_text(json.dumps(memc))
            (work / "network.yml").write_text(network(dims))
            try:
                ref = run_astra(args.astra, work)
            except RuntimeError as e:
                print(f"\n{name}: ASTRA-sim failed: {str(e).splitlines()[0]}")
                refused += 1
                continue
            ours = run_ours(work, args.model)
            diffs = [(ours[r] - ref[r]) / ref[r] * 100 for r in sorted(ref)]
            if args.keep and max(abs(d) for d in diffs) > 0.1:
                shutil.copytree(work, args.keep / name.split(":")[0].replace(" ", "_"), dirs_exist_ok=True)
        compared += 1
        # the same finish times on other ranks: ranks that reach a shared memory port at the same
        # nanosecond are served in the order of ASTRA-sim's event queue, which we do not model
        permuted = any(diffs) and sorted(ours[r] for r in ref) == sorted(ref.values())
        if permuted:
            ties += 1
        else:
            worst = max(worst, max(abs(d) for d in diffs))
            worst_ns = max(worst_ns, max(abs(ours[r] - ref[r]) for r in ref))
        print(f"\n{name}: largest difference {max(diffs, key=abs):+.4f}% "
              f"({max((ours[r] - ref[r] for r in ref), key=abs):+,} ns)"
              + (": the same finish times, on other ranks (same-ns order at a memory port)" if permuted else ""))
        print("  rank  " + "".join(f"{r:>10}" for r in sorted(ref)))
        print("  ASTRA " + "".join(f"{ref[r]:>10,}" for r in sorted(ref)))
        print("  ours  " + "".join(f"{ours[r]:>10,}" for r in sorted(ref)))
    print(f"\n{compared} cases compared ({refused} that ASTRA-sim could not run left out): worst per-rank "
          f"difference {worst:.4f}% ({worst_ns:,} ns; goal <= 0.1%)"
          + (f", not counting {ties} whose finish times are ASTRA-sim's on other ranks" if ties else ""))


if __name__ == "__main__":
    main()
