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
