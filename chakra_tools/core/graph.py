"""The graph model: one rank's trace (`Graph`) and a set of ranks (`RankSet`).

A `Graph` owns its nodes (in file order) and derives the edges from each node's data and control
dependencies; it hands out read-only tuples, never its internal lists. Loading records what the
reader had to assume (forward references, dependencies on absent nodes) as warnings in
`graph.diagnostics`; it never rewrites a node's recorded dependencies. networkx appears only at
the edge, in `to_networkx()`.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from .commit import committing, recover
from .cycles import find_cycle
from .errors import ChakraToolsError, Diagnostic, Diagnostics, InputError
from .etio import TraceReader
from .etwrite import TraceWriter
from .files import read_json
from .model import MAX_RANK, Metadata, Node, make_attr
from .rankfiles import RANK_FILE, write_ranks


class Graph:
    """One rank's execution trace.

    >>> from chakra_tools.core.model import NodeType as T
    >>> g = Graph([Node(1, "a", T.COMP_NODE), Node(2, "b", T.COMP_NODE, (1,)),
    ...            Node(3, "c", T.COMP_NODE, (1,), (2,))])
    >>> g.successors(1), g.predecessors(3), len(g)
    ((2, 3), (1, 2), 3)
    >>> [n.id for n in g.topological_order()]
    [1, 2, 3]
    """

    def __init__(self, nodes: Iterable[Node], *, rank: int | None = None,
                 metadata: Metadata | None = None, source: str | None = None,
                 diagnostics: Diagnostics | None = None):
        self.rank = rank
        self.metadata = metadata or Metadata()
        self.source = source
        self.diagnostics = diagnostics if diagnostics is not None else Diagnostics()
        self.nodes: dict[int, Node] = {}
        self.duplicates: list[Node] = []
        for n in nodes:
            if n.id in self.nodes:
                self.duplicates.append(n)
            else:
                self.nodes[n.id] = n
        self._succ: dict[int, tuple[int, ...]] | None = None

    # -- reading and writing ------------------------------------------------------------------
    @classmethod
    def read(cls, path: str | Path, *, rank: int | None = None) -> "Graph":
        """Read a whole `.et` file, noting forward references and absent dependencies."""
        if rank is None:
            m = RANK_FILE.match(Path(path).name)
            rank = int(m.group("rank")) if m else None
        diags = Diagnostics()
        reader = TraceReader(path, rank=rank, diagnostics=diags)
        g = cls(reader, rank=rank, metadata=reader.metadata, source=str(path), diagnostics=diags)
        g._note_dependency_quirks()
        return g

    def write(self, path: str | Path, *, compress: bool | None = None,
              world_size: int | None = None) -> int:
        """Write the rank's file; `world_size` (a rank set's count of ranks) goes into its
        GlobalMetadata, so that a reader can tell a rank that went missing from the set."""
        meta = self.metadata
        if world_size is not None:
            meta = Metadata(meta.version or "0.0.4", {**meta.attrs, "world_size": make_attr("world_size", world_size)})
        with TraceWriter(path, meta, compress=compress) as w:
            w.write_all(list(self.nodes.values()))
        return w.count

    def _note_dependency_quirks(self) -> None:
        seen: set[int] = set()
        forward = 0
        for n in self.nodes.values():
            for kind, deps in (("data", n.data_deps), ("ctrl", n.ctrl_deps)):
                for d in deps:
                    if d not in self.nodes:
                        self._warn(f"dangling-{kind}-dep", f"{kind} dependency on absent node {d}", n)
                    elif d not in seen and d != n.id:  # a self-dependency is a cycle, not a forward ref
                        forward += 1
                        if forward <= 1:
                            self._warn("forward-ref", f"{kind} dependency on node {d}, which comes later in the file", n)
            seen.add(n.id)
        if forward > 1:
            self.diagnostics.counts["forward-ref"] = forward

    def _warn(self, code: str, message: str, node: Node) -> None:
        self.diagnostics.add(Diagnostic("warning", code, message, file=self.source, rank=self.rank,
                                        node_id=node.id, node_name=node.name))

    # -- access ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def __getitem__(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def __contains__(self, node_id: int) -> bool:
        return node_id in self.nodes

    def predecessors(self, node_id: int) -> tuple[int, ...]:
        """Present dependencies (data, then control), each once."""
        return tuple(d for d in self.nodes[node_id].deps if d in self.nodes)

    def successors(self, node_id: int) -> tuple[int, ...]:
        if self._succ is None:
            succ: dict[int, list[int]] = defaultdict(list)
            for n in self.nodes.values():
                for d in n.deps:
                    if d in self.nodes:
                        succ[d].append(n.id)
            self._succ = {k: tuple(v) for k, v in succ.items()}
        return self._succ.get(node_id, ())

    def edges(self) -> Iterator[tuple[int, int, str]]:
        """(src, dst, "data"|"ctrl") for every dependency whose source is present."""
        for n in self.nodes.values():
            for d in n.data_deps:
                if d in self.nodes:
                    yield d, n.id, "data"
            for d in n.ctrl_deps:
                if d in self.nodes:
                    yield d, n.id, "ctrl"

    def find_cycle(self) -> list[int] | None:
        """One dependency cycle as a list of node ids (first == last), or None if acyclic."""
        ids = list(self.nodes)
        pos = {nid: k for k, nid in enumerate(ids)}
        cycle = find_cycle([[pos[d] for d in self.predecessors(nid)] for nid in ids])
        return None if cycle is None else [ids[k] for k in cycle]

    def topological_order(self) -> list[Node]:
        """Nodes with every present dependency before its dependents; ties in ascending id.

        Raises ChakraToolsError naming a cycle if there is one.
        """
        import heapq

        indeg = {nid: len(self.predecessors(nid)) for nid in self.nodes}
        ready = [nid for nid, k in indeg.items() if k == 0]
        heapq.heapify(ready)
        out: list[Node] = []
        while ready:
            nid = heapq.heappop(ready)
            out.append(self.nodes[nid])
            for s in self.successors(nid):
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, s)
        if len(out) != len(self.nodes):
            cyc = self.find_cycle() or []
            raise ChakraToolsError(f"{self.source or 'graph'}: dependency cycle: "
                                   + " -> ".join(f"%{c}" for c in cyc))
        return out

    def to_networkx(self):
        """A networkx.DiGraph: node attributes from the record, edge attribute `kind`."""
        import networkx as nx

        g = nx.DiGraph(rank=self.rank)
        for n in self.nodes.values():
            g.add_node(n.id, name=n.name, type=n.type.name, duration_micros=n.duration_micros,
                       start_time_micros=n.start_time_micros)
        for src, dst, kind in self.edges():
            if g.has_edge(src, dst):
                g.edges[src, dst]["kind"] = "data+ctrl"
            else:
                g.add_edge(src, dst, kind=kind)
        return g


def read_comm_groups(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Read an ASTRA-sim communicator-group file `{"<id>": [ranks...]}`."""
    data = read_json(path, what='an object {"<group id>": [ranks...]}')
    return {str(k): _group_ranks(v, path, k) for k, v in data.items()}


