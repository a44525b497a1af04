"""A converted capture at another data-parallel degree: the same job on more (or fewer) ranks.

Data parallelism is the one degree a trace shows well enough to change without guessing: its
replicas run the same graph, and what ties them together is the data-parallel group's
collectives. The job's layout is read off the graph (`job_layout`): the tensor x data x pipeline
degrees, in Megatron-LM's rank order (core/layout.py), under which every collective's group is
its rank's tensor-parallel group, its data-parallel group, the world, or another group within
its replica (a pipeline group, the first and last stage's embedding group), and every
send/receive joins two stages of one pipeline; where the graph fits several, the groups' recorded
names (Megatron-LM's `group_desc`: TENSOR_MODEL_PARALLEL_GROUP, DATA_PARALLEL_GROUP, ...) and the
most specific reading decide (`job_layout`). A job of `dp` replicas becomes one of `m` by giving each new
rank a copy of the old rank at the same tensor-parallel index and stage in replica `d mod dp` (or
keeping replicas 0..m-1); groups within a replica are copied to each new one, tensor-parallel
groups and pipelines keep their degree, data-parallel
groups and the world are rebuilt at the new one, send/receive peers follow their replica, and
what depends on the degree is resized (the `comm_size` convention of docs/reference/trace-convert.md) on the
groups that change size:

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
  +118..+142% of the real 1-rank step (docs/validation.md, Another data-parallel degree). The converter
  now takes these waits out itself, each from where it lay (`collective_waits_out` in the
  GlobalMetadata); the estimate is for rank sets converted before it.

What the graph shows and cannot be rescaled is refused with an InputError naming the node: a
group or a send/receive that no tensor x data x pipeline layout explains (expert parallelism
across replicas, another rank order), and collectives whose
per-rank size depends on the peers (all-to-all, gather, scatter) on a group that changes size;
an all-to-all of equal shares there is rescaled where asked (`all_to_all="per-rank"`: each rank
keeps its buffer, as the tokens a rank routes to its experts stay when experts spread over more
ranks), never one of unequal shares (alltoallv), whose split at another degree no trace shows.
A job with no collective on a data-parallel group or the world (not even on a group of one, as
DDP makes at one rank: a single process without DDP, a dp-1 pipeline that skips its gradient
all-reduce) is not grown: nothing says what its replicas would exchange.
A collective whose group at the new degree is its rank alone (the gradient all-reduce at dp 1)
is left out, its dependents rewired to its dependencies: it moves nothing, the replay charges it
nothing, and ASTRA-sim never completes a collective without peers.
The tensor-parallel and pipeline degrees themselves are not changed: a new tensor degree
re-splits every layer's matrices, a new pipeline degree moves layers between stages, and the
trace shows neither. What the graph cannot tell apart it takes as data parallelism and says so
(`JobLayout.alternatives`): a 2-rank tensor-parallel job whose group is the world looks like a
DDP job; `tp=` / `pp=` (`--tp`, `--pp`) name the captured degrees. Groups no node uses are
dropped.

The scaled files keep the capture's recorded times but not its measured window: they are a
prediction, nothing in them was measured at the new degree. Each rank's GlobalMetadata says so in
`scaled_from` (core/measured.py: the captured degrees, the batch mode, the captured steps the
times cover), which `trace-visualize report` reads. Replay them with a network model (`--comm
model`, e.g. `trace-convert calibrate`'s): recorded communication times belong to the old degree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from math import ceil
from pathlib import Path
from typing import Iterator

from chakra_tools.core.errors import InputError
from chakra_tools.core.etwrite import with_plain_attrs
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.layout import ParallelLayout
from chakra_tools.core.measured import HOST_END, SCALED_FROM, STEPS, WAITS_OUT, WINDOW, scaled_from, step_windows
from chakra_tools.core.model import CommType, Metadata, Node, NodeType, make_attr
from chakra_tools.core.placement import placement_of, record_placement
from chakra_tools.core.rankfiles import write_ranks

from .joblayout import RESIZE, JobLayout, check_sizes, communication, job_layout, refuse_experts, set_where
from .newgroups import NewGroups
from .stepwaits import step_waits, waits_out, without_wait

BATCH_MODES = ("per-rank", "global")
#: `--all-to-all`: an all-to-all on a group that changes size is refused, or keeps each rank's
#: buffer (`per-rank`: expert parallelism spread over the data-parallel group, each rank's tokens
#: the same at any degree, its equal shares re-split over the new group)
ALL_TO_ALL_MODES = ("refuse", "per-rank")
#: measured at the old degree: not carried into the scaled files
_MEASURED_KEYS = (WINDOW, STEPS, HOST_END)


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
    #: old rank -> ns of collective waiting out of its host ops: taken out by the converter where
    #: it was recorded, else out of its step nodes here (see the module docstring)
    waits_ns: dict[int, int] = field(default_factory=dict)
    #: the degrees kept: tensor parallel, pipeline stages
    tp: int = 1
    pp: int = 1
    #: what each used process group of the capture is: "tp", "dp", "world" or "replica"
    group_kinds: dict[str, str] = field(default_factory=dict)
    #: other (tp, pp) the graph fits as well (it cannot tell them apart; see JobLayout)
    alternatives: list[tuple[int, int]] = field(default_factory=list)
    #: new rank -> collectives left out because their group at the new degree is that rank alone
    lone_dropped: dict[int, int] = field(default_factory=dict)

    @property
    def old_ranks(self) -> int:
        return self.tp * self.old_dp * self.pp

    @property
    def new_ranks(self) -> int:
        return self.tp * self.new_dp * self.pp

    def to_dict(self) -> dict:
        return {"old_dp": self.old_dp, "new_dp": self.new_dp, "tp": self.tp, "pp": self.pp,
                "old_ranks": self.old_ranks, "new_ranks": self.new_ranks, "batch": self.batch,
                "world_group": self.world_group,
                "source_rank": {str(k): v for k, v in self.source_rank.items()},
                "resized": self.resized, "dropped_groups": self.dropped_groups,
                "waits_ns": {str(k): v for k, v in self.waits_ns.items()},
                "group_kinds": self.group_kinds,
                "alternatives": [{"tp": t, "pp": p} for t, p in self.alternatives],
                "lone_dropped": {str(k): v for k, v in self.lone_dropped.items()}}


def scale_rankset(rs: RankSet, dp: int, batch: str = "per-rank", *, tp: int | None = None,
                  pp: int | None = None, all_to_all: str = "refuse") -> tuple[RankSet, ScaleReport]:
    """`rs` at data-parallel degree `dp`, its tensor-parallel and pipeline degrees kept (see the
    module docstring; `tp` / `pp`: the captured degrees, where the graph alone leaves a choice;
    `all_to_all`: `ALL_TO_ALL_MODES`), and what was done."""
    plan = ScalePlan(rs, dp, batch, tp=tp, pp=pp, all_to_all=all_to_all)
    return RankSet(dict(plan.ranks()), plan.groups.groups, rs.prefix), plan.report


class ScalePlan:
    """Everything `rs` at degree `dp` is made from, checked and worked out before any new rank
    is: the layouts, each new rank's source, the new process groups (all of them, so every rank's
    record lists them), the waits to take out, the placement. `ranks()` then makes the ranks one
    at a time: a 16,384-rank set held whole took 10.8 GB."""

    def __init__(self, rs: RankSet, dp: int, batch: str = "per-rank", *, tp: int | None = None,
                 pp: int | None = None, all_to_all: str = "refuse"):
        job = _checked_job(rs, dp, batch, tp, pp, all_to_all)
        self.rs, self.batch = rs, batch
        self.old = old = job.layout
        self.new = new = ParallelLayout(old.tp, dp, old.pp)
        self.source = {}
        for r in range(new.world):
            t, d, p = new.coord(r)
            self.source[r] = old.rank(tp=t, dp=d % old.dp, pp=p)
        self.report = ScaleReport(old.dp, dp, batch, job.world or "0", self.source, tp=old.tp, pp=old.pp,
                                  group_kinds=dict(sorted(job.kinds.items())),
                                  alternatives=[(a.tp, a.pp) for a in job.alternatives])
        self.report.dropped_groups = sorted(pg for pg in rs.comm_groups if pg != job.world and pg not in job.kinds)
        self.groups = self._every_group(rs, job)
        #: each source rank with its nodes' attributes decoded once, as plain dicts: every new rank
        #: copies its source's nodes, and the writer's compiled encoder takes dicts (a file's lazy
        #: attributes sent each of 16,384 ranks' nodes through the Python encoder)
        self.sources = {src: _plain(rs[src]) for src in sorted(set(self.source.values()))}
        self.waits = {r: step_waits(rs[r]) for r in sorted(set(self.source.values()))}
        self.report.waits_ns = {r: sum(w.values()) or waits_out(rs[r]) for r, w in self.waits.items()}
        place = placement_of(rs)
        self.hosts = place.hosts_at(new.world) if place is not None else None  # as many a machine, more machines

    def _every_group(self, rs: RankSet, job: JobLayout) -> NewGroups:
        """The new ranks' process groups, each with its id, met in the order making the ranks
        meets them (so the ids are those a rank-by-rank pass gives): the world first (or what it
        was: the one data-parallel group), then each rank's collectives' and sends' groups."""
        groups = NewGroups(rs, job, self.new)
        if job.world:
            groups.id_for(job.world, 0)
        comm = {src: [(n.type in _PEERED, n.pg_name) for n in rs[src].nodes.values()
                      if n.type in _PEERED or n.type is NodeType.COMM_COLL_NODE] for src in set(self.source.values())}
        for r, src in self.source.items():
            for peered, pg in comm[src]:
                if peered or len(groups.members(pg, r)) > 1:  # a collective of one is left out
                    groups.id_for(pg, r)
        return groups

    def ranks(self) -> Iterator[tuple[int, Graph]]:
        """(new rank, its graph), in rank order, each made as it is asked for."""
        for r, src in self.source.items():
            g = _scaled_graph(self.sources[src], r, self.old, self.new, self.batch, self.groups, self.report,
                              self.waits[src])
            if self.hosts is not None:
                record_placement((g,), self.hosts, None)
            yield r, g


