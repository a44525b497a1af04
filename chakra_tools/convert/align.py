"""Ranks whose traces hold different sequences of a group's collectives, reconciled where the
cause is known; anything else is left for validation to refuse.

- **Windows** (any rank set): each rank's capture window opens and closes at its own optimizer
  steps. A framework that issues small collectives between steps (HuggingFace Trainer's loss and
  token counts for logging) can leave one of them inside one rank's window and outside the
  other's: the sequences then differ by a collective at an edge. Where every rank's sequence is
  the shortest one's once at most `MAX_TRIM` collectives are cut from either end, those are
  dropped (their dependents inherit their dependencies), `window-trimmed`.
- **Sequence numbers**: where every collective of the group carries the number torch gives it in
  its process group (`seq`, from the trace's `Seq`), a collective is the one of that number on
  every rank, whatever its place: one that some member's trace lacks is matched by nothing.
- **Sampled traces** (a rank set that is part of a larger job, as tools such as HTA's trace
  filter keep some ranks of a run and some of their events): without sequence numbers, the
  longest common subsequence of kinds and sizes (sizes where every member moves the same bytes),
  where it keeps at least `MIN_MATCHED` of every member's collectives.

A collective matched by nothing stays on its rank as device work of its recorded time, no longer
communication (`collective-unmatched`, naming each): the time the rank spent in it is kept, and
no replay pairs it with another rank's. A whole rank set that differs otherwise (a rank that
issues another size in the middle of its sequence) is a different job or a bug, and validation
refuses it, as before.
"""

from __future__ import annotations

from itertools import product

from chakra_tools.core.errors import Diagnostic, Diagnostics
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import NodeType
from chakra_tools.core.crosscheck import SIZE_INVARIANT

#: collectives cut from either end of a rank's sequence, at most
MAX_TRIM = 2
#: the share of every member's collectives a sampled set's alignment must match
MIN_MATCHED = 0.5
#: the largest alignment tried (collectives of one rank times another's): beyond, refused as before
MAX_CELLS = 4_000_000
#: what a collective that becomes device work no longer carries
_COMM_ATTRS = ("comm_type", "comm_size", "pg_name", "comm_priority", "involved_dim")


def align_collectives(rankset: RankSet, diags: Diagnostics, *, sampled: bool = False) -> None:
    """Reconcile each group's sequences (module docstring); `sampled`: the set is part of a larger
    job, whose traces may each hold a different subset of the collectives."""
    for pg, members in _groups(rankset).items():
        seqs = {r: [n for n in rankset[r] if n.type is NodeType.COMM_COLL_NODE and (n.pg_name or "") == pg]
                for r in members}
        keys = {r: [_key(n) for n in s] for r, s in seqs.items()}
        if len({tuple(k) for k in keys.values()}) <= 1:
            continue
        numbers = {r: [n.attr("seq") for n in s] for r, s in seqs.items()}
        if all(type(x) is int for xs in numbers.values() for x in xs):
            _unmatched(rankset, pg, seqs, _by_number(numbers), "matched by the sequence numbers the traces carry",
                       diags)
            continue
        cut = _edge_cut(keys)
        if cut is not None:
            _trim(rankset, pg, seqs, cut, diags)
        elif sampled:
            kept = _by_content(keys)
            if kept is not None:
                _unmatched(rankset, pg, seqs, kept, "matched by kind and size, in order, as the traces carry no "
                           "sequence numbers and the set is part of a larger job", diags)


def _trim(rankset: RankSet, pg: str, seqs: dict, cut: dict, diags: Diagnostics) -> None:
    for r, (head, tail) in cut.items():
        drop = seqs[r][:head] + (seqs[r][len(seqs[r]) - tail:] if tail else [])
        if drop:
            _drop(rankset[r], {n.id for n in drop})
            diags.add(Diagnostic("warning", "window-trimmed",
                                 f"group {pg}: {len(drop)} collective(s) at the edge of this rank's captured "
                                 f"window ({_named(drop)}) are outside the other ranks' windows: dropped", rank=r))


def _unmatched(rankset: RankSet, pg: str, seqs: dict, kept: dict[int, set[int]], how: str,
               diags: Diagnostics) -> None:
    """Every collective of `seqs` whose place is not in `kept` becomes device work, with a warning."""
    for r, nodes in seqs.items():
        lone = [n for i, n in enumerate(nodes) if i not in kept[r]]
        if not lone:
            continue
        g = rankset[r]
        for n in lone:
            g.nodes[n.id] = n.replace(type=NodeType.COMP_NODE,
                                      attrs={k: a for k, a in n.attrs.items() if k not in _COMM_ATTRS})
        diags.add(Diagnostic("warning", "collective-unmatched",
                             f"group {pg}: {len(lone)} of this rank's {len(nodes)} collectives match none of the "
                             f"other ranks' ({how}): {_named(lone)}; kept as device work of their recorded time, "
                             "not communication", rank=r))


def _named(nodes, shown: int = 8) -> str:
    text = ", ".join(f"%{n.id} {n.name}" for n in nodes[:shown])
    return text + (f" and {len(nodes) - shown} more" if len(nodes) > shown else "")


def _by_number(numbers: dict[int, list[int]]) -> dict[int, set[int]]:
    """Per rank, the places of the collectives whose number every member's trace holds."""
    common = set.intersection(*(set(xs) for xs in numbers.values()))
    return {r: {i for i, x in enumerate(xs) if x in common} for r, xs in numbers.items()}


def _by_content(keys: dict[int, list[tuple]]) -> dict[int, set[int]] | None:
    """Per rank, the places of the collectives on every member's longest common subsequence of
    keys (each member aligned in turn against what the ones before share); None where that keeps
    less than MIN_MATCHED of some member's collectives, or the alignment would be too large."""
    ranks = sorted(keys, key=lambda r: (len(keys[r]), r))
    common = [(k, {ranks[0]: i}) for i, k in enumerate(keys[ranks[0]])]
    for r in ranks[1:]:
        if len(common) * len(keys[r]) > MAX_CELLS:
            return None
        common = [(k, {**places, r: j}) for (k, places), j in _lcs([k for k, _ in common], keys[r], common)]
    kept = {r: {places[r] for _, places in common} for r in ranks}
    if any(len(kept[r]) < MIN_MATCHED * len(keys[r]) for r in ranks):
        return None
    return kept


def _lcs(a: list, b: list, items: list) -> list[tuple]:
    """(items[i], j) for each pair of a longest common subsequence of `a` and `b` (a[i] == b[j]),
    in order; ties keep the earliest pairs."""
    n, m = len(a), len(b)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below = table[i], table[i + 1]
        for j in range(m - 1, -1, -1):
            row[j] = below[j + 1] + 1 if a[i] == b[j] else max(below[j], row[j + 1])
    out, i, j = [], 0, 0
    while i < n and j < m:
        if a[i] == b[j]:
            out.append((items[i], j))
            i += 1
            j += 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return out


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
