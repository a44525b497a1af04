"""A captured job's tensor x data x pipeline layout as its graph shows it (`job_layout`): which
layout, in Megatron-LM's rank order (core/layout.py), explains every group a collective uses and
every send/receive peer, which kind each group is ("tp", "dp", "world" or "replica"), what the
groups' recorded names (`group_desc`) settle, and which other layouts fit as well; and what a
change of the data-parallel degree cannot rescale under it (`refuse_experts`, `check_sizes`).
What `trace-convert scale` (scale.py) rewrites a job by.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from chakra_tools.core.errors import InputError
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.layout import ParallelLayout
from chakra_tools.core.model import CommType, Node, NodeType


#: collective kind -> how its comm_size follows the degree: "keep" or "share" (total / degree)
RESIZE = {CommType.ALL_REDUCE: "keep", CommType.BROADCAST: "keep", CommType.REDUCE: "keep",
          CommType.BARRIER: "keep", CommType.REDUCE_SCATTER: "keep",
          CommType.REDUCE_SCATTER_BLOCK: "keep", CommType.ALL_GATHER: "share"}


def set_where(rs: RankSet) -> str:
    return rs.comm_group_file or "the rank set"


def node_where(rs: RankSet, g: Graph, n: Node) -> str:
    return f"{g.source or set_where(rs)}: rank {g.rank} node {n.id} ({n.name!r})"


@dataclass(frozen=True)
class JobLayout:
    """A captured job's parallel layout as its graph shows it."""

    layout: ParallelLayout
    #: process group id (as the nodes name it) -> "tp", "dp", "world" or "replica" (another group
    #: within one replica: a pipeline group, an embedding group), for every group a collective or
    #: a send/receive uses
    kinds: dict[str, str]
    #: the world group's id in comm_group.json ("" where it has none)
    world: str
    #: other layouts the graph fits as well (e.g. tp=2 for a 2-rank job whose collectives are
    #: on the world: DDP and tensor parallelism look the same); `layout` has the largest dp
    alternatives: tuple[ParallelLayout, ...] = ()
    #: some collective is on a group that grows with dp (data-parallel or the world): what the
    #: replicas exchange, without which more of them would be independent jobs
    synced: bool = False


@dataclass
class Communication:
    """Every (rank, group) a collective uses, with the group's members, and every (rank, peer) a
    send/receive joins, each with its first node (to name it): what a layout has to explain; and
    the first node of each collective kind on each group (what `check_sizes` looks at)."""

    collectives: dict[tuple[int, str], tuple[Graph, Node, tuple[int, ...]]] = field(default_factory=dict)
    p2p: dict[tuple[int, int], tuple[Graph, Node]] = field(default_factory=dict)
    p2p_groups: dict[str, tuple[Graph, Node]] = field(default_factory=dict)
    kinds: dict[tuple[str, CommType], tuple[Graph, Node]] = field(default_factory=dict)