def _checked_job(rs: RankSet, dp: int, batch: str, tp: int | None, pp: int | None, all_to_all: str) -> JobLayout:
    """The captured job's layout, once what cannot be scaled to `dp` is refused (the module
    docstring): unknown modes, expert parallelism read as tensor parallelism, sizes that depend
    on peers, replicas nothing says how to join."""
    if batch not in BATCH_MODES:
        raise InputError(f"--batch {batch!r}: use " + " or ".join(BATCH_MODES))
    if all_to_all not in ALL_TO_ALL_MODES:
        raise InputError(f"--all-to-all {all_to_all!r}: use " + " or ".join(ALL_TO_ALL_MODES))
    if dp < 1:
        raise InputError(f"--dp {dp}: the degree is at least 1")
    comm = communication(rs)
    job = job_layout(rs, tp, pp, comm)
    if tp is None:
        refuse_experts(rs, job, comm)
    if dp != job.layout.dp:
        check_sizes(rs, job, comm, all_to_all)
    if dp > job.layout.dp and not job.synced:
        raise InputError(f"{set_where(rs)}: no collective of the capture is on a data-parallel group or the "
                         "world (not even on a group of one, as DDP makes at one rank), so nothing says what "
                         f"{dp} replicas would exchange; scale does not make them up: capture the job under "
                         "its data parallelism (DDP, FSDP, a framework's), or write it at the new degree "
                         "(trace-convert generate)")
    return job


