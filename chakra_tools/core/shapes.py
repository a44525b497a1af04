"""A rank file's shape: its graph up to the ranks and groups its nodes name, read in one pass and
hashed in C (`hotloops.shape_of`).

Two files of one shape differ in nothing but which ranks and groups their nodes name, so what
holds of one file's nodes holds of the other's once those names are swapped (`RankShape.renaming`).
Replica classes start from shapes (replay/replicas.py), and validation checks one file of each
shape in full and the others by that renaming (core/validate.py, `by_shape`).
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from google.protobuf.message import DecodeError

from . import hotloops
from .errors import Diagnostics
from .etio import metadata_from_pb
from .framing import LEN, decode_varint, looks_like_metadata, open_binary
from .legacy import legacy_metadata
from .model import Metadata
from .rankscan import Renamed, RankScan
from .schema import et_def_pb2 as pb


#: a set of this many rank files is validated one file per shape by default (and, under
#: `trace-replay --replicas auto`, replayed by classes: replay/replicas.py's AUTO_RANKS)
LARGE_SET = 256


@dataclass(frozen=True)
class RankShape:
    """One rank file's graph up to the ranks and groups it names (`read_shape`).

    `digest`: its nodes' bytes but those names (the metadata, which no node's timing reads, left
    out: a rank's host, a scaled copy's rank, differ between replicas); `pattern`: each
    name in file order as the index of its first appearance (groups and ranks counted apart);
    `groups`, `ranks`: the distinct group names and rank numbers, in order of first appearance
    (a rank's own number among them: a send names its source)."""

    digest: tuple
    pattern: tuple[int, ...]
    groups: tuple[str, ...]
    ranks: tuple[int, ...]

    def renaming(self, other: RankShape) -> tuple[dict[str, str], dict[int, int]]:
        """What each group and rank this file names is called in `other`, a file of the same
        shape (equal digest and pattern: the names sit in the same places)."""
        return dict(zip(self.groups, other.groups)), dict(zip(self.ranks, other.ranks))


def read_shape(path: str | Path) -> RankShape | None:
    """The shape of the rank file at `path`; None where it cannot be read so (a malformed frame,
    a pg_name that is no string): that rank is then like no other."""
    return read_shape_and_metadata(path)[0]


#: the check by the metadata's bytes: a large set's replicas carry a handful of distinct ones
_looks_like_metadata = functools.lru_cache(maxsize=256)(looks_like_metadata)
#: a GlobalMetadata message up to this size is looked up by its bytes; a larger one (a scaled
#: set's process_groups, 87 KB a rank at 16,384 ranks) differs per rank in its rank alone, so
#: hashing and keeping it would cost more than reading it (1.4 GB kept at 16,384 ranks)
SMALL_METADATA = 4096


def read_shape_and_metadata(path: str | Path) -> tuple[RankShape | None, bytes | None]:
    """`read_shape`, and the file's GlobalMetadata message as it lies in the file (None where it
    has none), from the one read."""
    with open_binary(path) as f:
        buf = f.read()
    size, pos = decode_varint(buf, 0)
    metadata = buf[pos:pos + size] if size > 0 else None
    if metadata is not None and not (_looks_like_metadata(metadata) if len(metadata) <= SMALL_METADATA
                                     else looks_like_metadata(metadata)):
        metadata = None
    shaped = hotloops.shape_of(buf, pos + size if metadata is not None else 0)
    if shaped is None:
        return None, metadata
    a, b, refs = shaped
    return RankShape((a, b), *hotloops.pattern_of(refs)), metadata


def scan_by_shape(files: Mapping[int, Path], groups, out: Diagnostics, shapes: dict,
                  scan_file: Callable[..., RankScan]) -> dict[int, RankScan]:
    """Each rank's scan, the first file of each shape read node by node, the others' made from
    it: a file of the same shape holds the same nodes but for the groups and ranks they name, so
    it has the same findings, and the same communication with those names swapped. Only where
    the first file had no finding at all, and the other's names pass what the node checks ask
    of them (`_renamed`); anything else is read node by node too (`scan_file(rank, file, groups,
    out, None)`, validate.py's). `shapes` gets every shape."""
    scans: dict[int, RankScan] = {}
    clean: dict[tuple, _Template | None] = {}  # shape -> its first file's, where that had no finding
    renamer = _Renamer(groups)
    for rank, f in files.items():
        shape, metadata = read_shape_and_metadata(f)
        shapes[rank] = shape
        key = None if shape is None else (shape.digest, shape.pattern)
        template = clean.get(key) if key is not None else None
        if template is not None:
            scan = renamer.renamed(template, shape, rank, f, metadata)
            if scan is not None:
                scans[rank] = scan
                continue
        found = len(out)
        scans[rank] = scan_file(rank, f, groups, out, None)
        if key is not None and key not in clean:
            clean[key] = _Template(scans[rank], shape, renamer.judged) if len(out) == found else None
    return scans


class _Renamer:
    """Makes a replica's scan from its representative's (`renamed`), with what replicas share
    worked out once: what the checks ask of each group name (`judged`), each GlobalMetadata's
    three attributes by its bytes (replicas' differ in a rank at most), and per representative
    what a replica's names are checked against (`_Template`). At 131,072 ranks each replica costs
    this loop a few microseconds: most of validation's share of a replay by classes."""

    def __init__(self, groups) -> None:
        #: group name -> what validate._check_pg asks of a replica's name in its place: decimal,
        #: in the file, of the representative's size; the world's names ("" and "0") unchecked
        self.judged = {} if groups is None else {pg: len(m) for pg, m in groups.items() if pg.isdecimal()}
        self.judged[""] = self.judged["0"] = _WORLD
        self.metadata: dict[bytes, tuple | None] = {}

    def renamed(self, t: _Template, other: RankShape, rank: int, f: Path, metadata: bytes | None) -> RankScan | None:
        """The representative's scan (`t`: of a file with no findings) as the scan of rank `rank`'s
        file `f`, of the same shape `other`; None where that file must be read node by node: no
        metadata, or a legacy one, or a name the checks would judge otherwise (a group the
        comm-group file lacks or of another size, a peer that is the rank itself)."""
        theirs, names = other.groups, other.ranks
        if metadata is None or tuple(map(self.judged.get, theirs)) != t.sizes:
            return None
        if names and (min(names) < 0 or (names[t.own_at] != rank if t.own_at >= 0 else rank in names)):
            return None
        if len(metadata) > SMALL_METADATA:
            fields = _metadata_fields(metadata)
        else:
            fields = self.metadata.get(metadata, False)
            if fields is False:
                fields = self.metadata[metadata] = _metadata_fields(metadata)
        if fields is None:
            return None
        scan = t.scan
        collectives = dict(zip(t.pick(theirs), t.calls)) if t.pick is not None else t.collectives_for(theirs)
        renaming = Renamed(scan, dict(zip(t.ranks, names)), dict(zip(names, t.ranks))) if names else t.bare
        return RankScan.replica(rank, str(f), scan.nodes, fields, collectives, renaming)


#: what `_Renamer.judged` says of a world name; what a template asks of a name its representative
#: could not have had clean (no name is judged so: a name not in the file is judged None)
_WORLD, _NEVER = -1, -3


class _Template:
    """A representative's scan as its replicas' are made from it: the size each of its group names
    has (`sizes`, what a replica's name in that place must have: `_Renamer.judged`), the place of
    its own rank among the ranks it names (`own_at`, -1: none), and its collectives laid out to be
    renamed by position (`collectives_for`)."""

    __slots__ = ("scan", "groups", "ranks", "sizes", "own_at", "pick", "calls", "bare")

    def __init__(self, scan: RankScan, shape: RankShape, judged: dict[str, int]) -> None:
        self.scan, self.groups, self.ranks = scan, shape.groups, shape.ranks
        self.sizes = tuple(_WORLD if pg in ("", "0") else judged.get(pg, _NEVER) for pg in shape.groups)
        self.own_at = shape.ranks.index(scan.rank) if scan.rank in shape.ranks else -1
        at = {pg: j for j, pg in enumerate(shape.groups)}
        self.pick = self.calls = None
        if scan.collectives and all(pg in at for pg in scan.collectives):
            places, self.calls = zip(*((at[pg], calls) for pg, calls in scan.collectives.items()))
            get = operator.itemgetter(*places)
            self.pick = get if len(places) > 1 else (lambda names: (get(names),))
        self.bare = Renamed(scan, {}, {})  # for replicas whose nodes name no rank

    def collectives_for(self, theirs: tuple[str, ...]) -> dict:
        """The representative's collectives under the group names `theirs` of a replica."""
        if self.pick is not None:
            return dict(zip(self.pick(theirs), self.calls))
        pgs = dict(zip(self.groups, theirs))  # no collective, or one on a group no node names
        return {pgs.get(pg, pg): calls for pg, calls in self.scan.collectives.items()}


def _metadata_fields(metadata: bytes) -> tuple | None:
    """What `RankScan.read_metadata` takes from a GlobalMetadata message; None for a legacy or
    undecodable one. Read in C where it can be (`hotloops.metadata_fields`, which checks every
    attribute as protobuf would), else decoded; a message past SMALL_METADATA has its other
    attributes stepped over (`_picked`): checking an 87 KB record would cost more than the rest."""
    got = hotloops.metadata_fields(metadata) if len(metadata) <= SMALL_METADATA else None
    if got is not None:
        return got
    meta = _decoded(metadata)
    if meta is None:
        return None
    scan = RankScan(None, None)
    scan.read_metadata(meta)
    return scan.world_size, scan.recorded_rank, scan.conversion


def _decoded(metadata: bytes) -> Metadata | None:
    """The attributes of a GlobalMetadata message the cross-rank checks take; None for a legacy
    or undecodable one."""
    if legacy_metadata(metadata):
        return None
    try:
        return metadata_from_pb(pb.GlobalMetadata.FromString(_picked(metadata)), RankScan.METADATA)
    except DecodeError:
        return None


#: GlobalMetadata's fields: its version (1) and its attributes (2, each an AttributeProto whose
#: name is its field 1); every one of them length-delimited
_VERSION, _ATTR, _NAME = 1, 2, 1
_WANTED = frozenset(name.encode() for name in RankScan.METADATA)


def _picked(metadata: bytes) -> bytes:
    """The GlobalMetadata message `metadata` with only the attributes the cross-rank checks take
    (`RankScan.METADATA`), as bytes protobuf decodes: the others are stepped over by their
    lengths, not decoded (a scaled set's process_groups is 87 KB a rank). The message whole where
    it is not laid out so (protobuf then decodes it, and refuses it where it is malformed)."""
    keep, pos, n = [], 0, len(metadata)
    try:
        while pos < n:
            start, tag = pos, metadata[pos]  # every tag here is one byte: field 1 or 2, LEN
            length, pos = (metadata[pos + 1], pos + 2) if metadata[pos + 1] < 0x80 else decode_varint(metadata, pos + 1)
            end = pos + length
            if tag not in (_VERSION << 3 | LEN, _ATTR << 3 | LEN) or length < 0 or end > n:
                return metadata
            if tag == _ATTR << 3 | LEN:
                size = metadata[pos + 1]  # the attribute's name first, shorter than 128 bytes
                if metadata[pos] != _NAME << 3 | LEN or size >= 0x80 or pos + 2 + size > end:
                    return metadata
                if metadata[pos + 2:pos + 2 + size] in _WANTED:
                    keep.append(metadata[start:end])
            pos = end
    except IndexError:  # a field cut short
        return metadata
    return b"".join(keep)
