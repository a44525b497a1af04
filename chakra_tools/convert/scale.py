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
  scale by n/m (all of them: the trace does not tell the optimizer's step from the model's);
- the old degree's waiting, taken out: where the host thread ran no op while one of its rank's
  collectives was in flight (DDP's backward waits for the gradient all-reduce in no op the
  profiler records), the converter leaves that time in the step's own node (`ProfilerStep#N`,
  exclusive time); it is the old degree's communication, which the replay's network charges
  again at the new one, so it leaves the step node (kept as its `collective_wait_ns`; how it is
  told from the host's own time: `step_waits`). On a 2-rank gloo DDP capture that is most of
  the step node's time (8.1 of 9.4 ms on rank 0's first step): left in, 2 -> 1 predictions were
  +118..+142% of the real 1-rank step (docs/replay.md, What-if at another scale).

What the graph shows and cannot be rescaled is refused with an InputError naming the node:
send/receive (pipeline stages), collectives on a group that is not the world (tensor parallel or
another degree), and collectives whose per-rank size depends on the peers (all-to-all, gather,
scatter). Groups no node uses are dropped. The scaled files keep the capture's recorded times
but not its measured window: they are a prediction, nothing in them was measured at the new
degree; each rank's GlobalMetadata says so in `scaled_from` (JSON: the old degree, the batch
mode, the captured steps the times cover), which `trace-visualize report` reads; replay them with a network model (`--comm model`, e.g. `trace-convert calibrate`'s),
since recorded communication times belong to the old degree.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from math import ceil
from pathlib import Path

from chakra_tools.core.errors import InputError
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.measured import HOST_END, STEPS, WINDOW
from chakra_tools.core.model import CommType, Metadata, Node, NodeType, make_attr

BATCH_MODES = ("per-rank", "global")
#: collective kind -> how its comm_size follows the degree: "keep" or "share" (total / degree)
RESIZE = {CommType.ALL_REDUCE: "keep", CommType.BROADCAST: "keep", CommType.REDUCE: "keep",
          CommType.BARRIER: "keep", CommType.REDUCE_SCATTER: "keep",
          CommType.REDUCE_SCATTER_BLOCK: "keep", CommType.ALL_GATHER: "share"}
#: measured at the old degree: not carried into the scaled files
_MEASURED_KEYS = (WINDOW, STEPS, HOST_END)
#: GlobalMetadata key of a scaled rank: {"dp": old degree, "batch": mode, "steps": captured steps or null}
SCALED_FROM = "scaled_from"


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
    #: old rank -> ns of collective waiting taken out of its step nodes (see the module docstring)
    waits_ns: dict[int, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"old_dp": self.old_dp, "new_dp": self.new_dp, "batch": self.batch,
                "world_group": self.world_group,
                "source_rank": {str(k): v for k, v in self.source_rank.items()},
                "resized": self.resized, "dropped_groups": self.dropped_groups,
                "waits_ns": {str(k): v for k, v in self.waits_ns.items()}}


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
    waits = {r: step_waits(rs[r]) for r in sorted(set(report.source_rank.values()))}
    report.waits_ns = {r: sum(w.values()) for r, w in waits.items()}
    graphs = {r: _scaled_graph(rs[src], r, old, dp, batch, groups, report, waits[src])
              for r, src in report.source_rank.items()}
    return RankSet(graphs, groups, rs.prefix), report


def _scaled_graph(g: Graph, rank: int, old: int, dp: int, batch: str,
                  groups: dict[str, tuple[int, ...]], report: ScaleReport, waits: dict[int, int]) -> Graph:
    nodes = [_scaled_node(_without_wait(n, waits.get(n.id, 0)), old, dp, batch, report.resized)
             for n in g.nodes.values()]
    return Graph(nodes, rank=rank, metadata=_metadata(g, rank, dp, groups, old, batch))


def _scaled_node(n: Node, old: int, dp: int, batch: str, tally: dict[str, int]) -> Node:
    if n.type is NodeType.COMM_COLL_NODE:
        return _scaled_collective(n, old, dp, tally)
    if n.type is NodeType.COMP_NODE and batch == "global" and old != dp:
        tally["COMP"] = tally.get("COMP", 0) + 1
        return _scaled_compute(n, old / dp)
    return n


STEP_NODE = re.compile(r"^ProfilerStep#\d+$")


def step_waits(g: Graph) -> dict[int, int]:
    """{step node id: ns of its exclusive time that was waiting for a collective}. The step
    node's exclusive time is the step's time in no op of its thread: Python between ops, and the
    waits no op records. Within each captured step (`profiler_steps_ns`) the thread's idle
    stretches are estimated (its ops each at its start for its `duration_ns`: a parent's span is
    not recorded, so they cover too little), and the step node's time is split in proportion to
    how much of that idle time a collective of the rank was in flight through (from its start to
    its end; a `launch_only` one, whose end the capture cut off, to the step's end). Nothing
    without the step windows."""
    a = g.metadata.attrs.get("profiler_steps_ns")
    if a is None or not isinstance(a.value, tuple) or len(a.value) < 2:
        return {}
    windows = list(zip(a.value[0::2], a.value[1::2]))
    steps = [n for n in g.nodes.values() if n.type is NodeType.COMP_NODE and STEP_NODE.match(n.name)]
    colls = [(*_span(n), bool(n.attr("launch_only"))) for n in g.nodes.values()
             if n.type is NodeType.COMM_COLL_NODE and n.start_time_micros]
    out = {}
    for step in steps:
        start = step.start_time_micros * 1000
        window = next(((s, e) for s, e in windows if s - 1000 < start < e), None)
        if window is None or not colls:
            continue
        host = [_span(n) for n in g.nodes.values() if n is not step and n.type is NodeType.COMP_NODE
                and n.is_cpu_op and n.attr("tid") == step.attr("tid") and n.start_time_micros]
        idle = _minus([window], _union(host))
        total = sum(e - s for s, e in idle)
        flight = _union([(cs, window[1] if launch_only else ce) for cs, ce, launch_only in colls])
        busy = sum(min(e, ce) - max(s, cs) for s, e in idle for cs, ce in flight if min(e, ce) > max(s, cs))
        if busy > 0:
            out[step.id] = round(_ns(step) * busy / total)
    return out


def _ns(n: Node) -> int:
    a = n.attrs.get("duration_ns")
    return int(a.value) if a is not None else n.duration_micros * 1000


def _span(n: Node) -> tuple[int, int]:
    return n.start_time_micros * 1000, n.start_time_micros * 1000 + _ns(n)


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        elif e > s:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _minus(spans: list[tuple[int, int]], cut: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` less the sorted, disjoint `cut`."""
    out = []
    for s, e in spans:
        for cs, ce in cut:
            if ce <= s or cs >= e:
                continue
            if cs > s:
                out.append((s, cs))
            s = max(s, ce)
        if e > s:
            out.append((s, e))
    return out


def _without_wait(n: Node, wait_ns: int) -> Node:
    """A step node less `wait_ns` of its exclusive time (kept as `collective_wait_ns`)."""
    if wait_ns <= 0:
        return n
    ns = _ns(n) - wait_ns
    return n.replace(duration_micros=max(1, round(ns / 1000)) if ns > 0 else 0,
                     attrs={**n.attrs, "duration_ns": make_attr("duration_ns", ns),
                            "collective_wait_ns": make_attr("collective_wait_ns", wait_ns)})


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


def _metadata(g: Graph, rank: int, dp: int, groups: dict[str, tuple[int, ...]], old: int, batch: str) -> Metadata:
    """The rank's GlobalMetadata at the new degree: its rank, the world size, the process groups
    (their recorded names kept), `scaled_from`; the measured window left out (see the module
    docstring)."""
    meta = g.metadata
    attrs = {k: v for k, v in meta.attrs.items() if k not in _MEASURED_KEYS}
    prior = scaled_from(g)
    attrs[SCALED_FROM] = make_attr(SCALED_FROM, json.dumps(
        {"dp": prior["dp"] if prior else old, "batch": batch,
         "steps": prior["steps"] if prior else _captured_steps(g)}, separators=(",", ":")))
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


def _captured_steps(g: Graph) -> int | None:
    """How many captured steps the rank's times cover: its profiler step windows (start, end
    pairs), else None."""
    a = g.metadata.attrs.get("profiler_steps_ns")
    return len(a.value) // 2 if a is not None and isinstance(a.value, tuple) and len(a.value) >= 2 else None


def scaled_from(g: Graph) -> dict | None:
    """A scaled rank's `scaled_from` ({"dp", "batch", "steps"}), None for a rank that was not
    scaled; an InputError for one that does not read."""
    a = g.metadata.attrs.get(SCALED_FROM)
    if a is None:
        return None
    try:
        doc = json.loads(a.value)
        ok = (isinstance(doc, dict) and isinstance(doc.get("dp"), int) and doc["dp"] >= 1
              and isinstance(doc.get("batch"), str)
              and (doc.get("steps") is None or isinstance(doc["steps"], int) and doc["steps"] >= 1))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise InputError(f"{g.source or f'rank {g.rank}'}: GlobalMetadata {SCALED_FROM} is not "
                         '{"dp": int, "batch": str, "steps": int or null}')
    return {"dp": doc["dp"], "batch": doc["batch"], "steps": doc.get("steps")}


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
