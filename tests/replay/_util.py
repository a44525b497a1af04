"""Tiny inline rank sets for replay tests: build nodes with one-liners, write them, replay them."""

from __future__ import annotations

from pathlib import Path

from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import CommType, Node, NodeType, make_attrs
from chakra_tools.replay import AnalyticalBackend, Dim, NetworkConfig, SystemConfig
from chakra_tools.replay.api import open_rankset
from chakra_tools.replay.engine import Replayer, Resources
from chakra_tools.replay.timing import Captured

T = NodeType


def comp(i, us=1, deps=(), cpu=False, start=0, **attrs):
    return Node(i, f"comp{i}", T.COMP_NODE, tuple(deps), duration_micros=us, start_time_micros=start,
                attrs=make_attrs(is_cpu_op=cpu, **attrs))


def coll(i, size, deps=(), kind=CommType.ALL_REDUCE, pg=None, involved=None, start=0, us=0):
    """`start`, `us`: the recorded start time and duration (µs) a capture would carry."""
    return Node(i, f"coll{i}", T.COMM_COLL_NODE, tuple(deps), start_time_micros=start, duration_micros=us,
                attrs=make_attrs(comm_type=kind, comm_size=size, pg_name=pg, is_cpu_op=False,
                                 involved_dim=involved))


def send(i, dst, size, tag=0, deps=(), start=0, us=0):
    return Node(i, f"send{i}", T.COMM_SEND_NODE, tuple(deps), start_time_micros=start, duration_micros=us,
                attrs=make_attrs(comm_dst=dst, comm_size=size, comm_tag=tag, is_cpu_op=False))


def recv(i, src, size, tag=0, deps=(), start=0, us=0):
    return Node(i, f"recv{i}", T.COMM_RECV_NODE, tuple(deps), start_time_micros=start, duration_micros=us,
                attrs=make_attrs(comm_src=src, comm_size=size, comm_tag=tag, is_cpu_op=False))


def write_rankset(tmp: Path, ranks: dict, groups: dict | None = None) -> Path:
    rs = RankSet({r: Graph(nodes, rank=r) for r, nodes in ranks.items()}, dict(groups or {}))
    rs.write(tmp, "t")
    return tmp / "t"


def ring_net(n=4, bw=50.0, lat=500.0, topo="Ring"):
    return NetworkConfig((Dim(topo, n, bw, lat),))


def backend(net=None, **sys_kw):
    return AnalyticalBackend(net or ring_net(), SystemConfig(**sys_kw))


def run(tmp: Path, ranks: dict, groups=None, be=None, limits=None, window=1 << 16, lanes="kind", kernel="auto",
        **captured_kw):
    """Replay `ranks` with the model, or with `Captured(**captured_kw)` where any is given;
    `kernel`: the event loop (engine.KERNELS)."""
    prefix = write_rankset(tmp, ranks, groups)
    feeders, g = open_rankset(prefix, window=window)
    nranks = max(ranks) + 1
    be = be or backend(ring_net(max(2, nranks)))
    timing = Captured(be, **captured_kw) if captured_kw else be
    return Replayer(feeders, timing, groups=g, resources=Resources(limits or {}, per=lanes), kernel=kernel).run()


def events(result) -> dict:
    """(rank, node) -> (start, end)."""
    return {(result.ev_rank[i], result.ev_node[i]): (result.ev_start[i], result.ev_end[i])
            for i in range(len(result.ev_node))}


def random_gpt_case(rng, tmp_path, case: int):
    """A random generated GPT (tp, dp, pp, microbatches, ZeRO stage) on a random network of 1-4
    dimensions of every topology, with a random collective algorithm, chunking, optimization and
    start rule: (its folder, SystemSpec, CaptureModes, its layout (tp, dp, pp), the network's
    dimensions, the algorithms)."""
    import json

    from chakra_tools.frontends import TransformerConfig, generate
    from chakra_tools.replay import CaptureModes, SystemSpec

    tp, dp, pp, mb = rng.choice([1, 2, 4]), rng.choice([2, 4]), rng.choice([1, 2]), rng.choice([1, 2])
    n = tp * dp * pp
    work = tmp_path / f"c{case}"
    generate(TransformerConfig(layers=1, hidden=256, heads=4, seq=128, batch=mb * dp * 2, vocab=1024, tp=tp,
                               dp=dp, pp=pp, microbatches=mb, zero=rng.choice([0, 1, 2]))).write(work)
    dims, left = [], n
    while left > 1:
        d = rng.choice([x for x in (2, 4) if left % x == 0])
        dims.append(d)
        left //= d
    net = network_file(tmp_path, [rng.choice(["Ring", "Switch", "FullyConnected"]) for _ in dims], dims,
                       f"n{case}.yml")
    algos = rng.choice([["ring"], ["direct"], ["halvingDoubling"], ["doubleBinaryTree"], ["ring"] * len(dims)])
    system = tmp_path / f"s{case}.json"
    system.write_text(json.dumps({
        "endpoint-delay": 10, "active-chunks-per-dimension": 1, "preferred-dataset-splits": rng.choice([1, 4]),
        "collective-optimization": rng.choice(["localBWAware", "baseline"]), "local-mem-bw": 1600,
        **{f"{c}-implementation": algos for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}}))
    modes = CaptureModes(coll_start=rng.choice(["arrival", "last"]))
    return work, SystemSpec(network=net, system=system), modes, (tp, dp, pp), dims, algos


def network_file(tmp_path, topology, npus, name="net.yml"):
    """An ASTRA-sim network file of those dimensions, 50 GB/s and 700 ns each."""
    path = tmp_path / name
    def row(values) -> str:
        return "[ " + ", ".join(map(str, values)) + " ]"

    path.write_text(f"topology: {row(topology)}\nnpus_count: {row(npus)}\nbandwidth: {row(['50.0'] * len(npus))}\n"
                    f"latency: {row(['700.0'] * len(npus))}\n")
    return path


def kineto_event(base_us: float, cat: str, tid, ts_us: float, dur_us: float, name: str, pid=1, **args) -> dict:
    """A Kineto complete event ("X") starting `ts_us` after `base_us` on the trace's clock (a real
    trace's epoch: a time of 0 is no time)."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": base_us + ts_us, "dur": dur_us,
            "args": args}


def kineto_trace(events: list, backend: str | None = None, world: int = 1) -> dict:
    """A Kineto document of `events`; with `backend`, rank 0 of a job of `world` ranks, all in
    one default group."""
    doc = {"schemaVersion": 1, "traceEvents": events}
    if backend is not None:
        doc["distributedInfo"] = {"backend": backend, "rank": 0, "world_size": world, "pg_config": [
            {"pg_name": "0", "pg_desc": "default_pg", "pg_size": world, "ranks": list(range(world))}]}
    return doc