def _plain(g: Graph) -> Graph:
    """`g` with every node's attributes a plain dict (a file's are decoded on first use)."""
    return Graph(map(with_plain_attrs, g.nodes.values()), rank=g.rank, metadata=g.metadata, source=g.source)


#: sends and receives: their group is renamed for each new rank too (`_repeered`)
_PEERED = (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)


def _scaled_graph(g: Graph, rank: int, old: ParallelLayout, new: ParallelLayout, batch: str,
                  groups: NewGroups, report: ScaleReport, waits: dict[int, int]) -> Graph:
    nodes, lone = [], {}
    for n in g.nodes.values():
        if n.type is NodeType.COMM_COLL_NODE and len(groups.members(n.pg_name, rank)) == 1:
            lone[n.id] = n
        else:
            nodes.append(_scaled_node(without_wait(n, waits.get(n.id, 0)), rank, old, new, batch, groups,
                                      report.resized))
    if lone:
        report.lone_dropped[rank] = len(lone)
        nodes = _spliced(nodes, lone)
    return Graph(nodes, rank=rank, metadata=_metadata(g, rank, old, new, groups, batch))


def _spliced(nodes: list[Node], dropped: dict[int, Node]) -> list[Node]:
    """`nodes` with every dependency on a dropped node replaced by that node's own dependencies
    (transitively), so that what waited for it waits for what it waited for."""
    resolved: dict[int, tuple[int, ...]] = {}

    def through(i: int) -> tuple[int, ...]:
        if i not in dropped:
            return (i,)
        stack = [i]
        while stack:  # iterative: chains of dropped collectives can be long
            top = stack[-1]
            pending = [d for d in dropped[top].deps if d in dropped and d not in resolved and d not in stack]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            out: dict[int, None] = {}
            for d in dropped[top].deps:
                out.update(dict.fromkeys(resolved.get(d, ()) if d in dropped else (d,)))
            resolved[top] = tuple(out)
        return resolved[i]

    def deps(ids: tuple[int, ...], seen: tuple[int, ...] = ()) -> tuple[int, ...]:
        return tuple(d for d in dict.fromkeys(x for i in ids for x in through(i)) if d not in seen)

    out = []
    for n in nodes:
        if any(d in dropped for d in n.deps):
            data = deps(n.data_deps)
            n = n.replace(data_deps=data, ctrl_deps=deps(n.ctrl_deps, data))
        out.append(n)
    return out


