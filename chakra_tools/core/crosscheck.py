"""The checks that need every rank at once, run on the compact summary each rank's stream left
(`RankScan`, rankscan.py: its collectives per group, its sends and receives, its metadata), never
on decoded nodes: the ranks of each process group issue the same sequence of collectives, every
send has a receive with the same (src, dst, tag, size), the files are one conversion's, each named
after the rank it holds, none missing.

A rank set is taken as a whole job (files 0..N-1, as ASTRA-sim reads them): a rank that no file
holds but that the set names (a send's destination, a receive's source, a member of a group, the
numbering of the other files, the `world_size` our GlobalMetadata records) is an error, whoever
wrote the files. With `absent_peers` (the set is one part of a larger job: most public traces are
one rank of many) only the ranks our metadata says were written are required; the others are
warnings, and `trace-replay --absent-peers assume` takes them as arriving with the ranks given.

Nothing here allocates in proportion to a number read from the input: absent ranks are kept as
ranges (a `world_size` of 2**31 with four files is one range), a `world_size` no rank set can
have is refused, and everything else is sized by the files' own nodes and groups.

Collective order is node-id order within a rank (what a feeder issues first when several nodes
are ready). Sizes are compared for the kinds whose size is the same on every rank; ALL_TO_ALL,
GATHER and SCATTER legitimately differ per rank (alltoallv splits, the root's buffer) and are
compared by kind only.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict, deque
from typing import Iterator, Mapping

from .errors import Diagnostic, Diagnostics
from .model import MAX_RANK, CommType, format_bytes
from .rankscan import RankScan


SIZE_INVARIANT = {CommType.ALL_REDUCE, CommType.ALL_GATHER, CommType.REDUCE_SCATTER,
                  CommType.REDUCE_SCATTER_BLOCK, CommType.BROADCAST, CommType.REDUCE, CommType.BARRIER}


def ranks_text(ranks) -> str:
    ranks = list(ranks)
    return str(ranks) if len(ranks) <= 8 else f"[{ranks[0]}, {ranks[1]}, ..., {ranks[-1]}]"


def spans_text(spans: list[tuple[int, int]], shown: int = 8) -> str:
    """Ranges of ranks (first, last) as `[3, 6, 9..12]`, the first few and the last.

    >>> spans_text([(3, 3), (6, 6)]), spans_text([(4, 999_999_999_999)])
    ('[3, 6]', '[4..999999999999]')
    """
    parts = [str(lo) if lo == hi else f"{lo}..{hi}" for lo, hi in
             (spans if len(spans) <= shown else [*spans[:shown - 1], spans[-1]])]
    if len(spans) > shown:
        parts.insert(shown - 1, "...")
    return "[" + ", ".join(parts) + "]"


def issuers_of(scans: Mapping[int, RankScan]) -> dict[str, list[int]]:
    """pg -> the ranks that issue a collective on it, ascending: one pass over the set, which
    the checks below read instead of every rank once per group (17k groups of a 131k-rank job)."""
    out: dict[str, list[int]] = {}
    for r in sorted(scans):
        for pg, issued in scans[r].collectives.items():
            if issued:
                out.setdefault(pg, []).append(r)
    return out


def check_collective_sequences(scans: Mapping[int, RankScan], comm_groups: Mapping[str, tuple[int, ...]],
                               out: Diagnostics, issuers: Mapping[str, list[int]] | None = None) -> None:
    """Every rank of a group must issue the same collectives in the same order."""
    all_ranks = tuple(sorted(scans))
    issuers = issuers_of(scans) if issuers is None else issuers
    for pg in sorted(issuers, key=lambda p: (len(p), p)):  # a group nobody issues on has nothing to compare
        members = all_ranks if pg in ("", "0") and pg not in comm_groups else comm_groups.get(pg)
        if members is None:
            continue  # reported per node as unknown-pg / no-comm-groups
        _check_membership(scans, pg, members, issuers[pg], out)
        ref = ref_calls = None
        for r in members:
            scan = scans.get(r)
            if scan is None:
                continue
            calls = scan.collectives.get(pg)
            if ref is None:
                ref, ref_calls = scan, calls
            elif calls is not ref_calls:  # replicas share their representative's records
                _compare_sequence(ref, scan, pg, out)


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


def _check_membership(scans, pg, members, issuers, out) -> None:
    inside = set(members)
    for r in issuers:
        if r not in inside:
            s = scans[r]
            nid, name, _, _ = s.collectives[pg][0]
            out.add(Diagnostic("error", "not-in-group",
                               f"issues collectives on group {pg}, whose ranks {ranks_text(members)} exclude rank {r}",
                               file=s.file, rank=r, node_id=nid, node_name=name))


def _describe(entry) -> str:
    _, _, ct, size = entry
    return f"{ct.name if ct is not None else '?'} {format_bytes(size)}"


def _compare_sequence(ref: RankScan, other: RankScan, pg: str, out: Diagnostics) -> None:
    a, b = ref.collectives.get(pg, []), other.collectives.get(pg, [])
    if a == b:  # replicas validated by shape share their representative's records: no element differs
        return
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


def check_point_to_point(scans: Mapping[int, RankScan], out: Diagnostics,
                         absent_peers: bool = True, agree: bool | None = None) -> None:
    """Pair sends with receives on (src, dst, tag) in issue order; sizes must agree. A peer that
    is not in the set is a warning per node with `absent_peers`, else said once per rank
    (`check_named_ranks`). `agree`: what `_pairs_agree(scans)` returned, where known."""
    if agree if agree is not None else _pairs_agree(scans):
        return
    recvs: dict[tuple, deque] = defaultdict(deque)
    for r, s in scans.items():
        for nid, name, src, tag, size in s.point_to_point()[1]:
            recvs[(src, r, tag)].append((nid, name, size))
    for r, s in sorted(scans.items()):
        for nid, name, dst, tag, size in s.point_to_point()[0]:
            if dst not in scans:
                if absent_peers:
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
    left = [(key, queue) for key, queue in recvs.items() if queue]  # none, where every receive paired
    for (src, dst, tag), queue in sorted(left, key=lambda kv: tuple(map(str, kv[0]))):
        if src not in scans and not absent_peers:
            continue
        for rid, rname, rsize in queue:
            severity, code = ("warning", "peer-absent") if src not in scans else ("error", "unmatched-recv")
            out.add(Diagnostic(severity, code, f"receive of {format_bytes(rsize)} from rank {src} tag {tag} has no send",
                               file=scans[dst].file, rank=dst, node_id=rid, node_name=rname))


def _pairs_agree(scans: Mapping[int, RankScan]) -> bool:
    """Whether every two ranks agree on what passes between them: the (tag, size) of one's sends
    to the other, in order, are those of the other's receives from it, and each rank that
    receives from another is sent to by it. Then pairing node by node finds nothing: the k-th
    send of a tag meets the k-th receive of it, of its size. Checked per pair of ranks, not per
    message, on the representatives' own sequences under each replica's names (`RankScan.renaming`):
    a replica's are its representative's, so nothing is renamed or copied."""
    for r, s in scans.items():
        base, mine, _ = s.renaming()
        sent, received = base.by_peer()
        for p, seq in sent.items():
            peer = scans.get(mine.get(p, p) if mine else p)
            if peer is None:
                return False
            theirs_base, _, back = peer.renaming()
            theirs = theirs_base.by_peer()[1].get(back.get(r) if back else r)
            if theirs is not seq and theirs != seq:
                return False
        for p in received:
            peer = scans.get(mine.get(p, p) if mine else p)
            if peer is None:
                return False
            theirs_base, _, back = peer.renaming()
            if (back.get(r) if back else r) not in theirs_base.by_peer()[0]:
                return False
    return True


def check_world_size(scans: Mapping[int, RankScan], out: Diagnostics) -> int | None:
    """The rank count the files' GlobalMetadata record (`world_size`; the largest, if they
    differ). One that no rank set can have (not 1..MAX_RANK+1) is an error naming its file and is
    not used: a count of 10**12 must not become a list of 10**12 absent ranks."""
    declared = None
    for rank, scan in sorted(scans.items()):
        w = scan.world_size
        if w is None:
            continue
        if not 1 <= w <= MAX_RANK + 1:
            out.add(Diagnostic("error", "bad-world-size",
                               f"GlobalMetadata world_size {w} is outside 1..{MAX_RANK + 1}, the rank counts a set "
                               "can have: the set's size is unknown (rewrite or remove the attribute)",
                               file=scan.file, rank=rank))
        elif declared is None or w > declared:
            declared = w
    return declared


def check_missing_ranks(scans: Mapping[int, RankScan], out: Diagnostics, *, declared: int | None,
                        whole: bool = False, named: Mapping[int, object] | None = None) -> None:
    """Ranks below the set's count that have no file, said once, as ranges: the count is the
    `world_size` the set was written with (a rank removed, or what a write killed half way
    left) or, for a `whole` set without it, one past its highest file (ASTRA-sim reads files
    0..N-1). Ranks in `named` are said by `check_named_ranks`, with who names them."""
    present = sorted(scans)
    if declared is not None:
        end, why = declared, f"the rank set was written with {declared} ranks"
    elif whole and present:
        end, why = present[-1] + 1, (f"the files go up to rank {present[-1]} (a rank set is one file for "
                                     "each rank 0..N-1, as ASTRA-sim reads them)")
    else:
        return
    spans = list(_split(_gaps(present, end), sorted(named or ())))
    count = sum(hi - lo + 1 for lo, hi in spans)
    if count:
        r = present[0]
        verb = "has" if count == 1 else "have"
        out.add(Diagnostic("error", "missing-ranks", f"{why}; {count} {verb} no file {spans_text(spans)}",
                           file=scans[r].file, rank=r, extra={"missing": count}))


def _gaps(present: list[int], end: int) -> Iterator[tuple[int, int]]:
    """The ranges of 0..end-1 that `present` (sorted) lacks: at most one more than the files."""
    prev = -1
    for r in present:
        if r >= end:
            break
        if r > prev + 1:
            yield prev + 1, r - 1
        prev = r
    if end > prev + 1:
        yield prev + 1, end - 1


def _split(spans: Iterator[tuple[int, int]], taken: list[int]) -> Iterator[tuple[int, int]]:
    """`spans` without the ranks in `taken` (sorted)."""
    for lo, hi in spans:
        for t in taken[bisect_left(taken, lo):bisect_right(taken, hi)]:
            if t > lo:
                yield lo, t - 1
            lo = t + 1
        if lo <= hi:
            yield lo, hi


def named_ranks(scans: Mapping[int, RankScan], comm_groups: Mapping[str, tuple[int, ...]],
                groups_file: str | None, issuers: Mapping[str, list[int]] | None = None,
                peers_present: bool = False) -> dict[int, list]:
    """Each rank the set names but no file holds: [file, where it is first named, how many times].
    First by a send or receive (the lowest rank's first node), then by a collective on a group
    that has it, then by the communicator-group file alone. `peers_present`: every rank a send or
    receive names is known to have a file (`_pairs_agree` found so)."""
    named: dict[int, list] = {}

    def note(rank, file, how, times=1):
        if rank in scans:
            return
        if rank in named:
            named[rank][2] += times
        else:
            named[rank] = [file, how, times]

    for r, s in sorted(scans.items()) if not peers_present else ():
        base, mine, _ = s.renaming()
        if all((mine.get(p, p) if mine else p) in scans for p in base.peers):
            continue  # names no rank without a file
        for peer, (nid, name, verb, times) in sorted(s.peer_notes().items()):
            note(peer, s.file, f"rank {r} node {nid} ({name!r}) {verb} it", times)
    issuers = issuers_of(scans) if issuers is None else issuers
    used = {pg for pg in issuers if pg in comm_groups}
    for pg in sorted(used, key=lambda p: (len(p), p)):
        first = issuers[pg][0]
        if all(map(scans.__contains__, comm_groups[pg])):
            continue  # names no rank without a file
        nid, name, _, _ = scans[first].collectives[pg][0]
        times = sum(len(scans[r].collectives[pg]) for r in issuers[pg])
        for m in comm_groups[pg]:
            note(m, scans[first].file, f"rank {first} node {nid} ({name!r}) is a collective on "
                 f"group {pg}, which has it", times)
    for pg, members in sorted(comm_groups.items(), key=lambda kv: (len(kv[0]), kv[0])):
        for m in members if pg not in used else ():
            note(m, groups_file, f"group {pg} of the communicator-group file has it")
    return named


def check_named_ranks(named: Mapping[int, list], out: Diagnostics) -> None:
    """One error for each rank the set names but no file holds: a replay would wait for it
    forever, and ASTRA-sim would end "successfully" with the ranks that talk to it unfinished."""
    for rank, (file, how, times) in sorted(named.items()):
        what = f"rank {rank}" if 0 <= rank <= MAX_RANK else f"rank {rank} (no rank: ranks are 0..{MAX_RANK})"
        again = f" (named {times} times)" if times > 1 else ""
        out.add(Diagnostic("error", "missing-rank",
                           f"{what}: no file, but {how}{again}; add its file, or, if the set is one part of "
                           "a larger job, pass --absent-peers assume", file=file, extra={"missing_rank": rank}))


def check_file_ranks(scans: Mapping[int, RankScan], out: Diagnostics) -> None:
    """A file whose GlobalMetadata names another rank than its name does (two files swapped or
    renamed): every cross-rank check would pair the wrong ranks, so it is an error. So is a
    file named after a rank above MAX_RANK (a replay would size its network by it)."""
    for rank, scan in scans.items():
        if rank > MAX_RANK:
            out.add(Diagnostic("error", "rank-out-of-range",
                               f"the file is named rank {rank}, above the largest rank {MAX_RANK}: name each "
                               "file after the rank it holds", file=scan.file, rank=rank))
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


def check_across_ranks(scans: dict[int, RankScan], comm_groups, out: Diagnostics, *,
                       absent_peers: bool = True, groups_file: str | None = None) -> int | None:
    """Every check that needs the ranks together (each rank's `RankScan`, made while streaming it).

    Without `absent_peers` the set must be a whole job: every rank it names has a file
    (`missing-rank`, `missing-ranks`). `groups_file` names the communicator-group file in the
    findings of ranks only it names. Returns the rank count the files record (None: not recorded)."""
    groups = comm_groups or {}
    check_file_ranks(scans, out)
    check_one_conversion(scans, out)
    declared = check_world_size(scans, out)
    issuers = issuers_of(scans)
    agree = _pairs_agree(scans)  # then every send and receive names a rank with a file
    named = {} if absent_peers else named_ranks(scans, groups, groups_file or "comm_group.json", issuers, agree)
    check_missing_ranks(scans, out, declared=declared, whole=not absent_peers, named=named)
    check_named_ranks(named, out)
    if absent_peers:
        check_absent_ranks(scans, groups, out)
    if len(scans) > 1:
        check_collective_sequences(scans, groups, out, issuers)
        check_point_to_point(scans, out, absent_peers, agree)
    return declared
