"""Validation one file per shape: a large set's replicas checked through their representative.

A file of the same shape (core/shapes.py) as one read node by node holds the same nodes but for the
groups and ranks they name, so it has the same findings, and the same communication under those
names. `scan_by_shape` reads the first file of each shape node by node and admits each other file
of that shape as a row of its representative's `Template` (its names, its metadata's three
fields) where the representative had no finding and the replica's names pass what the node checks
ask of them. `clean_by_class` then runs the cross-rank checks on the rows as they are (a rank's
peer looked up by position in its names, a group's record shared by the replicas that issue on it)
and says whether they would find anything; only where they would are the rows made into scans
(`scans_of`) for crosscheck.py to say what, in its own words. At 131,072 ranks a scan per replica,
renamed dicts and all, cost a fifth of a replay by classes; a row costs a tuple.
"""

from __future__ import annotations

import operator
from itertools import repeat
from pathlib import Path
from typing import Callable, Iterable, Mapping

from .crosscheck import SIZE_INVARIANT
from .errors import Diagnostics
from .model import MAX_RANK
from .rankscan import RankScan, Renamed
from .shapes import SMALL_METADATA, RankShape, metadata_fields, read_shape_and_metadata


def scan_by_shape(files: Mapping[int, Path], groups, out: Diagnostics, shapes: dict,
                  scan_file: Callable[..., RankScan]) -> tuple[dict[int, RankScan], list[Template]]:
    """The scans of the files read node by node (`scan_file(rank, file, groups, out, None)`,
    validate.py's), and the templates whose rows are every other file: the first file of each
    shape is read, and so is any file whose shape's first had a finding or whose names the node
    checks would judge otherwise (`_Admission.admit`). `shapes` gets every file's shape."""
    scans: dict[int, RankScan] = {}
    clean: dict[tuple, Template | None] = {}  # shape -> its first file's, where that had no finding
    admission = _Admission(groups)
    for rank, f in files.items():
        shape, metadata = read_shape_and_metadata(f)
        shapes[rank] = shape
        key = None if shape is None else (shape.digest, shape.pattern)
        template = clean.get(key) if key is not None else None
        if template is not None and admission.admit(template, shape, rank, f, metadata):
            continue
        found = len(out)
        scans[rank] = scan_file(rank, f, groups, out, None)
        if key is not None and key not in clean:
            clean[key] = Template(scans[rank], shape, admission.judged) if len(out) == found else None
    return scans, [t for t in clean.values() if t is not None and t.rows]


def scans_of(files: Mapping[int, Path], scans: Mapping[int, RankScan], templates: list[Template]) -> dict[int, RankScan]:
    """Every rank's scan, in the files' order: the rows made into scans under their own names."""
    made = {row[0]: t.scan_of(row) for t in templates for row in t.rows}
    return {r: scans[r] if r in scans else made[r] for r in files}


def node_count(scans: Mapping[int, RankScan], templates: list[Template]) -> int:
    return sum(s.nodes for s in scans.values()) + sum(t.scan.nodes * len(t.rows) for t in templates)


#: what `_Admission.judged` says of a world name; what a template asks of a name its representative
#: could not have had clean (no name is judged so: a name not in the file is judged None)
_WORLD, _NEVER = -1, -3


class Template:
    """A representative's scan as its replicas' are made from it: the size each of its group names
    has (`sizes`, what a replica's name in that place must have: `_Admission.judged`), the place of
    each rank it names (`place`; `own_at`, its own, -1: none), its collectives by the place of their
    group (`layout`), and its replicas (`rows`: rank, file, shape, metadata fields)."""

    __slots__ = ("scan", "groups", "ranks", "sizes", "own_at", "place", "layout", "rows")

    def __init__(self, scan: RankScan, shape: RankShape, judged: dict[str, int]) -> None:
        self.scan, self.groups, self.ranks = scan, shape.groups, shape.ranks
        self.sizes = tuple(_WORLD if pg in ("", "0") else judged.get(pg, _NEVER) for pg in shape.groups)
        self.place = {r: i for i, r in enumerate(shape.ranks)}
        self.own_at = self.place.get(scan.rank, -1)
        at = {pg: j for j, pg in enumerate(shape.groups)}
        # None: a collective on a group no node names (the world's ""), renamed by name instead
        self.layout = (tuple((at[pg], calls) for pg, calls in scan.collectives.items())
                       if all(pg in at for pg in scan.collectives) else None)
        self.rows: list[tuple[int, Path, RankShape, tuple]] = []

    def collectives_for(self, theirs: tuple[str, ...]) -> dict:
        """The representative's collectives under the group names `theirs` of a replica."""
        if self.layout is not None:
            return {theirs[j]: calls for j, calls in self.layout}
        pgs = dict(zip(self.groups, theirs))
        return {pgs.get(pg, pg): calls for pg, calls in self.scan.collectives.items()}

    def scan_of(self, row: tuple) -> RankScan:
        """A row as a replica's scan (`RankScan.replica`), for crosscheck.py."""
        rank, f, other, fields = row
        names = other.ranks
        renaming = Renamed(self.scan, dict(zip(self.ranks, names)), dict(zip(names, self.ranks)))
        return RankScan.replica(rank, str(f), self.scan.nodes, fields, self.collectives_for(other.groups), renaming)