def _scaled_node(n: Node, rank: int, old: ParallelLayout, new: ParallelLayout, batch: str,
                 groups: NewGroups, tally: dict[str, int]) -> Node:
    if n.type is NodeType.COMM_COLL_NODE:
        before, after = groups.old_size(n.pg_name), len(groups.members(n.pg_name, rank))
        return _regrouped(_scaled_collective(n, before, after, tally), groups.id_for(n.pg_name, rank))
    if n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
        return _repeered(n, rank, new, groups)
    if n.type is NodeType.COMP_NODE and batch == "global" and old.dp != new.dp:
        tally["COMP"] = tally.get("COMP", 0) + 1
        return _scaled_compute(n, old.dp / new.dp)
    return n


def _regrouped(n: Node, pg: str) -> Node:
    return n if pg == n.pg_name else n.replace(attrs={**n.attrs, "pg_name": make_attr("pg_name", pg)})


def _repeered(n: Node, rank: int, new: ParallelLayout, groups: NewGroups) -> Node:
    """A send/receive of new rank `rank`: its peer the same stage's rank in `rank`'s replica."""
    send = n.type is NodeType.COMM_SEND_NODE
    d = new.coord(rank)[1]
    old_peer = n.comm_dst if send else n.comm_src
    tq, _, pq = groups.job.layout.coord(old_peer)
    peer = new.rank(tp=tq, dp=d, pp=pq)
    ends = {"comm_src": rank, "comm_dst": peer} if send else {"comm_src": peer, "comm_dst": rank}
    attrs = {**n.attrs, **{k: make_attr(k, v) for k, v in ends.items() if k in n.attrs}}
    return _regrouped(n.replace(attrs=attrs), groups.id_for(n.pg_name, rank))


