"""What one rank's stream leaves for the checks that need every rank at once (crosscheck.py):
its collectives per group, its sends and receives, the ranks it names, three attributes of its
metadata. Made while a rank file is read node by node (validate.py), or, for a replica validated
by shape, from its representative's under the replica's names (byshape.py), where a check needs it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from .model import CommType


@dataclass(slots=True)
class RankScan:
    """What the cross-rank checks need from one rank, gathered in one pass over its nodes (slots:
    a 131,072-rank set validated by shape makes one for each replica, `replica`)."""

    rank: int | None
    file: str | None
    nodes: int = 0
    world_size: int | None = None  # the rank count its GlobalMetadata says the set was written with
    recorded_rank: int | None = None  # the rank its GlobalMetadata says the file holds
    conversion: str | None = None  # the id of the conversion that wrote it (core.placement)
    collectives: dict[str, list[tuple[int, str, CommType | None, int]]] = field(default_factory=lambda: defaultdict(list))
    sends: list[tuple[int, str, int, int, int]] = field(default_factory=list)  # id, name, dst, tag, size
    recvs: list[tuple[int, str, int, int, int]] = field(default_factory=list)  # id, name, src, tag, size
    peers: dict[int, list] = field(default_factory=dict)  # rank sent to/received from: first node, count
    #: a replica validated by shape (core/byshape.py): the scan its own was made from, under this
    #: file's names. Its sends, receives and peers are that scan's, renamed where first asked for
    #: (`point_to_point`, `peer_notes`): the checks compare pairs of ranks through the
    #: representatives' own (`renaming`, `by_peer`), so a clean set renames none.
    renamed_from: Renamed | None = None
    _by_peer: tuple[dict, dict] | None = field(default=None, init=False, repr=False)
    _renamed_p2p: tuple[list, list] | None = field(default=None, init=False, repr=False)

    #: the GlobalMetadata attributes `read_metadata` takes
    METADATA = ("world_size", "rank", "conversion")

    def read_metadata(self, meta) -> None:
        """What the cross-rank checks take from the file's GlobalMetadata (a core.model.Metadata,
        or None): the job's rank count, the rank it holds, the conversion that wrote it."""
        attrs = meta.attrs if meta is not None else {}
        world, rank, conversion = (attrs.get(k) for k in self.METADATA)
        self.world_size = world.value if world is not None and type(world.value) is int else None
        self.recorded_rank = rank.value if rank is not None and type(rank.value) is int and rank.value >= 0 else None
        self.conversion = conversion.value if conversion is not None and isinstance(conversion.value, str) else None

    @classmethod
    def replica(cls, rank: int, file: str, nodes: int, metadata: tuple, collectives: dict,
                renamed_from: Renamed) -> RankScan:
        """The scan of a replica, made from its representative's (`renamed_from`): no sends,
        receives or peers of its own (they are the representative's, renamed where asked for);
        `metadata` is `read_metadata`'s three fields."""
        return cls(rank, file, nodes, *metadata, collectives, (), (), _NO_PEERS, renamed_from)

    def renaming(self) -> tuple[RankScan, dict[int, int] | None, dict[int, int] | None]:
        """(the scan whose records this one's are, what each rank that scan names is called here,
        the other way round); the two names None where this scan is its own."""
        return (self, None, None) if self.renamed_from is None else self.renamed_from

    def point_to_point(self) -> tuple[list, list]:
        """This rank's sends and receives, (id, name, peer, tag, size) each, in node order."""
        if self.renamed_from is None:
            return self.sends, self.recvs
        if self._renamed_p2p is None:
            scan, ranks = self.renamed_from.base, self.renamed_from.ranks
            sends, recvs = scan.point_to_point()
            self._renamed_p2p = ([(nid, name, ranks.get(dst, dst), tag, size) for nid, name, dst, tag, size in sends],
                                 [(nid, name, ranks.get(src, src), tag, size) for nid, name, src, tag, size in recvs])
        return self._renamed_p2p

    def peer_notes(self) -> dict[int, list]:
        """`peers`: each rank this one sends to or receives from, [the first node that names it
        (id, name), "sends to" or "receives from", how many nodes do]."""
        if self.renamed_from is None:
            return self.peers
        scan, ranks = self.renamed_from.base, self.renamed_from.ranks
        return {ranks.get(p, p): first for p, first in scan.peer_notes().items()}

    def by_peer(self) -> tuple[dict, dict]:
        """(peer -> the (tag, size) of each send to it, in order; peer -> those of each receive
        from it), of a scan read node by node: a replica's are its representative's
        (`renaming()[0].by_peer()`) under its own names."""
        if self._by_peer is None:
            self._by_peer = tuple(_sequences(side) for side in self.point_to_point())
        return self._by_peer


#: a replica's own peers: none (never written: a replica's scan is made whole, not streamed)
_NO_PEERS = MappingProxyType({})


class Renamed(NamedTuple):
    """A scan under another file's names: `ranks`, what each rank `base`'s nodes name is called
    there (every one of them: a file of the same shape names as many), and `back`, the other way
    round. (A tuple: one is made for each replica of a 100k-rank set.)"""

    base: RankScan
    ranks: dict[int, int]
    back: dict[int, int]


def _sequences(entries: list[tuple[int, str, int, int, int]]) -> dict[int, tuple]:
    out: dict[int, list] = {}
    for _, _, peer, tag, size in entries:
        out.setdefault(peer, []).append((tag, size))
    return {peer: tuple(seq) for peer, seq in out.items()}


def note_peer(peers: dict[int, list], peer: int | None, node_id: int, node_name: str, verb: str) -> None:
    """Add to a rank's summary (`RankScan.peers`) that node `node_id` sends to or receives from
    `peer`: the first node that names each peer, and how many do (one entry per peer, not per node)."""
    if peer is None:
        return  # reported per node (missing-comm-dst / missing-comm-src)
    seen = peers.get(peer)
    if seen is None:
        peers[peer] = [node_id, node_name, verb, 1]
    else:
        seen[3] += 1
