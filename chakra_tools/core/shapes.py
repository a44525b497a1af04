"""A rank file's shape: its graph up to the ranks and groups its nodes name, read in one pass and
hashed in C (`hotloops.shape_of`).

Two files of one shape differ in nothing but which ranks and groups their nodes name, so what
holds of one file's nodes holds of the other's once those names are swapped (`RankShape.renaming`).
Replica classes start from shapes (replay/replicas.py), and validation checks one file of each
shape in full and the others by that renaming (core/validate.py, `by_shape`).
"""

from __future__ import annotations

import functools
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
    clean: dict[tuple, tuple[int, RankScan | None]] = {}  # shape -> its first rank, its scan if clean
    renamer = _Renamer(groups)
    for rank, f in files.items():
        shape, metadata = read_shape_and_metadata(f)
        shapes[rank] = shape
        key = None if shape is None else (shape.digest, shape.pattern)
        first = clean.get(key) if key is not None else None
        if first is not None and first[1] is not None:
            scan = renamer.renamed(first[1], shapes[first[0]], shape, rank, f, metadata)
            if scan is not None:
                scans[rank] = scan
                continue
        found = len(out)
        scans[rank] = scan_file(rank, f, groups, out, None)
        if key is not None and key not in clean:
            clean[key] = (rank, scans[rank] if len(out) == found else None)
    return scans


class _Renamer:
    """Makes a replica's scan from its representative's (`renamed`), with what every replica
    shares worked out once: the size of each group of the comm-group file, each GlobalMetadata's
    three attributes by its bytes (replicas' differ in a rank at most)."""

    def __init__(self, groups) -> None:
        self.sizes = None if groups is None else {pg: len(members) for pg, members in groups.items()}
        self.metadata: dict[bytes, tuple | None] = {}

    def renamed(self, scan: RankScan, shape: RankShape, other: RankShape, rank: int, f: Path,
                metadata: bytes | None) -> RankScan | None:
        """`scan` (of a file of `shape`, with no findings) as the scan of rank `rank`'s file `f`,
        of the same shape `other`; None where that file must be read node by node: no metadata,
        or a legacy one, or a name the checks would judge otherwise (a group the comm-group file
        lacks or of another size, a peer that is the rank itself)."""
        if metadata is None:
            return None
        sizes = self.sizes
        for mine, theirs in zip(shape.groups, other.groups):  # validate._check_pg judges them alike?
            if mine in ("", "0"):
                if theirs not in ("", "0"):
                    return None
            elif sizes is None or not theirs.isdecimal() or sizes.get(theirs, -1) != sizes.get(mine, -2):
                return None
        own = scan.rank
        for mine, theirs in zip(shape.ranks, other.ranks):
            if (theirs == rank) != (mine == own) or theirs < 0:
                return None
        if len(metadata) > SMALL_METADATA:
            fields = _metadata_fields(metadata)
        else:
            fields = self.metadata.get(metadata, False)
            if fields is False:
                fields = self.metadata[metadata] = _metadata_fields(metadata)
        if fields is None:
            return None
        pgs, ranks = shape.renaming(other)
        out = RankScan(rank, str(f), scan.nodes,
                       collectives={pgs.get(pg, pg): calls for pg, calls in scan.collectives.items()},
                       renamed_from=Renamed(scan, ranks, dict(zip(other.ranks, shape.ranks))))
        out.world_size, out.recorded_rank, out.conversion = fields
        return out


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