def _scaled_collective(n: Node, old: int, new: int, tally: dict[str, int]) -> Node:
    """A collective whose group goes from `old` to `new` ranks: its recorded group size, and for
    an all-gather the share (`comm_size`, `in_nelems`) total / new; a reduce-scatter's output
    (`out_nelems`). Nothing where the size stays (a tensor-parallel group)."""
    if old == new:
        return n
    kind = n.comm_type if n.comm_type is not None else CommType.ALL_REDUCE
    changes = {"group_size": new} if "group_size" in n.attrs else {}
    if kind is CommType.ALL_GATHER:
        changes.update(comm_size=ceil(n.comm_size * old / new), **_nelems(n, "in_nelems", old / new))
    elif kind in (CommType.REDUCE_SCATTER, CommType.REDUCE_SCATTER_BLOCK):
        changes.update(_nelems(n, "in_nelems", 1 / new, "out_nelems"))
    elif kind is CommType.ALL_TO_ALL:  # each rank's buffer kept, its equal shares over the new group
        for key, total in (("in_split", "in_nelems"), ("out_split", "out_nelems")):
            if key in n.attrs and total in n.attrs:
                changes[key] = [ceil(int(n.attrs[total].value) / new)] * new
        tally[kind.name] = tally.get(kind.name, 0) + 1
    if RESIZE.get(kind) == "share":
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


def _metadata(g: Graph, rank: int, old: ParallelLayout, new: ParallelLayout, groups: NewGroups,
              batch: str) -> Metadata:
    """The rank's GlobalMetadata at the new degree: its rank, the world size, the process groups
    (`NewGroups.records`), `scaled_from`; the measured window left out (see the module docstring)."""
    meta = g.metadata
    attrs = {k: v for k, v in meta.attrs.items() if k not in _MEASURED_KEYS}
    prior = scaled_from(g)
    origin = {"dp": prior["dp"], "tp": prior["tp"], "pp": prior["pp"]} if prior else {"dp": old.dp, "tp": old.tp, "pp": old.pp}
    doc = {"dp": origin["dp"], "batch": batch, "steps": prior["steps"] if prior else len(step_windows(g.metadata)) or None}
    doc.update({k: origin[k] for k in ("tp", "pp") if origin[k] > 1})
    attrs[SCALED_FROM] = make_attr(SCALED_FROM, json.dumps(doc, separators=(",", ":")))
    attrs[WAITS_OUT] = make_attr(WAITS_OUT, True)
    if "rank" in attrs:
        attrs["rank"] = make_attr("rank", rank)
    if "world_size" in attrs:
        attrs["world_size"] = make_attr("world_size", new.world)
    if "process_groups" in attrs:  # every group of the set: ScalePlan made them all first
        attrs["process_groups"] = make_attr("process_groups", groups.records(attrs["process_groups"].value, g.source))
    return Metadata(meta.version, attrs, meta.present)


def scale(path: str | Path, dp: int, out: str | Path, *, batch: str = "per-rank",
          comm_group: str | Path | None = None, check: bool = True, tp: int | None = None,
          pp: int | None = None, all_to_all: str = "refuse") -> ScaleReport:
    """Read the rank set at `path`, rescale it to data-parallel degree `dp` and write
    OUT/<prefix>.<rank>.et + comm_group.json, rank by rank, validated before it is put in place
    (all or nothing: a set that fails validation leaves OUT as it was)."""
    from chakra_tools.core.shapes import LARGE_SET
    from chakra_tools.core.validate import validate_path

    from .run import ConversionCheckError

    rs = RankSet.load(path, comm_group)
    plan = ScalePlan(rs, dp, batch, tp=tp, pp=pp, all_to_all=all_to_all)

    def validated(stage: Path) -> None:
        report = validate_path(stage, by_shape=plan.new.world >= LARGE_SET)
        errors = [d for d in report.diagnostics if d.severity == "error"]
        if errors:
            shown = "\n  ".join(str(d).replace(str(stage), str(out)) for d in errors[:20])
            raise ConversionCheckError(f"the scaled rank set fails validation ({len(errors)} errors), nothing "
                                       f"written:\n  {shown}", errors)

    write_ranks(out, rs.prefix, plan.ranks(), plan.groups.groups, world_size=plan.new.world,
                before_commit=validated if check else None)
    return plan.report