def job_layout(rs: RankSet, tp: int | None = None, pp: int | None = None,
               comm: Communication | None = None) -> JobLayout:
    """The tensor x data x pipeline layout (Megatron-LM's rank order) that explains every group
    and send/receive of `rs`, with `tp` / `pp` where given. Of those that fit: the one the groups'
    recorded names do not contradict (`group_names`), then the one that explains the most groups
    as tensor-parallel, data-parallel or the world rather than merely "within a replica" (at dp 1
    every group is), then one that reads no group of one rank as tensor parallel (a framework
    skips a tensor-parallel collective of one rank; DDP all-reduces over a data-parallel group of
    one), then the largest data-parallel degree. A layout with tp > 1 has to put some collective
    on a tensor-parallel group, one with pp > 1 a send/receive on every rank, or any job would fit
    them. An InputError naming the first group or node that does not fit where none does.
    (`comm`: `communication(rs)`, where the caller has it.)"""
    ranks = tuple(rs.ranks)
    if ranks != tuple(range(len(ranks))):
        raise InputError(f"{set_where(rs)}: ranks {list(ranks)} are not 0..{len(ranks) - 1}; scale needs the whole set")
    for name, given in (("--tp", tp), ("--pp", pp)):
        if given is not None and (given < 1 or len(ranks) % given):
            raise InputError(f"{name} {given}: the captured degree divides the rank count {len(ranks)}")
    if tp and pp and len(ranks) % (tp * pp):
        raise InputError(f"--tp {tp} x --pp {pp} does not divide the rank count {len(ranks)}")
    comm = comm or communication(rs)
    fits = [(lay, _fit(rs, lay, comm)) for lay in _layouts(len(ranks), tp, pp)]
    names = group_names(rs)
    for _, fit in fits:
        fit.misnamed = sum(kind not in NAMED_AS[names[pg]] for pg, kind in fit.kinds.items() if pg in names)
    # what the capture's group names contradict last, then the loosest readings, then groups of one
    # read as tensor parallel; within those the order of _layouts (largest dp first)
    good = sorted(((lay, fit) for lay, fit in fits if fit.reason is None),
                  key=lambda pair: (pair[1].misnamed, pair[1].loose, pair[1].degenerate))
    if not good:
        reason = max((fit for _, fit in fits), key=lambda fit: fit.explained).reason
        given = " ".join(f"{k}={v}" for k, v in (("tp", tp), ("pp", pp)) if v)
        which = f"the layout {given} does not explain it" if given else "no tensor x data x pipeline layout explains it"
        raise InputError(f"{reason}; {which} (Megatron-LM's rank order: tensor-parallel ranks innermost, then "
                         "data, then stages), so scale cannot tell what it becomes at another degree")
    lay, kinds = good[0][0], good[0][1].kinds
    world = next((pg for pg, members in rs.comm_groups.items() if tuple(sorted(members)) == ranks), "")
    synced = any(kinds[pg] in ("dp", "world") for _, pg in comm.collectives)
    # the other readings as good as this one: what the graph (and the names) cannot tell apart
    same = (good[0][1].misnamed, good[0][1].loose)
    others = tuple(f for f, fit in good[1:] if (fit.misnamed, fit.loose) == same)
    return JobLayout(lay, kinds, world, others, synced)


#: what a process group's recorded description (`group_desc`, Megatron-LM's parallel_state.py
#: names its groups so) says it is: "tp", "dp" or "replica" (within one replica)
GROUP_NAMES = {"TENSOR_MODEL_PARALLEL_GROUP": "tp", "DATA_PARALLEL_GROUP": "dp",
               "DATA_PARALLEL_GROUP_WITH_CP": "dp", "PIPELINE_MODEL_PARALLEL_GROUP": "replica",
               "EMBEDDING_GROUP": "replica", "POSITION_EMBEDDING_GROUP": "replica",
               "MODEL_PARALLEL_GROUP": "replica"}
#: the kinds a layout may make of a group the capture names as each
NAMED_AS = {"tp": ("tp",), "dp": ("dp", "world"), "replica": ("replica", "tp")}


def group_names(rs: RankSet) -> dict[str, str]:
    """{process group id: "tp", "dp" or "replica"} for the groups whose recorded description
    (GlobalMetadata `process_groups`, from PyTorch's `group_desc`) is one of `GROUP_NAMES`: what
    the job itself called them, which settles what its graph alone cannot (a tensor-parallel
    group of the world, a dp group that looks like a tp group)."""
    first = rs[rs.ranks[0]] if rs.ranks else None
    a = first.metadata.attrs.get("process_groups") if first is not None else None
    try:
        recorded = json.loads(a.value) if a is not None else {}
    except (TypeError, ValueError):
        return {}
    return {str(pg): GROUP_NAMES[info["desc"]] for pg, info in (recorded.items() if isinstance(recorded, dict) else ())
            if isinstance(info, dict) and info.get("desc") in GROUP_NAMES}


