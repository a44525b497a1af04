"""The timed communication of a rank set, one sample per instance: every collective (the i-th of a
process group on each of its members) and every matched send/receive, each timed as `--comm
calibrated` times it (calibrate.py), the waiting taken out; an instance's figure is the longest
of its members'. What `trace-convert calibrate` fits a network to (netfit.py)."""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from chakra_tools.core.graph import RankSet
from chakra_tools.core.model import CommType, Node, NodeType
from chakra_tools.feed.info import NodeInfo

from .calibrate import calibrated_ns
from .library import P2P
from .recorded import node_ns, read_rankset


@dataclass(frozen=True)
class CommSample:
    """One collective or send/receive instance: its kind, the ranks in it (send: source,
    destination), its `comm_size`, the longest of its members' calibrated times, where it is."""

    kind: str
    group: tuple[int, ...]
    size: int
    ns: float
    where: str


def comm_samples(path: str | Path, comm_group: str | Path | None = None) -> list[CommSample]:
    """Every timed collective and send/receive of the rank set at `path`, waits taken out."""
    rs = RankSet.load(path, comm_group)
    timelines = read_rankset(path)
    ends = {r: (t.comm_start_ns, t.comm_end_ns) for r, t in timelines.items()}
    return [s for s in (*_collective_samples(rs, ends), *_p2p_samples(rs, ends)) if s is not None]


def _info(node: Node) -> NodeInfo:
    """The fields calibrate.py reads, from a full Node."""
    ns = node_ns(node)
    return NodeInfo(node.id, node.name, int(node.type), node.duration_micros, node.is_cpu_op, 0, 0,
                    node.comm_type, node.comm_size, node.comm_src, node.comm_dst, node.comm_tag,
                    node.pg_name, None, node.start_time_micros, ns or None)


def _sample(kind: str, group: tuple[int, ...], members: list[tuple[int, Node]], ends: dict) -> CommSample | None:
    """An instance's sample: the longest calibrated time of its members; None if none is timed."""
    infos = [_info(n) for _, n in members]
    known = [ends.get(r, ({}, {})) for r, _ in members]
    shares = calibrated_ns(infos, [e.get(n.id) for (_, e), (_, n) in zip(known, members)],
                           [s.get(n.id) for (s, _), (_, n) in zip(known, members)])
    if not shares:
        return None
    r0, n0 = members[0]
    size = max(n.comm_size for _, n in members)
    return CommSample(kind, group, size, max(shares), f"rank {r0} node {n0.id} {n0.name!r}")


def _collective_samples(rs: RankSet, ends: dict) -> Iterable[CommSample | None]:
    per_rank = {r: defaultdict(list) for r in rs.ranks}
    for r in rs.ranks:
        for n in rs[r].nodes.values():
            if n.type is NodeType.COMM_COLL_NODE:
                per_rank[r][n.pg_name].append(n)
    pgs = sorted({pg for seqs in per_rank.values() for pg in seqs})
    for pg in pgs:
        group = tuple(r for r in rs.group_ranks(pg) if r in per_rank)
        count = min(len(per_rank[r][pg]) for r in group)
        for i in range(count):
            members = [(r, per_rank[r][pg][i]) for r in group]
            kind = (members[0][1].comm_type or CommType.ALL_REDUCE).name
            yield _sample(kind, group, members, ends)


def _p2p_samples(rs: RankSet, ends: dict) -> Iterable[CommSample | None]:
    """Sends paired with receives on (source, destination, tag) in issue order, as validate does."""
    recvs: dict[tuple, deque] = defaultdict(deque)
    for r in rs.ranks:
        for n in rs[r].nodes.values():
            if n.type is NodeType.COMM_RECV_NODE:
                recvs[(n.comm_src, r, n.comm_tag)].append(n)
    for r in rs.ranks:
        for n in rs[r].nodes.values():
            queue = recvs.get((r, n.comm_dst, n.comm_tag)) if n.type is NodeType.COMM_SEND_NODE else None
            if queue:
                yield _sample(P2P, (r, n.comm_dst), [(r, n), (n.comm_dst, queue.popleft())], ends)
