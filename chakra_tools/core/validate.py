"""Validation: every violation of what simulators need, returned as data.

Checks run in two layers. Per rank, while streaming the nodes (so a million-node file is checked
without holding its nodes; with consecutive ids and no forward references, in memory independent of
the file's size): duplicate ids, dependencies on absent nodes, self-dependencies, cycles (one is
printed; searched in a second pass only if some dependency points forward, since a node that
depends only on earlier nodes cannot close a cycle),
contract attributes of the wrong oneof kind, communication nodes missing what a simulator needs,
and `pg_name`s that are not integer ids or not in the communicator-group file. Across ranks: the
ranks of each process group issue the same sequence of collectives, and every send has a
receive with the same (src, dst, tag, size) — mismatches that make ASTRA-sim end "successfully"
with ranks unfinished — and every rank the set names has a file (crosscheck.py, on each rank's
compact `RankScan`; a large set's replicas asked first a class at a time, byshape.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

from . import hotloops
from .consumers import FORWARD_DEPS, check_for, rules_for
from .collector import gc_paused
from .crosscheck import check_across_ranks, ranks_text
from .deptrack import DependencyTracker, IdIndex, Structure
from .errors import Diagnostic, Diagnostics
from .etio import TraceReader
from .graph import Graph, RankSet, find_rank_files, read_comm_groups
from .model import CONTRACT, INTEGER_KINDS, Attr, CommType, Node, NodeType
from .rankscan import RankScan, note_peer
from .byshape import clean_by_class, node_count, scan_by_shape, scans_of
from .shapes import LARGE_SET

_CONTRACT_NAMES = frozenset(CONTRACT)
_COMM_TYPES = frozenset(t for t in NodeType if t.is_comm)
P2P_NEEDS = {
    NodeType.COMM_SEND_NODE: ("comm_dst", "comm_tag", "comm_size"),
    NodeType.COMM_RECV_NODE: ("comm_src", "comm_tag", "comm_size"),
    NodeType.COMM_COLL_NODE: ("comm_type", "comm_size"),
}


# --------------------------------------------------------------------------------------------
# per node
# --------------------------------------------------------------------------------------------

def check_node(node: Node, comm_groups: Mapping[str, tuple[int, ...]] | None) -> list[tuple[str, str, str]]:
    """(severity, code, message) for each problem of one node on its own."""
    attrs = node.attrs
    needs = P2P_NEEDS.get(node.type)
    if needs is None and (not attrs or _kinds_ok(attrs)):
        return _NO_PROBLEMS  # the common case (compute nodes), without building anything
    return list(_problems(node, needs, comm_groups))


_NO_PROBLEMS: list = []


def _kinds_ok(attrs: Mapping[str, Attr]) -> bool:
    """Whether every contract attribute has its contract kind (read without decoding the values
    of attributes a file's reader has not decoded yet: `PbAttrs.kinds`)."""
    kinds = attrs.kinds() if hasattr(attrs, "kinds") else ((name, a.kind) for name, a in attrs.items())
    for name, kind in kinds:
        want = CONTRACT.get(name)
        if want is not None and kind != want:
            return False
    return True


def _problems(node: Node, needs, comm_groups) -> Iterator[tuple[str, str, str]]:
    attrs = node.attrs
    for name in _CONTRACT_NAMES.intersection(attrs) if attrs else ():
        a, want = attrs[name], CONTRACT[name]
        if a.kind != want:
            yield ("error", "attr-kind",
                   f"{name} is {a.kind}, the contract says {want} (readers of {want} see 0 or nothing)")
    if needs is None:
        return
    for name in needs:
        if name not in node.attrs:
            yield "error", f"missing-{name.replace('_', '-')}", f"{node.type.short} node without {name}"
    if node.type is NodeType.COMM_COLL_NODE and "comm_type" in node.attrs and node.comm_type is None:
        yield "error", "bad-comm-type", f"comm_type {node.attr('comm_type')} is not a CollectiveCommType"
    cpu = node.attrs.get("is_cpu_op")
    if cpu is not None and cpu.value is True:
        yield "warning", "comm-is-cpu-op", "communication node marked is_cpu_op=true"
    yield from _check_pg(node, comm_groups)


def _check_pg(node: Node, comm_groups) -> Iterator[tuple[str, str, str]]:
    pg = node.attrs.get("pg_name")
    if pg is None or pg.kind != "string_val" or pg.value in ("", "0"):
        return
    if not pg.value.isdecimal():
        yield ("error", "pg-not-integer",
               f"pg_name {pg.value!r} is not a decimal integer id (ASTRA-sim cannot parse it)")
    elif comm_groups is None:
        yield ("warning", "no-comm-groups",
               f"pg_name {pg.value!r} cannot be checked: no comm_group.json was given")
    elif pg.value not in comm_groups:
        yield "error", "unknown-pg", f"pg_name {pg.value!r} is not in the communicator-group file"
    elif node.type is NodeType.COMM_COLL_NODE:
        yield from _check_group_size(node, pg.value, comm_groups[pg.value])


def _check_group_size(node: Node, pg: str, ranks: tuple[int, ...]) -> Iterator[tuple[str, str, str]]:
    """A collective that recorded its group's size (`group_size`) must be on a group of that
    many ranks: one put on a bigger group would make a replay synchronise ranks that never
    took part (a 1-rank collective on an 8-rank group waits for 7 ranks)."""
    size = node.attrs.get("group_size")
    if size is not None and size.kind in INTEGER_KINDS and size.value != len(ranks):
        yield ("error", "group-size-mismatch",
               f"recorded group size {size.value}, but group {pg} has {len(ranks)} ranks {ranks_text(ranks)}")


# --------------------------------------------------------------------------------------------
# per rank: the scan
# --------------------------------------------------------------------------------------------

def scan_rank(nodes: Iterable[Node], *, rank: int | None, file: str | None,
              comm_groups: Mapping[str, tuple[int, ...]] | None, out: Diagnostics,
              again: Callable[[], Iterable[Node]] | None = None, graph: Graph | None = None,
              target: str | None = None) -> RankScan:
    """Check one rank's nodes as they stream by; return what the cross-rank checks need.

    `again` gives the nodes a second time, for the cycle search, which only a rank with forward
    references needs. With `graph` (the nodes are in memory anyway) findings take node names from
    it; streaming, only the names findings can need are kept. `target` ("astra-sim") adds what
    that consumer rejects (core/consumers.py); the compiled common case knows only the general
    checks, so it is off then. Runs of nodes with nothing to report are counted by
    `hotloops.plain_run` (compiled, or a twin that leaves every node to the checks here).
    """
    scan = RankScan(rank, file)
    deps = DependencyTracker()
    rules = rules_for(target)
    plain_run = hotloops.plain_run if not rules else None

    def report(severity, code, message, node_id=None, node_name=None):
        out.add(Diagnostic(severity, code, message, file=file, rank=rank, node_id=node_id, node_name=node_name))

    index = deps.index
    frames = getattr(nodes, "skip", False) is None and not rules  # a TraceReader made skippable
    if frames:
        nodes.skip = _plain_frames(scan, index, comm_groups)
    for chunk in _chunks(nodes, 1 if frames else 4096):  # one by one: the skip reads the index
        i, end = 0, len(chunk)
        while i < end:
            if plain_run is not None and index.table is None and index.first is not None:
                plain = plain_run(chunk, i, index.first, index.count)
                if plain:  # nothing to report: only the run of consecutive ids grows
                    index.count += plain
                    scan.nodes += plain
                    i += plain
                    continue
            node = chunk[i]
            i += 1
            scan.nodes += 1
            if not deps.add(node):
                report("error", "duplicate-id", f"node id {node.id} appears more than once", node.id, node.name)
            for severity, code, message in check_node(node, comm_groups):
                report(severity, code, message, node.id, node.name)
            if rules:
                for severity, code, message in check_for(node, rules, comm_groups):
                    report(severity, code, message, node.id, node.name)
            if node.type in _COMM_TYPES:
                _record_comm(scan, node)

    def name_of(nid: int, names: Mapping[int, str]) -> str | None:
        if graph is not None:
            return graph.nodes[nid].name if nid in graph.nodes else None
        return names.get(nid)

    for nid, dep, kind in deps.dangling():
        report("error", f"dangling-{kind}-dep", f"{kind} dependency on absent node {dep}", nid,
               name_of(nid, deps.names))
    if target in FORWARD_DEPS:
        for nid, dep, kind in deps.forward():
            report("warning", "forward-dep",
                   f"{kind} dependency on node {dep}, later in the file: the feeder holds this node "
                   "back until it has read that far", nid, name_of(nid, deps.names))
    for nid in deps.self_deps:
        report("error", "self-dep", "depends on itself: no simulator can ever issue it", nid,
               name_of(nid, deps.names))
    if deps.has_forward_refs() and again is not None:
        structure = Structure()
        for node in again():
            structure.add(node)
        cycle = structure.find_cycle()
        if cycle:
            report("error", "cycle", "dependency cycle: " + " -> ".join(f"%{c}" for c in cycle),
                   cycle[0], name_of(cycle[0], structure.names))
    return scan


def _chunks(nodes: Iterable[Node], size: int = 4096) -> Iterator[list[Node]]:
    """The nodes in lists (what the compiled run takes), a few thousand at a time when streamed."""
    if isinstance(nodes, list):
        yield nodes
        return
    it = iter(nodes)
    while chunk := list(islice(it, size)):
        yield chunk


def _plain_frames(scan: RankScan, index: IdIndex, comm_groups) -> Callable[[bytes, int], tuple[int, int]]:
    """The reader's skip: the frames from `pos` on that `hotloops.scan_frames` finds nothing to
    report in (compiled; the twin takes none), counted as `plain_run`'s nodes are, their
    communication recorded as `_record_comm` records a node's. Only while ids run on from the
    first (the index is two integers). The compiled scan looks a pg up in `comm_groups` itself
    (a dict: no set of its names made per rank, 16k of them for each of 131k ranks)."""
    scan_frames = hotloops.scan_frames
    collectives, sends, recvs, peers = scan.collectives, scan.sends, scan.recvs, scan.peers
    kinds = tuple(CommType)  # scan_frames took only comm_types of the enum: an index, not a call

    def skip(buf: bytes, pos: int) -> tuple[int, int]:
        if index.table is not None or index.first is None:
            return pos, -1
        sink: list = []  # sends and receives; the collectives go straight to their pg's list
        pos, taken, last = scan_frames(buf, pos, index.first, index.count, comm_groups, sink, collectives, kinds)
        if taken:
            index.count += taken
            scan.nodes += taken
            for rec in sink:
                if rec[0] == 5:  # COMM_SEND_NODE
                    sends.append(rec[1:])
                    note_peer(peers, rec[3], rec[1], rec[2], "sends to")
                else:
                    recvs.append(rec[1:])
                    note_peer(peers, rec[3], rec[1], rec[2], "receives from")
        return pos, last

    return skip


def _record_comm(scan: RankScan, node: Node) -> None:
    if node.type is NodeType.COMM_COLL_NODE:
        scan.collectives[node.pg_name or ""].append((node.id, node.name, node.comm_type, node.comm_size))
    elif node.type is NodeType.COMM_SEND_NODE:
        scan.sends.append((node.id, node.name, node.comm_dst, node.comm_tag, node.comm_size))
        note_peer(scan.peers, node.comm_dst, node.id, node.name, "sends to")
    else:
        scan.recvs.append((node.id, node.name, node.comm_src, node.comm_tag, node.comm_size))
        note_peer(scan.peers, node.comm_src, node.id, node.name, "receives from")


# --------------------------------------------------------------------------------------------
# entry points
# --------------------------------------------------------------------------------------------

@dataclass
class ValidationReport:
    diagnostics: Diagnostics
    ranks: list[int]
    nodes: int
    path: str | None = None  # what was validated, as given (validate_path)
    #: the job's rank count as the files record it (our GlobalMetadata `world_size`); None where
    #: they do not (ASTRA-sim's, Chakra's): a missing highest rank that nothing names is then unseen
    world_size: int | None = None
    #: rank -> its file's shape (core/shapes.py), where the validation read them (`by_shape`)
    shapes: dict | None = field(default=None, repr=False)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def error_count(self) -> int:
        return sum(n for code, n in self.diagnostics.counts.items() if code in self._error_codes())

    def _error_codes(self) -> set[str]:
        return {d.code for d in self.diagnostics if d.severity == "error"}

    def to_dict(self, stats: dict | None = None) -> dict:
        """The `trace-validate --json` document of one path; `stats` (`core.stats.summarize_path`)
        is what `--stats` adds."""
        doc = {} if self.path is None else {"path": self.path}
        doc.update(self._findings())
        if stats is not None:
            doc["stats"] = stats
        return doc

    def _findings(self) -> dict:
        return {
            "ranks": self.ranks, "nodes": self.nodes, "world_size": self.world_size,
            "errors": self.error_count, "warnings": len(self.diagnostics) - self.error_count,
            "counts": dict(sorted(self.diagnostics.counts.items())),
            "omitted": self.diagnostics.omitted(),
            "diagnostics": [d.to_dict() for d in self.diagnostics],
        }


def validate_path(path: str | Path, comm_group: str | Path | None = None, *,
                  examples_per_code: int = 50, target: str | None = None,
                  absent_peers: bool = False, by_shape: bool | None = None,
                  files: Mapping[int, Path] | None = None,
                  groups: Mapping[str, tuple[int, ...]] | None = None) -> ValidationReport:
    """Validate a file, folder or prefix by streaming each rank's file once.

    A comm_group.json beside the files is used unless `comm_group` names one. `target`
    ("astra-sim") adds what that consumer rejects or mis-runs (core/consumers.py). The files
    are taken as a whole job (a rank they name without a file is an error) unless `absent_peers`
    (`--absent-peers assume`: one part of a larger job). `by_shape`: one file of each shape
    (core/shapes.py) is checked node by node, the others as its replicas under their own names
    (core/byshape.py); the same report, and `report.shapes` keeps the shapes read. None:
    so for a set of `LARGE_SET` files or more (a set of distinct files would be read twice).
    `files`: the set's files (`find_rank_files(path)`) where the caller listed them already;
    `groups`: the groups of `comm_group` where the caller read them already (a replay reads the
    file once for both).
    """
    files = find_rank_files(path) if files is None else files
    first = next(iter(files.values()))
    if comm_group is None and (first.parent / "comm_group.json").exists():
        comm_group = first.parent / "comm_group.json"
    if groups is None:
        groups = read_comm_groups(comm_group) if comm_group else None
    out = Diagnostics(examples_per_code)
    if by_shape is None:
        by_shape = len(files) >= LARGE_SET
    shapes = {} if by_shape and target is None else None
    with gc_paused():  # each rank's scan is kept: nothing for the collector to find
        if shapes is not None:
            scans, templates = scan_by_shape(files, groups, out, shapes, _scan_file)
            nodes = node_count(scans, templates)
            clean, declared = clean_by_class(scans, templates, groups) if not absent_peers else (False, None)
            if not clean:  # crosscheck.py says what, on a scan for every rank
                scans = scans_of(files, scans, templates)
        else:
            scans = {rank: _scan_file(rank, f, groups, out, target) for rank, f in files.items()}
            nodes, clean = sum(s.nodes for s in scans.values()), False
        if not clean:
            declared = check_across_ranks(scans, groups, out, absent_peers=absent_peers,
                                          groups_file=comm_group and str(comm_group))
    return ValidationReport(out, sorted(files), nodes, str(path), declared, shapes)


def _scan_file(rank: int, f: Path, groups, out: Diagnostics, target: str | None) -> RankScan:
    """One rank file read and checked node by node."""
    reader = TraceReader(f, rank=rank, diagnostics=out, skippable=True)
    again = functools.partial(TraceReader, f, rank=rank, diagnostics=Diagnostics())
    scan = scan_rank(reader, rank=rank, file=str(f), comm_groups=groups, out=out, again=again, target=target)
    scan.read_metadata(reader.metadata)
    return scan


def validate_graph(graph: Graph, comm_groups: Mapping[str, tuple[int, ...]] | None = None, *,
                   target: str | None = None) -> list[Diagnostic]:
    """Every violation in one rank's graph (see the module docstring)."""
    out = Diagnostics(examples_per_code=1 << 30)
    nodes = list(graph) + graph.duplicates
    scan_rank(nodes, rank=graph.rank, file=graph.source, comm_groups=comm_groups, out=out,
              again=lambda: nodes, graph=graph, target=target)
    return list(out)


def validate_rankset(rankset: RankSet, *, target: str | None = None, absent_peers: bool = True) -> list[Diagnostic]:
    """Every violation in a rank set: each rank's own, then across ranks. By default ranks it
    names without a graph are warnings: a conversion checks the ranks it was given, often one
    part of a job; `absent_peers=False` checks it as a whole job, as `validate_path` does."""
    out = Diagnostics(examples_per_code=1 << 30)
    groups = rankset.comm_groups or None
    scans = {}
    for g in rankset:
        nodes = list(g) + g.duplicates
        scans[g.rank] = scan_rank(nodes, rank=g.rank, file=g.source, comm_groups=groups, out=out,
                                  again=functools.partial(iter, nodes), graph=g, target=target)
        scans[g.rank].read_metadata(g.metadata)
    check_across_ranks(scans, groups, out, absent_peers=absent_peers)
    return list(out)