def _layouts(world: int, tp: int | None, pp: int | None) -> list[ParallelLayout]:
    """Every tp x dp x pp = world with the given degrees, largest dp first (then smallest tp)."""
    out = [ParallelLayout(t, world // (t * p), p) for t in range(1, world + 1) if world % t == 0
           for p in range(1, world // t + 1) if (world // t) % p == 0
           if (tp is None or t == tp) and (pp is None or p == pp)]
    return sorted(out, key=lambda lay: (-lay.dp, lay.tp))


def communication(rs: RankSet) -> Communication:
    comm = Communication()
    for g in rs:
        for n in g.nodes.values():
            if n.type is NodeType.COMM_COLL_NODE:
                if (g.rank, n.pg_name) not in comm.collectives:
                    comm.collectives[g.rank, n.pg_name] = (g, n, group_members(rs, g, n))
                kind = n.comm_type if n.comm_type is not None else CommType.ALL_REDUCE
                comm.kinds.setdefault((n.pg_name, kind), (g, n))
            elif n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
                peer = n.comm_dst if n.type is NodeType.COMM_SEND_NODE else n.comm_src
                if peer is None or peer not in rs.ranks or peer == g.rank:
                    raise InputError(f"{node_where(rs, g, n)}: a send/receive whose peer ({peer}) is not "
                                     f"another rank of the set")
                comm.p2p.setdefault((g.rank, peer), (g, n))
                comm.p2p_groups.setdefault(n.pg_name, (g, n))
    return comm


def group_members(rs: RankSet, g: Graph, n: Node) -> tuple[int, ...]:
    pg = n.pg_name
    if pg in ("", "0"):
        return tuple(rs.ranks)
    members = rs.comm_groups.get(pg)
    if members is None:
        raise InputError(f"{node_where(rs, g, n)}: process group {pg} is not in {set_where(rs)}")
    return tuple(sorted(members))


@dataclass
class _Fit:
    """How far a layout explains a rank set: the kind of each group it placed, the pairs it
    explained before the first it could not (so that a refusal shows the reason of the layout
    that came furthest), and that reason (None: it explains everything)."""

    kinds: dict[str, str] = field(default_factory=dict)
    explained: int = 0
    reason: str | None = None
    #: groups of one rank it takes as tensor parallel: a degenerate reading (frameworks skip a
    #: tensor-parallel collective of one rank; DDP all-reduces over a data-parallel group of one)
    degenerate: int = 0
    #: collective groups it explains only as "within one replica" (any group is, at dp 1): the
    #: loosest reading, so a layout that explains more groups as tp, dp or world comes first,
    #: and `explained` does not count them
    loose: int = 0
    #: groups the capture names (`GROUP_NAMES`) as something else than this layout makes them
    misnamed: int = 0


def _fit(rs: RankSet, lay: ParallelLayout, comm: Communication) -> _Fit:
    world = tuple(rs.ranks)
    fit = _Fit()
    for (rank, pg), (g, n, members) in comm.collectives.items():
        kind = _group_kind(members, rank, lay, world)
        if rank not in members:
            fit.reason = f"{node_where(rs, g, n)}: a collective on process group {pg} {list(members)}, which rank {rank} is not in"
        elif kind is None:
            fit.reason = (f"{node_where(rs, g, n)}: a collective on process group {pg} (ranks {list(members)}), "
                          f"which is neither within rank {rank}'s replica (its tensor-parallel group "
                          f"{list(lay.tp_group(rank))}, its pipeline, ...) nor its data-parallel group "
                          f"{list(lay.dp_group(rank))} nor the world (at tp={lay.tp} dp={lay.dp} pp={lay.pp})")
        if fit.reason:
            return fit
        fit.kinds[pg] = kind
        fit.explained += kind != "replica"
        fit.loose += kind == "replica"
        fit.degenerate += kind == "tp" and len(members) == 1
    if lay.tp > 1 and "tp" not in fit.kinds.values():
        fit.reason = f"{set_where(rs)}: no collective on a tensor-parallel group of tp={lay.tp}"
        return fit
    for (rank, peer), (g, n) in comm.p2p.items():
        (t, d, p), (tq, dq, pq) = lay.coord(rank), lay.coord(peer)
        if (t, d) != (tq, dq) or p == pq:
            fit.reason = (f"{node_where(rs, g, n)}: a send/receive between ranks {rank} and {peer}, which are not "
                          f"two stages of one pipeline (same tensor-parallel and data-parallel index; at tp={lay.tp} "
                          f"dp={lay.dp} pp={lay.pp}: stages {p} and {pq})")
            return fit
        fit.explained += 1
    lonely = sorted(set(world) - {rank for rank, _ in comm.p2p}) if lay.pp > 1 else []
    if lonely:
        fit.reason = f"{set_where(rs)}: rank {lonely[0]} sends and receives nothing, so it is no pipeline stage of pp={lay.pp}"
        return fit
    for pg, (g, n) in comm.p2p_groups.items():
        kind = _group_kind(group_members(rs, g, n), g.rank, lay, world)
        if kind not in ("world", "replica", "tp"):
            fit.reason = (f"{node_where(rs, g, n)}: a send/receive on process group {pg}, which is neither the "
                          "world nor within one replica: scale does not know what it becomes")
            return fit
        fit.kinds.setdefault(pg, kind)
    return fit


def _group_kind(members: tuple[int, ...], rank: int, lay: ParallelLayout, world: tuple[int, ...]) -> str | None:
    """What `members` is for `rank` under `lay`. A group that is more than one thing (the world
    when it is also the tensor-parallel group, a rank alone) is what the degree a new layout
    would change makes of it: a tensor-parallel group first (its degree stays), then a
    data-parallel group, then the world (both grow with dp); a rank alone where both degrees are
    1 is a data-parallel group of one (DDP's at one rank). Any other group within the rank's
    replica (its members share its data-parallel index: a pipeline group, the first and last
    stage's embedding group, a tensor x pipeline group) is "replica": each new replica gets its
    own copy."""
    order = ["tp"] if lay.tp > 1 else []
    order += ["dp"] if lay.dp > 1 else []
    order += ["world", "dp", "tp"]
    group = {"tp": lambda: lay.tp_group(rank), "dp": lambda: lay.dp_group(rank), "world": lambda: world}
    size = {"tp": lay.tp, "dp": lay.dp, "world": len(world)}
    # a group is built only where the sizes match (a 1,024-rank set tries layouts with tp 1,024)
    kind = next((kind for kind in order if size[kind] == len(members) and group[kind]() == members), None)
    if kind is None and rank in members and len({lay.coord(m)[1] for m in members}) == 1:
        kind = "replica"  # within one replica: a pipeline group, Megatron's embedding group, ...
    return kind


def refuse_experts(rs: RankSet, job: JobLayout, comm: Communication) -> None:
    """An all-to-all on a group within a replica is refused unless --tp says what it is: that is
    expert parallelism (MoE token dispatch) or sequence parallelism (Ulysses) far more often than
    tensor parallelism, and the expert groups' layout is not Megatron's tp x dp x pp: reading them
    as tensor parallel would scale the job wrongly (a 4-rank DDP + experts job became 16 ranks)."""
    for (pg, kind), (g, n) in comm.kinds.items():
        if kind is CommType.ALL_TO_ALL and job.kinds.get(pg) in ("tp", "replica"):
            raise InputError(f"{node_where(rs, g, n)}: ALL_TO_ALL on process group {pg} (ranks "
                             f"{list(group_members(rs, g, n))}), a group inside one replica at tp={job.layout.tp} "
                             f"dp={job.layout.dp} pp={job.layout.pp}: that is expert (MoE) or sequence "
                             "parallelism, which scale does not model, so nothing is written; if the group "
                             "really is tensor parallel, say so with --tp")


def check_sizes(rs: RankSet, job: JobLayout, comm: Communication, all_to_all: str = "refuse") -> None:
    """A collective whose per-rank size depends on its peers is refused on a group whose size
    changes (the data-parallel groups and the world, when the degree does); an all-to-all of
    equal shares is kept per rank where `all_to_all` says so."""
    for (pg, kind), (g, n) in comm.kinds.items():
        if kind in RESIZE or job.kinds.get(pg) in ("tp", "replica"):
            continue
        where = (f"{node_where(rs, g, n)}: {kind.name} on process group {pg or 'of the world'} "
                 f"(ranks {list(group_members(rs, g, n))}), whose size changes with the degree")
        if kind is CommType.ALL_TO_ALL and all_to_all == "per-rank":
            _check_equal_shares(rs, pg, where)
            continue
        hint = (" (--all-to-all per-rank keeps each rank's buffer, as for experts spread over the "
                "data-parallel group)") if kind is CommType.ALL_TO_ALL else ""
        raise InputError(f"{where}: its per-rank size depends on its peers, so scale cannot tell what it "
                         f"would be{hint}")


def _check_equal_shares(rs: RankSet, pg: str, where: str) -> None:
    """Every all-to-all on `pg` sends each peer the same share (recorded splits all equal, or
    none recorded): only those re-split over another group size without a guess."""
    for g in rs.graphs.values():
        for n in g.nodes.values():
            if n.type is NodeType.COMM_COLL_NODE and n.pg_name == pg and n.comm_type is CommType.ALL_TO_ALL:
                for key in ("in_split", "out_split"):
                    split = n.attrs.get(key)
                    if split is not None and len(set(split.value)) > 1:
                        raise InputError(f"{where}: rank {g.rank} node {n.id} sends unequal shares ({key} "
                                         f"{list(split.value)[:8]}): how it would split over another group "
                                         "size is not in the trace")
