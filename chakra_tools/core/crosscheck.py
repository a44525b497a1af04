"""The checks that need every rank at once, run on the compact summary each rank's stream left
(`validate.RankScan`: its collectives per group, its sends and receives, its metadata), never
on decoded nodes: the ranks of each process group issue the same sequence of collectives, every
send has a receive with the same (src, dst, tag, size), no group names a rank the set lacks, and
the files are one conversion's, each named after the rank it holds, none missing.

Collective order is node-id order within a rank (what a feeder issues first when several nodes
are ready). Sizes are compared for the kinds whose size is the same on every rank; ALL_TO_ALL,
GATHER and SCATTER legitimately differ per rank (alltoallv splits, the root's buffer) and are
compared by kind only.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import TYPE_CHECKING, Mapping

from .errors import Diagnostic, Diagnostics
from .model import CommType, format_bytes

if TYPE_CHECKING:
    from .validate import RankScan

SIZE_INVARIANT = {CommType.ALL_REDUCE, CommType.ALL_GATHER, CommType.REDUCE_SCATTER,
                  CommType.REDUCE_SCATTER_BLOCK, CommType.BROADCAST, CommType.REDUCE, CommType.BARRIER}


def ranks_text(ranks) -> str:
    ranks = list(ranks)
    return str(ranks) if len(ranks) <= 8 else f"[{ranks[0]}, {ranks[1]}, ..., {ranks[-1]}]"


def check_collective_sequences(scans: Mapping[int, RankScan], comm_groups: Mapping[str, tuple[int, ...]],
                               out: Diagnostics) -> None:
    """Every rank of a group must issue the same collectives in the same order."""
    all_ranks = tuple(sorted(scans))
    pgs = sorted({pg for s in scans.values() for pg in s.collectives}, key=lambda p: (len(p), p))
    for pg in pgs:
        members = all_ranks if pg in ("", "0") and pg not in comm_groups else comm_groups.get(pg)
        if members is None:
            continue  # reported per node as unknown-pg / no-comm-groups
        _check_membership(scans, pg, members, out)
        present = [r for r in members if r in scans]
        if len(present) < 2:
            continue
        ref = present[0]
        for r in present[1:]:
            _compare_sequence(scans[ref], scans[r], pg, out)


def check_absent_ranks(scans: Mapping[int, RankScan], comm_groups: Mapping[str, tuple[int, ...]],
                       out: Diagnostics) -> None:
    """A group whose collectives are issued here but whose ranks are not all in the set: a
    replay would wait for them forever (one rank's file of a multi-rank job). Said once per
    group, on the first rank that issues a collective on it."""
    for pg in sorted({pg for s in scans.values() for pg in s.collectives if s.collectives[pg]},
                     key=lambda p: (len(p), p)):
        members = comm_groups.get(pg)
        absent = [r for r in members or () if r not in scans]
        if not absent:
            continue
        r = min(r for r, s in scans.items() if s.collectives.get(pg))
        nid, name, _, _ = scans[r].collectives[pg][0]
        out.add(Diagnostic(
            "warning", "partial-group",
            f"group {pg} has ranks {ranks_text(members)}; {len(absent)} of them are not in this rank set "
            f"({ranks_text(absent)}): its collectives cannot complete in a replay without them "
            "(trace-replay --absent-peers assume takes them as arriving with the ranks given)",
            file=scans[r].file, rank=r, node_id=nid, node_name=name))


def _check_membership(scans, pg, members, out) -> None:
    for r, s in scans.items():
        if r not in members and s.collectives.get(pg):
            nid, name, _, _ = s.collectives[pg][0]
            out.add(Diagnostic("error", "not-in-group",
                               f"issues collectives on group {pg}, whose ranks {list(members)} exclude rank {r}",
                               file=s.file, rank=r, node_id=nid, node_name=name))


def _describe(entry) -> str:
    _, _, ct, size = entry
    return f"{ct.name if ct is not None else '?'} {format_bytes(size)}"


def _compare_sequence(ref: RankScan, other: RankScan, pg: str, out: Diagnostics) -> None:
    a, b = ref.collectives.get(pg, []), other.collectives.get(pg, [])
    group = pg or "(world)"
    for k, (x, y) in enumerate(zip(a, b)):
        same = x[2] == y[2] and (x[2] not in SIZE_INVARIANT or x[3] == y[3])
        if not same:
            out.add(Diagnostic(
                "error", "collective-mismatch",
                f"collective #{k} on group {group} is {_describe(y)}, but rank {ref.rank} issues "
                f"{_describe(x)} (node {x[0]} {x[1]!r})",
                file=other.file, rank=other.rank, node_id=y[0], node_name=y[1]))
            return
    if len(a) != len(b):
        longer, shorter = (ref, other) if len(a) > len(b) else (other, ref)
        extra = longer.collectives[pg][min(len(a), len(b))]
        out.add(Diagnostic(
            "error", "collective-count",
            f"issues {len(longer.collectives[pg])} collectives on group {group}, rank {shorter.rank} "
            f"issues {len(shorter.collectives.get(pg, []))}: the first unmatched is {_describe(extra)}",
            file=longer.file, rank=longer.rank, node_id=extra[0], node_name=extra[1]))


def check_point_to_point(scans: Mapping[int, RankScan], out: Diagnostics) -> None:
    """Pair sends with receives on (src, dst, tag) in issue order; sizes must agree."""
    recvs: dict[tuple, deque] = defaultdict(deque)
    for r, s in scans.items():
        for nid, name, src, tag, size in s.recvs:
            recvs[(src, r, tag)].append((nid, name, size))
    for r, s in sorted(scans.items()):
        for nid, name, dst, tag, size in s.sends:
            if dst not in scans:
                out.add(Diagnostic("warning", "peer-absent", f"sends to rank {dst}, which was not given",
                                   file=s.file, rank=r, node_id=nid, node_name=name))
                continue
            queue = recvs.get((r, dst, tag))
            if not queue:
                out.add(Diagnostic("error", "unmatched-send",
                                   f"send of {format_bytes(size)} to rank {dst} tag {tag} has no receive on rank {dst}",
                                   file=s.file, rank=r, node_id=nid, node_name=name))
                continue
            rid, rname, rsize = queue.popleft()
            if rsize != size:
                out.add(Diagnostic("error", "p2p-size-mismatch",
                                   f"send of {size} B to rank {dst} tag {tag} is received as {rsize} B "
                                   f"(rank {dst} node {rid} {rname!r})",
                                   file=s.file, rank=r, node_id=nid, node_name=name))
    for (src, dst, tag), queue in sorted(recvs.items(), key=lambda kv: tuple(map(str, kv[0]))):
        for rid, rname, rsize in queue:
            severity, code = ("warning", "peer-absent") if src not in scans else ("error", "unmatched-recv")
            out.add(Diagnostic(severity, code, f"receive of {format_bytes(rsize)} from rank {src} tag {tag} has no send",
                               file=scans[dst].file, rank=dst, node_id=rid, node_name=rname))


def check_missing_ranks(scans: Mapping[int, RankScan], out: Diagnostics) -> None:
    """Ranks the set was written with (GlobalMetadata `world_size`) that have no file: a rank
    removed, or what a write killed half way left."""
    declared = max((s.world_size for s in scans.values() if s.world_size), default=None)
    if declared is None:
        return
    missing = [r for r in range(declared) if r not in scans]
    if missing:
        r = min(scans)
        out.add(Diagnostic("error", "missing-ranks",
                           f"the rank set was written with {declared} ranks; {len(missing)} have no file "
                           f"{ranks_text(missing)}", file=scans[r].file, rank=r))


def check_file_ranks(scans: Mapping[int, RankScan], out: Diagnostics) -> None:
    """A file whose GlobalMetadata names another rank than its name does (two files swapped or
    renamed): every cross-rank check would pair the wrong ranks, so it is an error."""
    for rank, scan in scans.items():
        if scan.recorded_rank is not None and scan.recorded_rank != rank:
            out.add(Diagnostic("error", "rank-mismatch",
                               f"the file is named rank {rank} but its GlobalMetadata says rank {scan.recorded_rank} "
                               "(files swapped or renamed?): name each file after the rank it holds",
                               file=scan.file, rank=rank))


def check_one_conversion(scans: Mapping[int, RankScan], out: Diagnostics) -> None:
    """Files of one rank set written by different conversions: a rank converted host-only beside
    ranks with durations, another run's rank, a rank converted again from other traces."""
    ids: dict[str, list[int]] = {}
    for rank, scan in sorted(scans.items()):
        if scan.conversion:
            ids.setdefault(scan.conversion, []).append(rank)
    if len(ids) > 1:
        main = max(ids.values(), key=len)
        stray = sorted(r for ranks in ids.values() if ranks is not main for r in ranks)
        out.add(Diagnostic("error", "mixed-conversions",
                           f"{ranks_text(stray)} were converted apart from {ranks_text(main)} ({len(ids)} "
                           "conversions in one rank set): convert the run's ranks together (trace-convert RUN)",
                           file=scans[stray[0]].file, rank=stray[0]))


def check_across_ranks(scans: dict[int, RankScan], comm_groups, out: Diagnostics) -> None:
    """Every check that needs the ranks together (each rank's `RankScan`, made while streaming it)."""
    check_file_ranks(scans, out)
    check_one_conversion(scans, out)
    check_missing_ranks(scans, out)
    check_absent_ranks(scans, comm_groups or {}, out)
    if len(scans) > 1:
        check_collective_sequences(scans, comm_groups or {}, out)
        check_point_to_point(scans, out)