class _Admission:
    """Admits a file as a row of a template where the checks would judge it as its representative:
    with what replicas share worked out once, what the checks ask of each group name (`judged`) and
    each GlobalMetadata's three attributes by its bytes (replicas' differ in a rank at most)."""

    def __init__(self, groups) -> None:
        #: group name -> what validate._check_pg asks of a replica's name in its place: decimal,
        #: in the file, of the representative's size; the world's names ("" and "0") unchecked
        self.judged = {} if groups is None else {pg: len(m) for pg, m in groups.items() if pg.isdecimal()}
        self.judged[""] = self.judged["0"] = _WORLD
        self.metadata: dict[bytes, tuple | None] = {}

    def admit(self, t: Template, other: RankShape, rank: int, f: Path, metadata: bytes | None) -> bool:
        """Whether rank `rank`'s file `f`, of shape `other` (the template's), is a row of `t`; not
        where it has no metadata, or a legacy one, or a name the checks would judge otherwise (a
        group the comm-group file lacks or of another size, a peer that is the rank itself)."""
        names = other.ranks
        if metadata is None or tuple(map(self.judged.get, other.groups)) != t.sizes:
            return False
        if names and (min(names) < 0 or (names[t.own_at] != rank if t.own_at >= 0 else rank in names)):
            return False
        if len(metadata) > SMALL_METADATA:
            fields = metadata_fields(metadata)
        else:
            fields = self.metadata.get(metadata, False)
            if fields is False:
                fields = self.metadata[metadata] = metadata_fields(metadata)
        if fields is None:
            return False
        t.rows.append((rank, f, other, fields))
        return True


# --------------------------------------------------------------------------------------------
# the cross-rank checks, class by class
# --------------------------------------------------------------------------------------------

def clean_by_class(scans: Mapping[int, RankScan], templates: list[Template],
                   groups: Mapping[str, tuple[int, ...]] | None) -> tuple[bool, int | None]:
    """(whether crosscheck.check_across_ranks, on the whole job, would find nothing in the set of
    `scans` and the templates' rows; the `world_size` the files record). Each check is
    crosscheck.py's, asked only whether it passes: the files' recorded ranks, one conversion, a
    world size a set can have, no rank below it without a file, every group's issuers its members
    with one sequence, every member of every group present, every two ranks agreeing on what
    passes between them. False says nothing of what: crosscheck.py says that, on `scans_of`.
    The rows are read a column at a time (their ranks, their names, their metadata's fields)."""
    groups = groups or {}
    where: dict[int, object] = dict(scans)  # rank -> its scan, or (template, shape) for a row
    fields = {(s.world_size, s.recorded_rank, s.conversion) for s in scans.values()}
    if any(r > MAX_RANK or (s.recorded_rank is not None and s.recorded_rank != r) for r, s in scans.items()):
        return False, None
    for t in templates:
        ranks, _, others, metadata = zip(*t.rows)
        if max(ranks) > MAX_RANK:
            return False, None
        distinct = set(metadata)
        if any(f[1] is not None for f in distinct) and any(map(operator.ne, (f[1] for f in metadata), ranks)):
            return False, None
        fields |= distinct
        where.update(zip(ranks, zip(repeat(t), others)))
    conversions = {f[2] for f in fields} - {None, ""}
    sizes = {f[0] for f in fields} - {None}
    if len(conversions) > 1 or any(not 1 <= w <= MAX_RANK + 1 for w in sizes):
        return False, None
    declared = max(sizes, default=None)
    end = declared if declared is not None else max(where) + 1
    if sum(1 for r in where if r < end) != end:  # a rank below the set's count without a file
        return False, None
    return (_sequences_agree(scans, templates, where, groups) and _members_present(where, groups)
            and _pairs_agree(scans, templates, where)), declared


