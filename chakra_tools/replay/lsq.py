"""Non-negative least squares over a few unknowns, exact: the calibration's fit (netfit.py) has two
or three, so every subset of free unknowns is solved and the best feasible one kept, with the
Bayesian information criterion deciding which unknowns the data needs."""

from __future__ import annotations

from itertools import combinations
from math import log
from typing import Sequence


#: sums of squared residuals closer than this (relative) are a tie (rounding decides nothing):
#: one size of one kind fits latency alone and bandwidth alone exactly, and latency, first, wins
_TIE = 1e-9
#: a residual below this share of the data's own sum of squares is an exact fit
_EXACT = 1e-12


def nonnegative_least_squares(system: Sequence[tuple[Sequence[float], float]], *, spread: float = 0.0,
                              count: int | None = None, keep: tuple[int, ...] = ()) -> tuple[float, ...]:
    """The x >= 0 minimising sum((a . x - b)^2) over rows (a, b) of a few unknowns, by trying
    every set of free unknowns (the others at 0); ties go to fewer unknowns, then the earlier.

    With `count` (the observations the rows summarise) the sets are compared by the Bayesian
    information criterion, count * ln(rss / count) + free * ln(count), where rss is the rows'
    sum plus `spread` (what no parameter can explain: the observations about their rows' means).
    A bandwidth fitted to messages of 24 to 448 bytes whose times vary tenfold is noise, and a
    network that prices a megabyte at a second from it is worse than none: such an unknown stays
    at 0 (no cost) unless the observations need it. The unknowns in `keep` are free in every set
    tried (the others only where no such set has a non-negative solution).

    >>> nonnegative_least_squares([([1, 0], 2), ([0, 1], -1)])  # the second would be negative
    (2.0, 0.0)
    """
    k = len(system[0][0])
    floor = _EXACT * sum(b * b for _, b in system)  # an exact fit's rounding: all exact fits tie

    def score(x: tuple[float, ...], free: int) -> float:
        rss = _sse(system, x)
        if count is None:
            return rss
        return count * log((max(rss, floor) + spread) / count) + free * log(count)

    sets = [free for m in range(1, k + 1) for free in combinations(range(k), m)]
    for candidates in ([f for f in sets if set(keep) <= set(f)], sets):
        best, best_score = None, score((0.0,) * k, 0)
        for free in candidates:
            x = _solve_free(system, free, k)
            if x is None or min(x) < 0:
                continue
            s = score(x, len(free))
            if best is None or s < best_score - _TIE * max(1.0, abs(best_score)):
                best, best_score = x, s
        if best is not None:
            return best
    return (0.0,) * k


def _sse(system, x) -> float:
    return sum((sum(a * v for a, v in zip(row, x)) - b) ** 2 for row, b in system)


def _solve_free(system, free: tuple[int, ...], k: int) -> tuple[float, ...] | None:
    """Least squares over the `free` unknowns (normal equations); None when they are not
    determined by the rows (a singular or near-singular system). Each column is scaled to a
    largest entry of 1 first: a latency's coefficients are hops, a bandwidth's are bytes, and
    the normal equations would square the difference."""
    scale = {i: max(abs(row[i]) for row, _ in system) or 1.0 for i in free}
    m = [[sum(row[i] * row[j] for row, _ in system) / (scale[i] * scale[j]) for j in free] for i in free]
    v = [sum(row[i] * b for row, b in system) / scale[i] for i in free]
    sol = _gauss(m, v)
    if sol is None:
        return None
    x = [0.0] * k
    for i, s in zip(free, sol):
        x[i] = s / scale[i]
    return tuple(x)


def _gauss(m: list[list[float]], v: list[float]) -> list[float] | None:
    """Solve m x = v by Gaussian elimination with partial pivoting; None if singular."""
    n = len(v)
    a = [row[:] + [val] for row, val in zip(m, v)]
    scale = max((abs(x) for row in m for x in row), default=0.0) or 1.0
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(a[r][c]))
        if abs(a[p][c]) <= 1e-12 * scale:
            return None
        a[c], a[p] = a[p], a[c]
        for r in range(n):
            if r != c:
                f = a[r][c] / a[c][c]
                a[r] = [x - f * y for x, y in zip(a[r], a[c])]
    return [a[i][n] / a[i][i] for i in range(n)]
