"""Turn each kind of input into an `EventSet`: rank sets, replay results, captured runs.

`load_events(path)` recognises the input by its shape:

- a replay result: a `.json` file with "ranks" and "events" (written by `trace-replay --out`);
- a captured run: a folder with `manifest.json` (written by `trace-capture`), or a folder or file
  of Kineto device traces (`*.json`, `*.json.gz` with "traceEvents");
- anything else is a Chakra ET rank set (`RankSet.load`: a folder, a prefix or one `.et` file).

Converted rank sets carry `start_time_micros` / `duration_micros`; a rank whose nodes all start
at 0 (generators, the astra-sim microbenchmarks) is laid out as soon as its dependencies allow,
one node at a time per lane, and a note says so — for real predictions use `trace-replay`.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from chakra_tools.core.chrome_trace import load as load_chrome
from chakra_tools.core.errors import ChakraToolsError, InputError
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.lanes import LANES, WORK, lane_of
from chakra_tools.core.linkusage import link_usage
from chakra_tools.core.model import Node, NodeType
from chakra_tools.core.commit import recover
from chakra_tools.core.replaydoc import is_replay_result, read_replay_result

from .captured import from_capture, kineto_files
from .drawing import graph_edges
from .events import COMM, COMPUTE, HOST, CommRecord, Event, EventSet, group_label, rank_ranges

NS_PER_US = 1000
#: a class of work (core.lanes.WORK) as drawn: memory traffic with communication, metadata with
#: the host that issues it
DRAWN_KIND = {"host": HOST, "compute": COMPUTE, "comm": COMM, "memory": COMM, "other": HOST}


# --------------------------------------------------------------------------------------------
# what is it?
# --------------------------------------------------------------------------------------------

def detect(path: str | Path) -> str:
    """"replay", "capture" or "rankset" for `path` (see the module docstring)."""
    p = Path(path)
    if p.name.endswith((".json", ".json.gz")):
        recover(p.parent)  # a replay killed while it replaced this file is finished first
    if p.is_file() and p.name.endswith((".json", ".json.gz")):
        return "replay" if _is_replay(p) else "capture"
    if p.is_dir() and ((p / "manifest.json").exists() or kineto_files(p)):
        return "capture"
    return "rankset"


def _is_replay(p: Path) -> bool:
    try:
        doc = load_chrome(p)
    except InputError:
        return False
    return is_replay_result(doc)


def load_events(path: str | Path, *, rankset: RankSet | None = None,
                comm_group: str | Path | None = None) -> EventSet:
    """The `EventSet` of any input `trace-visualize` takes (`comm_group`: for a rank set, its
    communicator-group file when not beside the traces)."""
    kind = detect(path)
    if kind == "replay":
        return from_replay(path)
    if kind == "capture":
        return from_capture(path)
    return from_rankset(rankset or RankSet.load(path, comm_group), source=str(path))


# --------------------------------------------------------------------------------------------
# rank sets
# --------------------------------------------------------------------------------------------

def node_kind(node: Node) -> str:
    """host, compute or comm (core.lanes: a node without `is_cpu_op` is device compute)."""
    return DRAWN_KIND[WORK[LANES[lane_of(node.type, node.is_cpu_op)]]]


def node_lane(node: Node, kind: str) -> str:
    if kind == HOST:
        tid = node.attr("tid")
        return f"host thread {tid}" if tid is not None else "host"
    return "communication" if kind == COMM else "compute"


def from_rankset(rs: RankSet, *, source: str = "rank set") -> EventSet:
    """Events at the nodes' own times (µs -> ns); dependencies inside each rank, plus send/recv
    pairs and collective instances across ranks."""
    es = EventSet(source, "converted")
    laid_out = []
    for g in rs:
        events, was_laid_out = _rank_events(g)
        es.events.extend(events)
        if was_laid_out:
            laid_out.append(g.rank if g.rank is not None else 0)
        es.deps.extend((g.rank, s, g.rank, d) for s, d, _ in graph_edges(g))
        es.comms.extend(_comm_records(g, rs))
    if laid_out:
        es.notes.append(f"rank(s) {rank_ranges(laid_out)}: nodes carry no start times; laid out as soon as "
                        "dependencies allow, one node at a time per lane (use trace-replay for simulated times)")
        if len(laid_out) == len(rs):
            es.label = "laid out"
    es.deps.extend(p2p_pairs(rs))
    es.deps.extend(collective_links(rs))
    _mark_scaled(rs, es)
    return es


def _mark_scaled(rs: RankSet, es: EventSet) -> None:
    """A rank set `trace-convert scale` wrote carries the source capture's times, copied: label it
    "scaled" (not measured at this degree: no comparison takes it as measured) and say so."""
    from chakra_tools.core.measured import scaled_from

    info = scaled_from(rs[rs.ranks[0]]) if rs.ranks else None
    if info is not None:
        es.label = "scaled"
        was = info["dp"] * info["tp"] * info["pp"]
        es.notes.insert(0, f"scaled from {was} to {len(rs)} ranks ({info['batch']} batch): the times "
                        f"are the {was}-rank capture's, copied; nothing here was measured at "
                        f"{len(rs)} ranks (trace-visualize report --fit NET --measured RUN predicts and compares)")


def _rank_events(g: Graph) -> tuple[list[Event], bool]:
    """The events of one rank, and whether they had to be laid out (no start times)."""
    rank = g.rank if g.rank is not None else 0
    timed = any(n.start_time_micros for n in g)
    starts = {n.id: n.start_time_micros * NS_PER_US for n in g} if timed or len(g) < 2 else _asap(g)
    out = []
    for n in g:
        kind = node_kind(n)
        start = starts[n.id]
        out.append(Event(rank, n.name, kind, node_lane(n, kind), start, start + n.duration_micros * NS_PER_US,
                         n.id, n.type.short, _node_args(n)))
    return out, not (timed or len(g) < 2)


def _asap(g: Graph) -> dict[int, int]:
    """Start times (ns) of a list schedule: each node after its dependencies and after the
    previous node of its lane; ties by id, as a Chakra feeder issues them."""
    lane_free: dict[str, int] = defaultdict(int)
    done: dict[int, int] = {}
    start: dict[int, int] = {}
    try:
        order = g.topological_order()
    except ChakraToolsError:  # a cycle: file order, dependencies not yet laid out count as 0
        order = list(g)
    for n in order:
        lane = node_lane(n, node_kind(n))
        t = max([lane_free[lane], *(done.get(d, 0) for d in g.predecessors(n.id))])
        start[n.id] = t
        done[n.id] = lane_free[lane] = t + n.duration_micros * NS_PER_US
    return start


def _node_args(n: Node) -> dict[str, Any]:
    args: dict[str, Any] = {"node_id": n.id, "type": n.type.name}
    if n.type is NodeType.COMM_COLL_NODE and n.comm_type is not None:
        args.update(comm_type=n.comm_type.name, comm_size=n.comm_size, pg_name=n.pg_name)
    elif n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
        args.update(comm_size=n.comm_size, comm_src=n.comm_src, comm_dst=n.comm_dst, comm_tag=n.comm_tag)
    return args


def _comm_records(g: Graph, rs: RankSet) -> list[CommRecord]:
    rank = g.rank if g.rank is not None else 0
    out: list[CommRecord] = []
    labels: dict[str, str] = {}
    for n in g:
        if n.type is NodeType.COMM_COLL_NODE:
            kind = n.comm_type.name if n.comm_type is not None else "UNKNOWN"
        elif n.type is NodeType.COMM_SEND_NODE:
            kind = "SEND"
        elif n.type is NodeType.COMM_RECV_NODE:
            kind = "RECV"
        else:
            continue
        pg = n.pg_name or "0"
        if pg not in labels:
            labels[pg] = group_label(pg, _group_members(rs, pg, ()) if n.type is NodeType.COMM_COLL_NODE else ())
        out.append(CommRecord(rank, n.name, kind, n.comm_size, labels[pg], n.id))
    return out


def p2p_pairs(rs: RankSet) -> list[tuple[int, int, int, int]]:
    """(send rank, send node, recv rank, recv node): the k-th send from r to d with tag t matches
    the k-th receive on d from r with tag t, the order a simulator matches them in."""
    sends: dict[tuple[int, int, int | None], list[int]] = defaultdict(list)
    recvs: dict[tuple[int, int, int | None], list[int]] = defaultdict(list)
    for g in rs:
        for n in g:
            if n.type is NodeType.COMM_SEND_NODE and n.comm_dst is not None:
                sends[(g.rank, n.comm_dst, n.comm_tag)].append(n.id)
            elif n.type is NodeType.COMM_RECV_NODE and n.comm_src is not None:
                recvs[(n.comm_src, g.rank, n.comm_tag)].append(n.id)
    pairs = []
    for key in sorted(sends, key=str):
        for s, r in zip(sends[key], recvs.get(key, ())):
            pairs.append((key[0], s, key[1], r))
    return pairs


def collective_links(rs: RankSet) -> list[tuple[int, int, int, int]]:
    """The k-th collective of a group on each member rank is one operation: link its instances
    rank to next rank (group order), so a viewer shows who arrived last."""
    seq: dict[tuple[str, int], list[int]] = defaultdict(list)
    for g in rs:
        for n in g:
            if n.type is NodeType.COMM_COLL_NODE:
                seq[(n.pg_name or "0", g.rank)].append(n.id)
    links = []
    for pg in sorted({k[0] for k in seq}):
        members = _group_members(rs, pg, [r for (p, r) in seq if p == pg])
        for a, b in zip(members, members[1:]):
            for sa, sb in zip(seq.get((pg, a), ()), seq.get((pg, b), ())):
                links.append((a, sa, b, sb))
    return links


def _group_members(rs: RankSet, pg: str, seen: Iterable[int]) -> list[int]:
    try:
        group = rs.group_ranks(pg)
    except KeyError:
        group = ()
    return [r for r in group if r in rs.graphs] or sorted(set(seen))


# --------------------------------------------------------------------------------------------
# replay results
# --------------------------------------------------------------------------------------------

def from_replay(path: str | Path) -> EventSet:
    """A `trace-replay --out result.json` file: simulated events, deps and breakdown as given."""
    doc = read_replay_result(path)
    es = EventSet(str(path), "simulated")
    es.events = [Event(e.rank, e.name, DRAWN_KIND[e.work], e.lane, e.start_ns, e.end_ns, e.node_id, e.type,
                       {"node_id": e.node_id}) for e in doc.events]
    es.deps = list(doc.deps)
    es.critical_path = list(doc.critical_path)
    es.breakdown = {r.rank: {"start_ns": r.start_ns, "finish_ns": r.finish_ns, "compute_ns": r.compute_ns,
                             "exposed_comm_ns": r.exposed_comm_ns, "overlap_ns": r.overlap_ns,
                             "idle_ns": r.idle_ns} for r in doc.ranks}
    es.makespan_ns = doc.makespan_ns
    es.fidelity = doc.fidelity
    es.links = link_usage(doc.config, doc.makespan_ns, str(path))
    if (doc.config.get("modes") or {}).get("host_time") == "timeline":
        es.notes.append("host ops re-timed from the recorded timeline (--host-time timeline): each holds "
                        "the untraced time that followed it, so its time is more than its measured self time")
    classes = doc.config.get("replicas") or {}
    if isinstance(classes.get("replayed"), list):
        es.notes.append(f"replayed {len(classes['replayed']):,} of {classes['ranks']:,} ranks, one per class of "
                        "replicas (trace-replay --replicas): every rank's breakdown is exact; the events, operators, "
                        "communication and critical path are the replayed ranks'")
    es.comms = [CommRecord(r, c.name, c.comm_type, c.bytes, group_label(c.pg, c.ranks), c.node_id)
                for c in doc.collectives for r in (c.ranks or (-1,))]
    return es