def _group_ranks(members, path, key) -> tuple[int, ...]:
    """A group's member list, checked: distinct ranks, each an integer in 0..MAX_RANK."""
    if not isinstance(members, list) or not members:
        what = "an empty list" if isinstance(members, list) else type(members).__name__
        raise InputError(f'{path}: group "{key}": expected a list of ranks, not {what}')
    for m in members:
        if type(m) is not int or not 0 <= m <= MAX_RANK:
            raise InputError(f'{path}: group "{key}": member {m!r} is not a rank (an integer 0..{MAX_RANK})')
    if len(set(members)) != len(members):
        seen = set()
        twice = next(m for m in members if m in seen or seen.add(m))
        raise InputError(f'{path}: group "{key}": rank {twice} listed twice')
    return tuple(members)


def find_rank_files(path: str | Path) -> dict[int, Path]:
    """The files of a rank set: `path` may be a folder, a prefix (`out/trace` for
    `out/trace.<r>.et`) or one file. Raises InputError if nothing matches or prefixes are mixed."""
    p = Path(path)
    folder = p.parent if p.is_file() or not p.is_dir() else p
    while True:  # a write committed while we listed is finished and listed again
        recover(folder)
        files = _rank_files(p)
        if not committing(folder):
            return files


def _rank_files(p: Path) -> dict[int, Path]:
    if p.is_file():
        if p.name.endswith((".json", ".json.gz")):
            raise InputError(f"{p}: not a Chakra rank file{_what_it_is(p)}")
        m = RANK_FILE.match(p.name)
        return {int(m.group("rank")) if m else 0: p}
    # names, not Path objects, until a file is known to be one (131,072 of them: seconds apart)
    folder = p if p.is_dir() else p.parent
    try:
        names = sorted(e.name for e in os.scandir(folder)) if folder.is_dir() else []
    except OSError:
        names = []
    found = [(m, name) for name in names if (m := RANK_FILE.match(name))]
    if p.is_dir():
        prefixes = {m.group("prefix") for m, _ in found}
        if len(prefixes) > 1:
            raise InputError(f"{p}: holds several rank sets ({', '.join(sorted(prefixes))}); "
                             "name one by its prefix, e.g. " + str(p / sorted(prefixes)[0]))
    else:
        found = [(m, name) for m, name in found if m.group("prefix") == p.name]
    files = {int(m.group("rank")): folder / name for m, name in found}
    if not files:
        raise InputError(f"{p}: no trace files (expected a .et file, a folder of <prefix>.<rank>.et "
                         f"files, or such a prefix){_what_it_is(p)}")
    return dict(sorted(files.items()))


