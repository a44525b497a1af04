"""Where each rank sits in a tensor x data x pipeline parallel job.

The one rank order the toolchain assumes: tensor-parallel ranks innermost, then data, then
pipeline stages (Megatron-LM's order), so that a tensor-parallel group is a block of consecutive
ranks, as on a real machine where it stays inside one node. The generator lays out the jobs it
writes this way (frontends/training.py), and `trace-convert scale` reads a captured job's layout
off its groups and send/receive peers the same way (convert/scale.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParallelLayout:
    """Ranks of a tp x dp x pp job; experts are spread over `ep` consecutive data-parallel ranks.

    >>> lay = ParallelLayout(tp=2, dp=4, pp=2, ep=2)
    >>> lay.world, lay.rank(tp=1, dp=2, pp=1), lay.tp_group(13), lay.dp_group(13)
    (16, 13, (12, 13), (9, 11, 13, 15))
    >>> lay.ep_group(13), lay.edp_group(13)
    ((13, 15), (9, 13))
    """

    tp: int = 1
    dp: int = 1
    pp: int = 1
    ep: int = 1

    def __post_init__(self):
        for name in ("tp", "dp", "pp", "ep"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.dp % self.ep:
            raise ValueError(f"expert parallel degree {self.ep} must divide the data parallel "
                             f"degree {self.dp}")

    @property
    def world(self) -> int:
        return self.tp * self.dp * self.pp

    def rank(self, *, tp: int, dp: int, pp: int) -> int:
        return (pp * self.dp + dp) * self.tp + tp

    def coord(self, rank: int) -> tuple[int, int, int]:
        """(tp, dp, pp) index of a rank."""
        return rank % self.tp, (rank // self.tp) % self.dp, rank // (self.tp * self.dp)

    def first_of(self, group: str, rank: int) -> int:
        """The lowest rank of `rank`'s group of kind `group` ("tp", "dp", "ep", "edp", "world"):
        the group's key, found without listing its members (a data-parallel group of thousands).

        >>> ParallelLayout(tp=2, dp=4, pp=2, ep=2).first_of("edp", 13)
        9
        """
        t, d, p = self.coord(rank)
        first = {"tp": (0, d), "dp": (t, 0), "ep": (t, d - d % self.ep), "edp": (t, d % self.ep)}.get(group)
        return 0 if first is None else self.rank(tp=first[0], dp=first[1], pp=p)

    def tp_group(self, rank: int) -> tuple[int, ...]:
        _, d, p = self.coord(rank)
        return tuple(self.rank(tp=t, dp=d, pp=p) for t in range(self.tp))

    def dp_group(self, rank: int) -> tuple[int, ...]:
        t, _, p = self.coord(rank)
        return tuple(self.rank(tp=t, dp=d, pp=p) for d in range(self.dp))

    def ep_group(self, rank: int) -> tuple[int, ...]:
        """Ranks that exchange tokens in all-to-all: `ep` consecutive data-parallel ranks."""
        t, d, p = self.coord(rank)
        base = d - d % self.ep
        return tuple(self.rank(tp=t, dp=base + e, pp=p) for e in range(self.ep))

    def edp_group(self, rank: int) -> tuple[int, ...]:
        """Ranks that hold the same experts and so all-reduce their gradients."""
        t, d, p = self.coord(rank)
        return tuple(self.rank(tp=t, dp=e, pp=p) for e in range(d % self.ep, self.dp, self.ep))

    def stage_peer(self, rank: int, delta: int) -> int:
        t, d, p = self.coord(rank)
        return self.rank(tp=t, dp=d, pp=p + delta)