def _sequences_agree(scans, templates, where, groups) -> bool:
    """crosscheck.check_collective_sequences finds nothing: every group that is issued on is issued
    on by each of its members and no other rank, with records that compare alike."""
    issuers: dict[str, list[int]] = {}
    records: dict[str, dict[int, list]] = {}  # pg -> the records its issuers hold (one for replicas)

    def issue(issued: Iterable[tuple[str, int]], calls: list) -> None:
        """Ranks issuing `calls` (one record), each on its group."""
        for pg, r in issued:
            ranks = issuers.get(pg)
            if ranks is None:
                issuers[pg] = [r]
            else:
                ranks.append(r)
        for pg in {pg for pg, _ in issued}:
            records.setdefault(pg, {})[id(calls)] = calls

    for r, s in scans.items():
        for pg, calls in s.collectives.items():
            if calls:
                issue([(pg, r)], calls)
    for t in templates:
        if t.layout is None:  # renamed by name, row by row
            for rank, _, other, _ in t.rows:
                for pg, calls in t.collectives_for(other.groups).items():
                    if calls:
                        issue([(pg, rank)], calls)
            continue
        ranks = [row[0] for row in t.rows]
        for j, calls in t.layout:
            if calls:
                issue(list(zip([row[2].groups[j] for row in t.rows], ranks)), calls)
    for pg, issued in issuers.items():
        members = where.keys() if pg in ("", "0") and pg not in groups else groups.get(pg)
        if members is None:
            continue  # reported per node (unknown-pg, no-comm-groups): not a clean scan
        if len(issued) != len(members) or (issued != list(members) and set(issued) != set(members)):
            return False
        first, *others = records[pg].values()
        if not all(_same_sequence(first, calls) for calls in others):
            return False
    return True


def _same_sequence(a: list, b: list) -> bool:
    """What crosscheck._compare_sequence finds nothing in: as many collectives, each of the same
    kind, and of the same size where the kind's size is the same on every rank."""
    return len(a) == len(b) and all(x[2] == y[2] and (x[2] not in SIZE_INVARIANT or x[3] == y[3])
                                    for x, y in zip(a, b))


def _members_present(where, groups) -> bool:
    """crosscheck.named_ranks names nothing through a group: every member has a file."""
    return all(all(map(where.__contains__, members)) for members in groups.values())


def _pairs_agree(scans, templates, where: Mapping[int, object]) -> bool:
    """crosscheck._pairs_agree, on rows as they are: a row's peer is the rank in the place its
    representative's peer has among the ranks it names, and what the peer calls the row is the
    name in the row's place among the peer's."""

    def agree(r: int, peer: int, seq: tuple | None) -> bool:
        """Whether `peer` receives from `r` what `r` sends it (`seq`), or, with None, sends to `r`."""
        v = where.get(peer)
        if v is None:
            return False
        if type(v) is tuple:
            t, other = v
            names = other.ranks
            if r not in names:
                return False
            return _answers(t.scan.by_peer(), t.ranks[names.index(r)], seq)
        return _answers(v.by_peer(), r, seq)

    for r, s in scans.items():
        sent, received = s.by_peer()
        if not (all(agree(r, p, seq) for p, seq in sent.items()) and all(agree(r, p, None) for p in received)):
            return False
    for t in templates:
        sent, received = t.scan.by_peer()
        ranks, others = [row[0] for row in t.rows], [row[2] for row in t.rows]
        for p, seq in [*sent.items(), *((p, None) for p in received)]:
            i = t.place[p]
            peers = [other.ranks[i] for other in others]
            if not (_one_pairing(ranks, [where.get(q) for q in peers], seq)
                    or all(agree(r, q, seq) for r, q in zip(ranks, peers))):
                return False
    return True


def _one_pairing(ranks: list[int], peers: list, seq: tuple | None) -> bool:
    """Whether the rows `ranks` of one template agree with their peers (`peers`: each one's `where`)
    where the peers are rows of one template that name each row in one place (a pipeline stage's
    replicas and the next stage's): then one comparison of records says it for every row. False
    where they are not so (`_pairs_agree` then asks row by row)."""
    first = peers[0]
    if type(first) is not tuple or ranks[0] not in first[1].ranks:
        return False
    t, k = first[0], first[1].ranks.index(ranks[0])
    if not all(type(v) is tuple and v[0] is t and v[1].ranks[k] == r for v, r in zip(peers, ranks)):
        return False
    return _answers(t.scan.by_peer(), t.ranks[k], seq)


def _answers(by_peer: tuple[dict, dict], name: int, seq: tuple | None) -> bool:
    """Whether a scan whose sends and receives by peer are `by_peer` receives from the rank it
    calls `name` what that rank sends it (`seq`), or, with None, sends to it."""
    sent, received = by_peer
    if seq is None:
        return name in sent
    theirs = received.get(name)
    return theirs is seq or theirs == seq
