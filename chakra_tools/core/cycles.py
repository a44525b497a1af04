"""The one cycle finder: reading, validating and converting a graph all ask it.

Nodes are numbered `first`, `first + 1`, ... and `deps[k]` lists the numbers node `first + k`
depends on (the caller numbers its nodes and leaves out dependencies on absent ones), so it
serves a `Graph` in memory, a validator's flat arrays and a converter's records alike. Kahn's
algorithm first, so an acyclic graph costs one linear pass; the nodes it leaves all lie on or
behind a cycle, and walking their dependencies among themselves must repeat a node.

>>> find_cycle([[], [0, 3], [1], [2]])  # 1 -> 2 -> 3 -> 1, in dependency order
[1, 2, 3, 1]
>>> print(find_cycle([[], [1]], first=1))
None
"""

from __future__ import annotations

from typing import Sequence


def find_cycle(deps: Sequence[Sequence[int]], *, first: int = 0,
               self_loops: bool = True) -> list[int] | None:
    """One cycle as node numbers in dependency order (first == last: `a, b` means b depends on
    a), or None. `self_loops=False` ignores a node depending on itself (reported apart)."""
    n = len(deps)
    indeg = [0] * n
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, ds in enumerate(deps):  # a dependency named twice counts twice, and is freed twice
        for d in ds:
            j = d - first
            if j != i or self_loops:
                indeg[i] += 1
                succ[j].append(i)
    ready = [i for i in range(n) if indeg[i] == 0]
    done = 0
    while ready:
        j = ready.pop()
        done += 1
        for i in succ[j]:
            indeg[i] -= 1
            if indeg[i] == 0:
                ready.append(i)
    if done == n:
        return None
    i = next(k for k in range(n) if indeg[k] > 0)
    seen: dict[int, int] = {}
    path: list[int] = []
    while i not in seen:
        seen[i] = len(path)
        path.append(i)
        i = next(j for j in (d - first for d in deps[i]) if indeg[j] > 0 and (j != i or self_loops))
    return [k + first for k in path[seen[i]:] + [i]][::-1]
