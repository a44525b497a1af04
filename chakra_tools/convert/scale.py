"""A converted capture at another data-parallel degree: the same job on more (or fewer) ranks.

Data parallelism is the one degree a trace shows well enough to change without guessing: every
rank runs the same graph, and the only communication is the world group's collectives. So a set
of `n` ranks becomes a set of `m` by giving new rank `r` a copy of old rank `r mod n` (or keeping
ranks 0..m-1), the world group becoming 0..m-1, and resizing what depends on the degree (the
`comm_size` convention of docs/convert.md):

- ALL_REDUCE, BROADCAST, REDUCE, BARRIER: the buffer, unchanged (DDP's gradient all-reduce
  carries the parameter bytes at any degree);
- ALL_GATHER: one rank's share, so ZeRO/FSDP's parameter shard: total / m (rounded up, as FSDP
  pads); REDUCE_SCATTER: the whole input (the full gradient), unchanged;
- compute: unchanged with the per-rank batch fixed (`batch="per-rank"`); with the global batch
  fixed each rank's batch is n/m of what it was, and every compute node's duration and FLOPs
  scale by n/m (all of them: the trace does not tell the optimizer's step from the model's).

What the graph shows and cannot be rescaled is refused with an InputError naming the node:
send/receive (pipeline stages), collectives on a group that is not the world (tensor parallel or
another degree), and collectives whose per-rank size depends on the peers (all-to-all, gather,
scatter). Groups no node uses are dropped. The scaled files keep the capture's recorded times
but not its measured window: they are a prediction, nothing in them was measured at the new
degree; replay them with a network model (`--comm model`, e.g. `trace-convert calibrate`'s),
since recorded communication times belong to the old degree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from math import ceil
from pathlib import Path

from chakra_tools.core.errors import InputError
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import CommType, Metadata, Node, NodeType, make_attr

BATCH_MODES = ("per-rank", "global")
#: collective kind -> how its comm_size follows the degree: "keep" or "share" (total / degree)
RESIZE = {CommType.ALL_REDUCE: "keep", CommType.BROADCAST: "keep", CommType.REDUCE: "keep",
          CommType.BARRIER: "keep", CommType.REDUCE_SCATTER: "keep",
          CommType.REDUCE_SCATTER_BLOCK: "keep", CommType.ALL_GATHER: "share"}
#: measured at the old degree: not carried into the scaled files
_MEASURED_KEYS = ("measured_window_ns", "profiler_steps_ns")


@dataclass
class ScaleReport:
    """What a rescale did: degrees, where each new rank came from, nodes resized, groups dropped."""

    old_dp: int
    new_dp: int
    batch: str
    world_group: str
    source_rank: dict[int, int]
    resized: dict[str, int] = field(default_factory=dict)
    dropped_groups: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"old_dp": self.old_dp, "new_dp": self.new_dp, "batch": self.batch,
                "world_group": self.world_group,
                "source_rank": {str(k): v for k, v in self.source_rank.items()},
                "resized": self.resized, "dropped_groups": self.dropped_groups}


def world_group(rs: RankSet) -> str:
    """The process group of every rank (its comm_group.json id); refuses what is not pure data
    parallelism: ranks that are not 0..n-1, send/receive, collectives on another group or of a
    kind whose size depends on the peers."""
    ranks = tuple(rs.ranks)
    if ranks != tuple(range(len(ranks))):
        raise InputError(f"{_where(rs)}: ranks {list(ranks)} are not 0..{len(ranks) - 1}; scale needs the whole set")
    world = [pg for pg, members in rs.comm_groups.items() if tuple(sorted(members)) == ranks]
    for g in rs:
        for n in g.nodes.values():
            _check_node(rs, g, n, world)
    return world[0] if world else "0"


def _check_node(rs: RankSet, g: Graph, n: Node, world: list[str]) -> None:
    where = f"{g.source or _where(rs)}: rank {g.rank} node {n.id} ({n.name!r})"
    if n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
        raise InputError(f"{where}: a send/receive between ranks (pipeline stages, or other "
                         "point-to-point): scale rescales data parallelism only and does not guess "
                         "how stages would be re-split")
    if n.type is not NodeType.COMM_COLL_NODE:
        return
    pg = n.pg_name
    if pg not in ("", "0") and pg not in world:
        members = rs.comm_groups.get(pg)
        raise InputError(f"{where}: a collective on process group {pg} (ranks {list(members or [])}), "
                         "which is not the world: tensor parallel or another degree, which scale "
                         "cannot rescale")
    kind = n.comm_type if n.comm_type is not None else CommType.ALL_REDUCE
    if kind not in RESIZE:
        raise InputError(f"{where}: a {kind.name} collective, whose per-rank size depends on its "
                         "peers: scale cannot tell what it would be at another degree")


def _where(rs: RankSet) -> str:
    return rs.comm_group_file or "the rank set"


def scale_rankset(rs: RankSet, dp: int, batch: str = "per-rank") -> tuple[RankSet, ScaleReport]:
    """`rs` at data-parallel degree `dp` (see the module docstring), and what was done."""
    if batch not in BATCH_MODES:
        raise InputError(f"--batch {batch!r}: use " + " or ".join(BATCH_MODES))
    if dp < 1:
        raise InputError(f"--dp {dp}: the degree is at least 1")
    world = world_group(rs)
    old = len(rs)
    report = ScaleReport(old, dp, batch, world, {r: r % old for r in range(dp)})
    used = {n.pg_name for g in rs for n in g.nodes.values() if n.type is NodeType.COMM_COLL_NODE}
    report.dropped_groups = sorted(pg for pg in rs.comm_groups if pg != world and pg not in used)
    groups = {pg: tuple(range(dp)) for pg in rs.comm_groups if pg not in report.dropped_groups}
    graphs = {r: _scaled_graph(rs[src], r, old, dp, batch, groups, report)
              for r, src in report.source_rank.items()}
    return RankSet(graphs, groups, rs.prefix), report


def _scaled_graph(g: Graph, rank: int, old: int, dp: int, batch: str,
                  groups: dict[str, tuple[int, ...]], report: ScaleReport) -> Graph:
    nodes = [_scaled_node(n, old, dp, batch, report.resized) for n in g.nodes.values()]
    return Graph(nodes, rank=rank, metadata=_metadata(g, rank, dp, groups))


def _scaled_node(n: Node, old: int, dp: int, batch: str, tally: dict[str, int]) -> Node:
    if n.type is NodeType.COMM_COLL_NODE:
        return _scaled_collective(n, old, dp, tally)
    if n.type is NodeType.COMP_NODE and batch == "global" and old != dp:
        tally["COMP"] = tally.get("COMP", 0) + 1
        return _scaled_compute(n, old / dp)
    return n


def _scaled_collective(n: Node, old: int, dp: int, tally: dict[str, int]) -> Node:
    """A world collective at degree `dp`: its recorded group size, and for an all-gather the
    share (`comm_size`, `in_nelems`) total / dp; a reduce-scatter's output (`out_nelems`)."""
    kind = n.comm_type if n.comm_type is not None else CommType.ALL_REDUCE
    changes = {"group_size": dp} if "group_size" in n.attrs else {}
    if kind is CommType.ALL_GATHER:
        changes.update(comm_size=ceil(n.comm_size * old / dp), **_nelems(n, "in_nelems", old / dp))
    elif kind in (CommType.REDUCE_SCATTER, CommType.REDUCE_SCATTER_BLOCK):
        changes.update(_nelems(n, "in_nelems", 1 / dp, "out_nelems"))
    if old != dp and RESIZE[kind] == "share":
        tally[kind.name] = tally.get(kind.name, 0) + 1
    return n.replace(attrs={**n.attrs, **{k: make_attr(k, v) for k, v in changes.items()}}) if changes else n


