"""A first summary of any trace: what is in it, how much it communicates, where the time goes.

One pass over the nodes (streaming for files on disk). Durations are the recorded
`duration_micros` summed per node type; they are not a makespan (ops overlap) — replay for that.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable

from .etio import TraceReader
from .graph import RankSet, find_rank_files
from .model import Node, NodeType, format_bytes


class _Tally:
    def __init__(self):
        self.nodes = 0
        self.by_type: Counter = Counter()
        self.micros_by_type: Counter = Counter()
        self.coll_count: Counter = Counter()   # (kind, pg) -> count
        self.coll_bytes: Counter = Counter()   # (kind, pg) -> bytes
        self.p2p: dict[str, Counter] = defaultdict(Counter)
        self.top_ops: Counter = Counter()      # name -> micros (COMP nodes)

    def add(self, n: Node) -> None:
        self.nodes += 1
        t = n.type.short
        self.by_type[t] += 1
        self.micros_by_type[t] += n.duration_micros
        if n.type is NodeType.COMM_COLL_NODE:
            ct = n.comm_type
            key = (ct.name if ct is not None else "UNKNOWN", n.pg_name or "")
            self.coll_count[key] += 1
            self.coll_bytes[key] += n.comm_size
        elif n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
            side = "send" if n.type is NodeType.COMM_SEND_NODE else "recv"
            self.p2p[side]["count"] += 1
            self.p2p[side]["bytes"] += n.comm_size
        elif n.type is NodeType.COMP_NODE and n.duration_micros:
            self.top_ops[n.name] += n.duration_micros


def _rank_doc(rank: int, t: _Tally) -> dict:
    return {
        "rank": rank,
        "nodes": t.nodes,
        "nodes_by_type": dict(sorted(t.by_type.items())),
        "duration_micros_by_type": dict(sorted(t.micros_by_type.items())),
        "collectives": [
            {"comm_type": k, "pg": pg, "count": t.coll_count[(k, pg)], "bytes": t.coll_bytes[(k, pg)]}
            for (k, pg) in sorted(t.coll_count)
        ],
        "send": dict(t.p2p.get("send", {"count": 0, "bytes": 0})),
        "recv": dict(t.p2p.get("recv", {"count": 0, "bytes": 0})),
        "top_ops": [{"name": k, "micros": v} for k, v in t.top_ops.most_common(10)],
    }


def _combine(docs: list[dict]) -> dict:
    total = Counter()
    for d in docs:
        total.update(d["nodes_by_type"])
    return {
        "ranks": len(docs),
        "nodes": sum(d["nodes"] for d in docs),
        "nodes_by_type": dict(sorted(total.items())),
        "per_rank": docs,
    }


def summarize_nodes(nodes: Iterable[Node], rank: int = 0) -> dict:
    t = _Tally()
    for n in nodes:
        t.add(n)
    return _rank_doc(rank, t)


def summarize(rankset: RankSet) -> dict:
    """The summary document of an in-memory rank set (see `summarize_path`)."""
    return _combine([summarize_nodes(g, r) for r, g in zip(rankset.ranks, rankset)])


def summarize_path(path: str | Path, comm_group: str | Path | None = None) -> dict:
    """Summary of a file, folder or prefix, streaming each rank once.

    >>> import tempfile, os
    >>> from chakra_tools.core.etwrite import write_trace
    >>> from chakra_tools.core.model import Node, NodeType, make_attrs
    >>> d = tempfile.mkdtemp()
    >>> _ = write_trace(os.path.join(d, "t.0.et"), [Node(1, "mm", NodeType.COMP_NODE, duration_micros=5),
    ...     Node(2, "ar", NodeType.COMM_COLL_NODE, (1,), attrs=make_attrs(comm_type=0, comm_size=64))])
    >>> s = summarize_path(d)
    >>> s["nodes"], s["per_rank"][0]["collectives"]
    (2, [{'comm_type': 'ALL_REDUCE', 'pg': '', 'count': 1, 'bytes': 64}])
    """
    docs = []
    for rank, f in find_rank_files(path).items():
        docs.append(summarize_nodes(TraceReader(f, rank=rank), rank))
    return _combine(docs)


def _volume(total: int, count: int) -> str:
    """`132.0KiB in all`: a total alone was read as one op's size (`x2 132.0KiB`)."""
    return f"{format_bytes(total)} in all" if count > 1 else format_bytes(total)


def format_summary(s: dict) -> str:
    """The summary as a short text report."""
    lines = [f"{s['ranks']} rank(s), {s['nodes']} nodes: "
             + ", ".join(f"{k} {v}" for k, v in s["nodes_by_type"].items())]
    for d in s["per_rank"]:
        lines.append(f"rank {d['rank']}: {d['nodes']} nodes")
        for t, us in d["duration_micros_by_type"].items():
            if us:
                lines.append(f"  {t:<10} {us / 1000:12.3f} ms recorded")
        for c in d["collectives"]:
            lines.append(f"  {c['comm_type']:<15} pg={c['pg'] or '(world)':<4} x{c['count']:<6} "
                         f"{_volume(c['bytes'], c['count'])}")
        for side in ("send", "recv"):
            if d[side]["count"]:
                lines.append(f"  {side:<15} x{d[side]['count']:<6} {_volume(d[side]['bytes'], d[side]['count'])}")
    return "\n".join(lines)