def _what_it_is(p: Path) -> str:
    """What to do with a folder that holds no rank files but something the pipeline knows."""
    if p.is_dir() and ((p / "manifest.json").is_file() or any(p.glob("node-*/manifest.json"))):
        return f"; it is a trace-capture run folder: convert it first (trace-convert {p} -o OUT)"
    if p.is_file() and p.name.endswith((".json", ".json.gz")):
        return ("; a .json file is no rank file: a replay result opens in trace-visualize, a JSON dump "
                "loads with chakra-tools json load, PyTorch traces convert with trace-convert pytorch")
    return ""


@dataclass
class RankSet:
    """The traces of every rank of one run, plus its communicator groups (may be empty)."""

    graphs: dict[int, Graph]
    comm_groups: dict[str, tuple[int, ...]] = field(default_factory=dict)
    prefix: str = "trace"
    comm_group_file: str | None = None

    @classmethod
    def load(cls, path: str | Path, comm_group: str | Path | None = None) -> "RankSet":
        """Read every rank; a `comm_group.json` beside the files is used unless one is given."""
        files = find_rank_files(path)
        graphs = {}
        for r, f in files.items():
            try:
                graphs[r] = Graph.read(f, rank=r)
            except ChakraToolsError as e:
                raise e.add_context(f"rank {r}")
        first = next(iter(files.values()))
        m = RANK_FILE.match(first.name)
        if comm_group is None and (first.parent / "comm_group.json").exists():
            comm_group = first.parent / "comm_group.json"
        groups = read_comm_groups(comm_group) if comm_group else {}
        return cls(graphs, groups, m.group("prefix") if m else first.stem,
                   str(comm_group) if comm_group else None)

    @property
    def ranks(self) -> list[int]:
        return sorted(self.graphs)

    def __getitem__(self, rank: int) -> Graph:
        return self.graphs[rank]

    def __iter__(self) -> Iterator[Graph]:
        return (self.graphs[r] for r in self.ranks)

    def __len__(self) -> int:
        return len(self.graphs)

    def group_ranks(self, pg_name: str) -> tuple[int, ...]:
        """Global ranks of a process group; "" and "0" mean every rank (ASTRA-sim's convention)."""
        if pg_name in ("", "0") and pg_name not in self.comm_groups:
            return tuple(self.ranks)
        return self.comm_groups[pg_name]

    def write(self, out_dir: str | Path, prefix: str | None = None, *,
              compress: bool = False, record_world: bool = False) -> list[Path]:
        """Write `<out_dir>/<prefix>.<rank>.et` for each rank and `comm_group.json` if any groups.

        All or nothing: the files are written into a staging folder inside `out_dir` and moved into
        place only once every one is written, so a failure leaves what was there before untouched
        (and no folder this call created). Then what an earlier set of the same prefix left is
        removed: its other ranks, and a comm_group.json this set does not have when no other rank
        set shares the folder (a reader would take them as this set's).

        `record_world` (what converters and generators pass) keeps the number of ranks in every
        rank's GlobalMetadata (`world_size`, when the ranks are 0..n-1), so that validation can
        name a rank file that goes missing; off, the files are written exactly as the graphs say.
        """
        ranks = self.ranks  # sorted once: a job may have 100k ranks
        world = len(ranks) if record_world and ranks == list(range(len(ranks))) else None
        return write_ranks(out_dir, self.prefix if prefix is None else prefix, ((r, self.graphs[r]) for r in ranks),
                           self.comm_groups, compress=compress, world_size=world)