def _nelems(n: Node, key: str, f: float, to: str | None = None) -> dict[str, int]:
    """{`to` or `key`: ceil(n's `key` x f)} where n records `key`, else nothing."""
    a = n.attrs.get(key)
    return {to or key: ceil(int(a.value) * f)} if a is not None and isinstance(a.value, int) else {}


def _scaled_compute(n: Node, f: float) -> Node:
    """A compute node with its duration (and FLOPs, for a roofline) times `f`."""
    attrs = dict(n.attrs)
    for key in ("duration_ns", "num_ops"):
        if key in attrs:
            attrs[key] = make_attr(key, round(int(attrs[key].value) * f))
    return n.replace(duration_micros=round(n.duration_micros * f), attrs=attrs)


def _metadata(g: Graph, rank: int, dp: int, groups: dict[str, tuple[int, ...]]) -> Metadata:
    """The rank's GlobalMetadata at the new degree: its rank, the world size, the process groups
    (their recorded names kept); the measured window left out (see the module docstring)."""
    meta = g.metadata
    attrs = {k: v for k, v in meta.attrs.items() if k not in _MEASURED_KEYS}
    if "rank" in attrs:
        attrs["rank"] = make_attr("rank", rank)
    if "world_size" in attrs:
        attrs["world_size"] = make_attr("world_size", dp)
    if "process_groups" in attrs:
        try:
            recorded = dict(json.loads(attrs["process_groups"].value))
        except (ValueError, TypeError):
            raise InputError(f"{g.source}: GlobalMetadata process_groups is not a JSON object of groups") from None
        kept = {pg: {**info, "ranks": list(groups[pg])} for pg, info in recorded.items() if pg in groups}
        attrs["process_groups"] = make_attr("process_groups", json.dumps(kept, separators=(",", ":")))
    return Metadata(meta.version, attrs, meta.present)


def scale(path: str | Path, dp: int, out: str | Path, *, batch: str = "per-rank",
          comm_group: str | Path | None = None, check: bool = True) -> ScaleReport:
    """Read the rank set at `path`, rescale it to `dp` ranks, validate it (all or nothing) and
    write OUT/<prefix>.<rank>.et + comm_group.json."""
    from chakra_tools.core.validate import validate_rankset

    from .run import ConversionCheckError

    scaled, report = scale_rankset(RankSet.load(path, comm_group), dp, batch)
    errors = [d for d in validate_rankset(scaled) if d.severity == "error"] if check else []
    if errors:
        shown = "\n  ".join(str(d) for d in errors[:20])
        raise ConversionCheckError(f"the scaled rank set fails validation ({len(errors)} errors), nothing "
                                   f"written:\n  {shown}", errors)
    scaled.write(out, record_world=True)
    return report
