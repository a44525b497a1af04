"""Where each rank of a captured job ran, and which collective library it used, kept in each rank
file's GlobalMetadata so that a converted rank set carries them without its capture's manifest.

The network a job crossed has the shape of its placement: ranks of one machine talk over its own
memory, ranks of two machines over their links. The converter records each rank's host name (the
capture manifest's `host`) as `host`, and the run's collective library (gloo, nccl) as
`comm_backend`; `Placement` reads them back as nodes, each the ranks of one host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

from .model import Metadata, make_attr

if TYPE_CHECKING:
    from .graph import Graph, RankSet

HOST, BACKEND, CONVERSION = "host", "comm_backend", "conversion"


def record_placement(graphs: Iterable["Graph"], hosts: Mapping[int, str | None], backend: str | None,
                     conversion: str | None = None) -> None:
    """Write each rank's host and the run's library into its graph's metadata (where known; a
    rank whose host is not known loses any it had), and the id of the conversion that wrote
    them all (`conversion`): files of one rank set converted apart (a host-only rank beside
    full ones, another run's rank) are then told apart by validation."""
    for g in graphs:
        meta = g.metadata
        attrs = {k: v for k, v in meta.attrs.items() if k != HOST}
        if hosts.get(g.rank):
            attrs[HOST] = make_attr(HOST, str(hosts[g.rank]))
        if backend:
            attrs[BACKEND] = make_attr(BACKEND, str(backend))
        if conversion:
            attrs[CONVERSION] = make_attr(CONVERSION, conversion)
        if attrs != meta.attrs:
            g.metadata = Metadata(meta.version, attrs, meta.present)


@dataclass(frozen=True)
class Placement:
    """Ranks grouped by the machine they ran on: `nodes[i]` the ranks of host `hosts[i]`, nodes
    in the order of their lowest rank.

    >>> p = Placement.from_hosts({0: "a", 1: "a", 2: "b", 3: "b"})
    >>> p.nodes, p.ranks_per_node, p.contiguous, p.node_of(2)
    (((0, 1), (2, 3)), 2, True, 1)
    """

    nodes: tuple[tuple[int, ...], ...]
    hosts: tuple[str, ...]

    @classmethod
    def from_hosts(cls, hosts: Mapping[int, str]) -> "Placement":
        by: dict[str, list[int]] = {}
        for r in sorted(hosts):
            by.setdefault(hosts[r], []).append(r)
        order = sorted(by, key=lambda h: by[h][0])
        return cls(tuple(tuple(by[h]) for h in order), tuple(order))

    @classmethod
    def uniform(cls, world: int, ranks_per_node: int) -> "Placement":
        """`world` ranks, `ranks_per_node` consecutive ones per node (torchrun's placement)."""
        k = max(1, ranks_per_node)
        return cls(tuple(tuple(range(s, min(world, s + k))) for s in range(0, world, k)),
                   tuple(f"node{i}" for i in range(-(-world // k))))

    def hosts_at(self, world: int) -> dict[int, str | None]:
        """Each of `world` ranks' host on this placement grown or cut to `world` ranks, as many per
        machine as now (more machines named node<i>): the hosts a rescaled job runs on. None for
        every rank where the placement is not torchrun's (`contiguous`).

        >>> Placement.from_hosts({0: "a", 1: "a", 2: "b", 3: "b"}).hosts_at(6)
        {0: 'a', 1: 'a', 2: 'b', 3: 'b', 4: 'node2', 5: 'node2'}
        """
        if not self.contiguous:
            return {r: None for r in range(world)}
        k = self.ranks_per_node
        return {r: self.hosts[r // k] if r // k < len(self.hosts) else f"node{r // k}" for r in range(world)}

    def node_of(self, rank: int) -> int:
        for i, ranks in enumerate(self.nodes):
            if rank in ranks:
                return i
        raise KeyError(f"rank {rank} is on no node of the placement")

    @property
    def world(self) -> int:
        return sum(len(n) for n in self.nodes)

    @property
    def ranks_per_node(self) -> int | None:
        """The ranks of every node, where all nodes have as many (None otherwise)."""
        sizes = {len(n) for n in self.nodes}
        return sizes.pop() if len(sizes) == 1 else None

    @property
    def contiguous(self) -> bool:
        """Whether each node holds consecutive ranks, as torchrun places them (node i has ranks
        i*k .. i*k+k-1): the layout a multi-dimensional network's addresses describe."""
        k = self.ranks_per_node
        return k is not None and all(n == tuple(range(i * k, i * k + k)) for i, n in enumerate(self.nodes))


def placement_of(rankset: "RankSet") -> Placement | None:
    """The placement the rank set's files record, None where a rank records no host."""
    return _placement({g.rank: g.metadata for g in rankset})


def placement_in_files(path) -> Placement | None:
    """`placement_of` a rank set on disk (folder, prefix or file), reading only each file's
    GlobalMetadata."""
    from .etio import TraceReader
    from .graph import find_rank_files

    metas = {}
    for rank, f in find_rank_files(path).items():
        reader = TraceReader(f)
        metas[rank] = reader.metadata
        reader.close()
    return _placement(metas)


def _placement(metas: Mapping[int, Metadata | None]) -> Placement | None:
    hosts = {}
    for rank, meta in metas.items():
        attr = ((meta.attrs if meta else None) or {}).get(HOST)
        if attr is None or not isinstance(attr.value, str):
            return None
        hosts[rank] = attr.value
    return Placement.from_hosts(hosts) if hosts else None


def backend_of(rankset: "RankSet") -> str | None:
    """The collective library the rank set's files record (gloo, nccl), None where none does."""
    for g in rankset:
        attr = (g.metadata.attrs or {}).get(BACKEND)
        if attr is not None and isinstance(attr.value, str):
            return attr.value
    return None
