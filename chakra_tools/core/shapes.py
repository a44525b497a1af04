"""A rank file's shape: its graph up to the ranks and groups its nodes name, read in one pass and
hashed in C (`hotloops.shape_of`).

Two files of one shape differ in nothing but which ranks and groups their nodes name, so what
holds of one file's nodes holds of the other's once those names are swapped, place for place
(`RankShape.groups`, `ranks`). Replica classes start from shapes (replay/replicas.py), and
validation checks one file of each shape in full and the others by that renaming (core/byshape.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import DecodeError

from . import hotloops
from .etio import metadata_from_pb
from .framing import LEN, decode_varint, looks_like_metadata, open_binary
from .legacy import legacy_metadata
from .model import Metadata
from .rankscan import RankScan
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


def metadata_fields(metadata: bytes) -> tuple | None:
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
