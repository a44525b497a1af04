"""Process groups: which ranks talk to which, as `comm_group.json` ids.

Two layouts. ASTRA-sim 1.0 text workloads name *network dimensions* (innermost first) that a
collective spans; `DimGroups` turns "the ranks that differ only in dimensions S" into groups.
Training strategies name *parallel axes* (tensor, data, pipeline, expert); `ParallelLayout`
(core/layout.py, shared with `trace-convert scale`, which reads a captured job's layout) puts
tensor-parallel ranks innermost, then data, then pipeline stages (Megatron-LM's order), so that a
tensor-parallel group is a block of consecutive ranks, as on a real machine where it stays inside
one node.

Group ids are decimal strings, allocated in a fixed order, so the same inputs always write the
same `comm_group.json`. Id "0" is never used (ASTRA-sim reads it as "all NPUs").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod



@dataclass
class GroupTable:
    """Allocates an id per distinct tuple of ranks; the world group is written too."""

    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)
    _ids: dict[tuple[int, ...], str] = field(default_factory=dict)
    #: a caller's own key for a group (a layout's kind and first rank) -> (id, member count)
    by_key: dict[tuple, tuple[str, int]] = field(default_factory=dict)

    def id_of(self, ranks: tuple[int, ...]) -> str:
        ranks = tuple(sorted(ranks))
        if ranks not in self._ids:
            gid = str(len(self._ids) + 1)
            self._ids[ranks] = gid
            self.groups[gid] = ranks
        return self._ids[ranks]


def coords(rank: int, dims: tuple[int, ...]) -> tuple[int, ...]:
    """A rank's coordinate in each dimension, innermost first.

    >>> coords(5, (2, 4))
    (1, 2)
    """
    out = []
    for d in dims:
        out.append(rank % d)
        rank //= d
    return tuple(out)


def rank_of(c: tuple[int, ...], dims: tuple[int, ...]) -> int:
    r, stride = 0, 1
    for ci, d in zip(c, dims):
        r += ci * stride
        stride *= d
    return r


def group_over(rank: int, dims: tuple[int, ...], span: tuple[bool, ...]) -> tuple[int, ...]:
    """The ranks that share `rank`'s coordinates on every dimension not in `span`.

    >>> group_over(5, (2, 4), (True, False)), group_over(5, (2, 4), (False, True))
    ((4, 5), (1, 3, 5, 7))
    """
    c = coords(rank, dims)
    members = [c]
    for i, d in enumerate(dims):
        if i < len(span) and span[i]:
            members = [m[:i] + (v,) + m[i + 1:] for m in members for v in range(d)]
    return tuple(sorted(rank_of(m, dims) for m in members))


def split_dims(dims: tuple[int, ...], inner: int) -> tuple[tuple[int, ...], int]:
    """Split `dims` so that the innermost dimensions hold exactly `inner` ranks.

    Returns the new dims and the index of the last inner dimension (-1 if `inner` is 1). This is
    what ASTRA-sim 1.0's `break_dimension` does for `model_parallel_NPU_group`.

    >>> split_dims((8,), 4), split_dims((4, 4), 4), split_dims((2, 8), 4)
    (((4, 2), 0), ((4, 4), 0), ((2, 2, 4), 1))
    """
    if inner == 1:
        return dims, -1
    acc = 1
    for i, d in enumerate(dims):
        if acc * d == inner:
            return dims, i
        if acc * d > inner:
            part = inner // acc
            if inner % acc or d % part:
                break
            return dims[:i] + (part, d // part) + dims[i + 1:], i
        acc *= d
    raise ValueError(f"a group of {inner} ranks does not fit the dimensions {list(dims)} "
                     f"({prod(dims)} ranks)")
