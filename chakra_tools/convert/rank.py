"""Converting one rank: read, link, build, check; the unit of work the executors run.

`convert_rank` is a pure function of its files (plus the run's known process groups), so ranks
convert in parallel in a process pool or on Dask workers. Process-group names and
point-to-point tags are left rank-local here (`pg_name` = torch's group name) and made global
by `crossrank.py`, which sees every rank.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from chakra_tools.core.collector import gc_paused
from chakra_tools.core.errors import ChakraToolsError, Diagnostic, Diagnostics, InputError
from chakra_tools.core.graph import Graph
from chakra_tools.core.measured import WAITS_OUT, Measured
from chakra_tools.core.model import Metadata, make_attrs

from .build import Builder, Rec
from .calls import CommCall, comm_attrs_from_kineto
from .comms import COMM_PREFIXES, absorb_worker_ops, fill_from_device, find_calls
from .cost import REGISTRY as COST_REGISTRY
from .graphcheck import break_cycles, clean_deps, to_nodes
from .hostet import ALL, INPUTS, PG_INIT, HostTrace, parse_host_bytes
from .jsonio import read_bytes
from .kineto import DeviceTrace, parse_device_bytes
from .extend import keep_after
from .link import link, uncovered
from .readers import first_readers
from .schema import INT64_MAX, INT64_MIN
from chakra_tools.core.annotations import PREFIX as ANNOTATION_PREFIX

ARG_PREFIXES = COMM_PREFIXES + (ANNOTATION_PREFIX, "##")

DEFAULT_PG = "0"  # torch's name of the default (world) group


@dataclass
class GroupInfo:
    ranks: tuple[int, ...] | None = None
    desc: str = ""
    size: int | None = None


@dataclass
class RankResult:
    rank: int
    graph: Graph
    groups: dict[str, GroupInfo]
    world_size: int | None
    diagnostics: Diagnostics
    stats: dict = field(default_factory=dict)


def convert_rank(host: str | Path | None, device: str | Path | None, rank: int,
                 known_groups: dict[str, GroupInfo] | None = None, *,
                 metadata_nodes: bool = False, steps: tuple[int, ...] = ()) -> RankResult:
    """Convert one rank's host trace (and device trace, if any) into a Graph.

    `metadata_nodes` writes process-group setup as a METADATA node (ASTRA-sim 2.0 aborts on
    one) instead of a plain COMP node. `steps`: the steps the capture finished (its manifest);
    a `ProfilerStep#N` after them, which the script's end cut short (the teardown after the last
    step, still open when the profiler stopped), is left out with what ran in it. Raises
    ChakraToolsError naming the rank and file on unreadable input.
    """
    try:
        return _convert(host, device, rank, known_groups or {}, metadata_nodes, steps)
    except ChakraToolsError as e:
        raise e.add_context(f"rank {rank}")


def _convert(host_path, device_path, rank: int, known: dict, metadata_nodes: bool,
             steps: tuple[int, ...] = ()) -> RankResult:
    t0 = time.perf_counter()
    source = str(host_path or device_path)
    with gc_paused():
        host, dev, calls, waits, consumers = _read(host_path, device_path, steps)
        lk = link(host, dev) if dev is not None else None
        kept = keep_after(host, dev, lk) if lk is not None and not lk.mismatch else None
        if kept is not None:  # device work after the host trace: its host events as ops of their own
            more_calls, more_waits = find_calls(kept.ops)
            calls, waits = calls + more_calls, waits + more_waits
        if lk is not None:
            absorb_worker_ops(calls, host.ops, lk.op_event, dev.host)
            fill_from_device(calls, host.by_id_cache(), lk.op_event)
        t1 = time.perf_counter()
        result = Builder(host, dev, lk, rank, calls, waits, consumers,
                         metadata_nodes=metadata_nodes).build()
        own_groups(result.calls, rank)
        groups = _local_groups(host, dev, result.calls, known, result.diagnostics, rank)
        world = _world_size(dev, groups, known)
        meta = _metadata(host, dev, lk, rank)
        if lk is not None and lk.mismatch:
            result.diagnostics.add(Diagnostic("error", "unpaired-traces", lk.mismatch, file=source, rank=rank))
        elif lk is not None and (gap := uncovered(lk, dev)):
            result.diagnostics.add(Diagnostic("warning", "host-trace-partial", gap, file=source, rank=rank))
        if kept is not None:
            result.diagnostics.add(Diagnostic("warning", "device-work-kept", kept.message, file=source, rank=rank))
        stats = {"link": lk.method if lk else "none", "linked": len(lk.op_event) if lk else 0,
                 "host_ops": len(host.ops)}
        has_device = dev is not None
        del host, dev, lk  # the traces' records: free them before the nodes are made
        graph = _finish(result, rank, groups, meta, has_device, source)
    stats.update(nodes=len(graph), parse_s=t1 - t0, build_s=time.perf_counter() - t1)
    return RankResult(rank, graph, groups, world, graph.diagnostics, stats)


def _read(host_path, device_path, steps: tuple[int, ...] = ()):
    """(host, device, calls, waits, consumers); the host file's bytes are dropped as soon as the
    consumers are found in them, before the device trace is read."""
    host = read_host(host_path) if host_path else None
    if host is not None and steps:
        host.ops = without_steps_after(host.ops, max(steps))
        host.__dict__.pop("_by_id", None)  # by_id_cache, if taken before
    calls, waits = find_calls(host.ops) if host else ([], [])
    consumers = first_readers(host, calls) if host else {}
    if host is not None:
        host.release()
    dev = (parse_device_bytes(read_bytes(device_path), str(device_path), full_args=host is None)
           if device_path else None)
    if host is None:
        if dev is None:
            raise ChakraToolsError("neither a host nor a device trace was given")
        host = host_from_device(dev)
        calls, waits = find_calls(host.ops)
    return host, dev, calls, waits, consumers


def read_host(path) -> HostTrace:
    return parse_host_bytes(read_bytes(path), str(path), needs_args)


def needs_args(name: str) -> int:
    """What the converter reads of an op: inputs, outputs and attributes of communication,
    annotations and `## ... ##` markers (process-group setup); inputs and outputs of costed
    compute ops; nothing of the others (0)."""
    if name.startswith(ARG_PREFIXES) or name.endswith("wait_tensor"):
        return ALL
    return INPUTS if name in COST_REGISTRY else 0


def _finish(result, rank: int, groups: dict, meta: Metadata, has_device: bool,
            source: str) -> Graph:
    _comm_attrs(result.recs, rank, groups, source)
    diags = result.diagnostics
    forward = clean_deps(result.recs)
    break_cycles(result.recs, diags, source=source, rank=rank, forward=forward)
    nodes = to_nodes(result.recs, with_durations=has_device)
    result.recs = None
    if not has_device:
        diags.add(Diagnostic("warning", "durations-missing",
                             "host trace only: node durations are 0 (no device trace given)",
                             file=source, rank=rank))
    return Graph(nodes, rank=rank, metadata=meta, source=source, diagnostics=diags)


def host_from_device(dev: DeviceTrace) -> HostTrace:
    """A host trace synthesised from a device trace's host events (device-only conversion):
    ids in start order, callers by time containment, shapes and types from `Input Dims` /
    `Input type` (and, for communication ops, the scalars and strings of `Concrete Inputs`:
    roots, peers, group names), and each `record_param_comms` event's collective metadata
    (`Collective name`, `In msg nelems`, `dtype`, `Process Group Name`, `Process Group Ranks`...)
    as the attributes a host trace would carry: sizes, kinds and groups come out as from one."""
    from .hostet import HostOp

    order = sorted(dev.host, key=lambda e: (e.ts, -e.dur, e.idx))  # callers before callees
    ids = {e.idx: i + 1 for i, e in enumerate(order)}
    ops = []
    tids: dict = {}
    for e in order:
        tid = tids.setdefault(e.tid, len(tids) + 1)
        a = e.args
        comm = needs_args(e.name) == ALL
        attrs = comm_attrs_from_kineto(a) if e.name == "record_param_comms" else {}
        values = a.get("Concrete Inputs") if comm else None  # scalars, strings: roots, group names
        values = values if isinstance(values, list) else []
        ops.append(HostOp(ids[e.idx], e.name, ids.get(e.parent, 0), tid,
                          a.get("Record function id"),
                          (values, a.get("Input Dims", []), a.get("Input type", [])), ([], [], []), attrs))
    trace = HostTrace(dev.path, "kineto", ops, roots={0})
    return trace


def own_groups(calls: list[CommCall], rank: int) -> None:
    """A collective whose group has one rank (a data-parallel group of size 1 under tensor
    parallelism) is on that rank's own group, whatever group object the trace names (schema
    1.0.1 records only a pointer and the size): left on the default group it would make a replay
    synchronise every rank on a collective only this one issued."""
    for c in calls:
        if c.group_size == 1 and not c.pg_ranks:
            c.pg, c.pg_ranks = f"{SELF_PG}{rank}", (rank,)


#: rank-local name of a rank's own one-rank group (never a torch name: those are integers or
#: user-given strings; made a global integer id by crossrank.py)
SELF_PG = "self@"


def _local_groups(host: HostTrace, dev: DeviceTrace | None, calls: list[CommCall],
                  known: dict[str, GroupInfo], diags: Diagnostics, rank: int) -> dict[str, GroupInfo]:
    """torch group name -> what this rank knows of it (every source merged)."""
    groups: dict[str, GroupInfo] = {k: GroupInfo(v.ranks, v.desc, v.size) for k, v in known.items()}
    pg_lists = [(host.path, f"node {host.pg_init_id} ({PG_INIT!r}): groups", host.process_groups)]
    if dev is not None:
        pg_lists.append((dev.path, "distributedInfo.pg_config", dev.dist_info.get("pg_config") or []))
    for path, where, lst in pg_lists:
        for i, g in enumerate(lst):
            name = str(g.get("pg_name", ""))
            info = groups.setdefault(name, GroupInfo())
            size = g.get("group_size") or g.get("pg_size")
            if not info.ranks:
                at = GroupPlace(path, f"{where}[{i}]", name, rank)
                info.ranks = _distinct(g.get("ranks"), size, at, diags)
            info.desc = info.desc or str(g.get("pg_desc", "") or "")
            info.size = info.size or size
    for c in calls:
        pg = c.pg if c.pg is not None else DEFAULT_PG
        info = groups.setdefault(pg, GroupInfo())
        if not info.ranks:
            info.ranks = _distinct(c.pg_ranks, c.group_size, GroupPlace(host.path, f"node {c.root} ({c.name!r})",
                                                                          pg, rank), diags)
        info.desc = info.desc or c.pg_desc
        info.size = info.size or c.group_size
    groups.setdefault(DEFAULT_PG, GroupInfo(desc="default_pg"))
    return groups


@dataclass(frozen=True)
class GroupPlace:
    """Where a trace lists a process group's ranks, for messages: the file, the record, torch's
    name of the group and the rank converted."""

    path: str
    record: str
    name: str
    rank: int


def _distinct(ranks, size: int | None, at: GroupPlace, diags: Diagnostics) -> tuple[int, ...] | None:
    """A group's ranks as a trace lists them (None for none). A rank listed twice (a damaged or
    hand-made trace: torch makes no such group) would become a comm_group.json every reader
    refuses; the repeat is dropped with a warning when what is left is the group its size says
    (or no size is given), and is an InputError naming the file and the group otherwise, since
    which member the repeat stands for is unknown."""
    if not ranks:
        return None
    ranks = tuple(ranks)
    distinct = tuple(dict.fromkeys(ranks))
    if len(distinct) == len(ranks):
        return ranks
    twice = next(r for r, n in Counter(ranks).items() if n > 1)
    said = f"{at.record}: process group {at.name!r} lists rank {twice} twice ({_shown(ranks)})"
    if size and size != len(distinct):
        raise InputError(f"{at.path}: {said}, and without the repeat it has {len(distinct)} ranks, not the "
                         f"{size} its size says: which rank is missing is unknown; correct the group's "
                         "ranks in the trace")
    diags.add(Diagnostic("warning", "group-rank-repeated", f"{said}; the repeat is dropped: {_shown(distinct)}",
                         file=at.path, rank=at.rank))
    return distinct


def _shown(ranks: tuple[int, ...]) -> str:
    """A rank list for a message: a world group may have a million ranks."""
    return str(list(ranks)) if len(ranks) <= 16 else f"[{', '.join(map(str, ranks[:16]))}, ... {len(ranks)} ranks]"


def _world_size(dev: DeviceTrace | None, groups: dict[str, GroupInfo], known: dict) -> int | None:
    if dev is not None and dev.dist_info.get("world_size"):
        return int(dev.dist_info["world_size"])
    g = groups.get(DEFAULT_PG)
    if g is not None and (g.size or g.ranks):
        return g.size or len(g.ranks)
    return None


def _comm_attrs(recs: list[Rec], rank: int, groups: dict[str, GroupInfo], source: str) -> None:
    for r in recs:
        if r.call is not None:
            r.attrs.update(_encodable(comm_attrs(r.call, rank, groups), r.call, source))


#: the integers of a communication node, by the range of their wire kind (core.model.CONTRACT:
#: ranks and tags are int32, the others int64)
_INT32 = (-(2**31), 2**31 - 1)
_COMM_INTS = {"comm_src": _INT32, "comm_dst": _INT32, "comm_tag": _INT32}
_INT64 = (INT64_MIN, INT64_MAX)


def _encodable(a: dict, c: CommCall, source: str) -> dict:
    """A communication node's attributes, each integer checked against its wire kind: a value
    out of range (a tag or a size no collective has) is an InputError naming the input file and
    the call's node, not a write error naming the output."""
    for key, v in a.items():
        if type(v) is int:
            lo, hi = _COMM_INTS.get(key, _INT64)
            bad = not lo <= v <= hi
        elif key in ("in_split", "out_split") and v:
            bad = any(not INT64_MIN <= x <= INT64_MAX for x in v)
        else:
            continue
        if bad:
            raise InputError(f"{source}: node {c.root} ({c.name!r}): {key} {v!r} does not fit "
                             f"the attribute's {'int32' if key in _COMM_INTS else 'int64'}")
    return a


