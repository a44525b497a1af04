"""Ranks whose captured windows cut a group's collective sequence at different points.

Each rank's capture window opens and closes at its own optimizer steps. A framework that issues
small collectives between steps (HuggingFace Trainer's loss and token counts for logging) can
leave one of them inside one rank's window and outside the other's: the sequences then differ by
a collective at an edge (`[collective-count]`, `[collective-mismatch]`), and a replay would pair
the wrong collectives. Where every rank's sequence is the shortest one's once at most `MAX_TRIM`
collectives are cut from either end, those are dropped from the rank sets (their dependents
inherit their dependencies) with a warning naming them; anything else (a sequence that differs
inside) is left for validation to refuse.
"""

from __future__ import annotations

from itertools import product

from chakra_tools.core.errors import Diagnostic, Diagnostics
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import NodeType
from chakra_tools.core.crosscheck import SIZE_INVARIANT

#: collectives cut from either end of a rank's sequence, at most
MAX_TRIM = 2


def align_windows(rankset: RankSet, diags: Diagnostics) -> None:
    """Drop the edge collectives that only some ranks' windows hold (module docstring)."""
    for pg, members in _groups(rankset).items():
        seqs = {r: [n for n in rankset[r] if n.type is NodeType.COMM_COLL_NODE and (n.pg_name or "") == pg]
                for r in members}
        keys = {r: [_key(n) for n in s] for r, s in seqs.items()}
        if len({tuple(k) for k in keys.values()}) <= 1:
            continue
        cut = _edge_cut(keys)
        if cut is None:
            continue
        for r, (head, tail) in cut.items():
            drop = seqs[r][:head] + (seqs[r][len(seqs[r]) - tail:] if tail else [])
            if drop:
                _drop(rankset[r], {n.id for n in drop})
                diags.add(Diagnostic("warning", "window-trimmed",
                                     f"group {pg}: {len(drop)} collective(s) at the edge of this rank's captured "
                                     f"window ({', '.join(f'%{n.id} {n.name}' for n in drop)}) are outside the other "
                                     "ranks' windows: dropped", rank=r))


def _groups(rankset: RankSet) -> dict[str, list[int]]:
    """pg_name -> the ranks of the set that issue collectives on it."""
    out: dict[str, list[int]] = {}
    for g in rankset:
        for pg in {(n.pg_name or "") for n in g if n.type is NodeType.COMM_COLL_NODE}:
            out.setdefault(pg, []).append(g.rank)
    return {pg: ranks for pg, ranks in out.items() if len(ranks) > 1}


def _key(node) -> tuple:
    """What validation compares (core.validate `_compare_sequence`): the kind, and the size
    where every member moves the same bytes."""
    kind = node.comm_type
    return (kind, node.comm_size if kind in SIZE_INVARIANT else None)


def _edge_cut(keys: dict[int, list[tuple]]) -> dict[int, tuple[int, int]] | None:
    """Per rank, (collectives cut at the start, at the end) so that every rank's sequence is the
    shortest one's, uncut; None when no cut of at most MAX_TRIM at each end does it (then the
    sequences differ inside, which is no matter of windows)."""
    ref = min(keys, key=lambda r: (len(keys[r]), r))
    common = keys[ref]
    if not common:
        return None
    cut = {}
    for r, seq in keys.items():
        found = next(((h, t) for h, t in product(range(MAX_TRIM + 1), repeat=2)
                      if len(seq) - h - t == len(common) and seq[h:len(seq) - t] == common), None)
        if found is None:
            return None
        cut[r] = found
    return cut


def _drop(graph: Graph, ids: set[int]) -> None:
    """Remove `ids` from `graph`; a node that depended on one depends on its dependencies."""
    inherited = {}
    for nid in sorted(ids):
        node = graph.nodes[nid]
        deps = []
        for d in node.deps:
            deps.extend(inherited.get(d, (d,)))
        inherited[nid] = tuple(dict.fromkeys(deps))
    for nid in ids:
        del graph.nodes[nid]
    for nid, node in list(graph.nodes.items()):
        if any(d in ids for d in node.deps):
            data = tuple(dict.fromkeys(x for d in node.data_deps for x in inherited.get(d, (d,))))
            ctrl = tuple(dict.fromkeys(x for d in node.ctrl_deps for x in inherited.get(d, (d,))))
            graph.nodes[nid] = node.replace(data_deps=data, ctrl_deps=ctrl)
    graph._succ = None  # the successor index, built on demand, is stale