def comm_attrs(c: CommCall, rank: int, groups: dict[str, GroupInfo]) -> dict:
    """The contract and extra attributes of a communication node (pg_name still rank-local)."""
    pg = c.pg if c.pg is not None else DEFAULT_PG
    a: dict = {"is_cpu_op": False, "pg_name": pg, "comm_size": c.comm_size}
    if c.comm_type is not None:
        a["comm_type"] = int(c.comm_type)
    if c.op in ("send", "recv") and c.peer is not None:
        peer = _global_rank(c.peer, groups.get(pg), c.source)
        a["comm_src"], a["comm_dst"] = (rank, peer) if c.op == "send" else (peer, rank)
        if c.tag is not None:
            a["comm_tag"] = c.tag
    eb = c.elem_bytes
    a.update(dtype=c.dtype or None,
             in_nelems=c.in_nelems if c.in_nelems is not None else (c.in_bytes // eb if eb else None),
             out_nelems=c.out_nelems if c.out_nelems is not None else (c.out_bytes // eb if eb else None),
             in_split=list(c.in_split) or None, out_split=list(c.out_split) or None,
             group_size=c.group_size or (groups[pg].size if pg in groups else None),
             pg_desc=c.pg_desc or (groups[pg].desc if pg in groups else "") or None,
             root_rank=c.root_rank, seq=c.seq, comm_source=c.source,
             is_async=c.is_async)
    return a


def without_steps_after(ops: list, last: int) -> list:
    """`ops` (parents before children) less every `ProfilerStep#N` with N > `last` and what ran
    under it.

    >>> from types import SimpleNamespace as Op
    >>> ops = [Op(id=1, name="ProfilerStep#3", parent=0), Op(id=2, name="aten::mm", parent=1),
    ...        Op(id=3, name="ProfilerStep#4", parent=0), Op(id=4, name="c10d::barrier", parent=3)]
    >>> [o.id for o in without_steps_after(ops, 3)]
    [1, 2]
    """
    dropped: set[int] = set()
    for op in ops:
        if op.parent in dropped or (op.name.startswith("ProfilerStep#")
                                    and op.name[13:].isdigit() and int(op.name[13:]) > last):
            dropped.add(op.id)
    return [op for op in ops if op.id not in dropped] if dropped else ops


def _global_rank(peer: int, group: GroupInfo | None, source: str) -> int:
    """Annotations record global peers; c10d records the rank within the group."""
    if source == "annotation" or group is None or not group.ranks or peer >= len(group.ranks):
        return peer
    return group.ranks[peer]


def _metadata(host: HostTrace, dev: DeviceTrace | None, lk, rank: int) -> Metadata:
    attrs = {"converter": "chakra-tools trace-convert", "host_schema": host.schema, "rank": rank,
             "durations": "measured" if dev is not None else "missing", WAITS_OUT: True}
    if lk is not None:
        attrs["link_method"] = lk.method
    built = make_attrs(attrs)
    measured = measured_reference(dev, lk) if dev is not None and lk is not None else None
    if measured is not None:
        built.update(measured.attrs())
    return Metadata(version="0.0.4", attrs=built)


def measured_reference(dev: DeviceTrace, lk) -> Measured | None:
    """The window the converted host ops and the device work they launched span on the device
    trace's clock, and the `ProfilerStep#N` ranges overlapping it (core/measured.py)."""
    spans = [(e.ts, e.end) for e in lk.op_event.values()]
    spans += [(g.ts, g.end) for kernels in lk.kernels.values() for g in kernels]
    if not spans:
        return None
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    steps = sorted((e.ts, e.end) for e in dev.host
                   if e.name.startswith("ProfilerStep#") and e.ts < end and e.end > start)
    ns = lambda us: int(round(us * 1000))  # noqa: E731
    host_end = max((e.end for e in lk.op_event.values()), default=None)
    return Measured((ns(start), ns(end)), tuple((ns(s), ns(e)) for s, e in steps),
                    None if host_end is None else min(ns(host_end), ns(end)))
