"""Small helpers over a rank's timeline as the converter reads it: lists of (time µs, node) sorted
by time, and spans of (start, end)."""

from __future__ import annotations

import bisect

EPS_US = 1.0  # clock slack between a call's return and the device work it waited for


def first_from(items, t: float) -> int | None:
    """The id of the first (start, id) in `items` (sorted) starting at or after `t`."""
    i = bisect.bisect_left(items, (t, -1))
    return items[i][1] if i < len(items) else None


def last_before(items: list[tuple[float, int]], t: float) -> int | None:
    i = bisect.bisect_left(items, (t, -1))
    return items[i - 1][1] if i else None


def covered(spans, start: float) -> float:
    """The time the (start, end) spans cover from `start` on, overlaps counted once."""
    total, reach = 0.0, start
    for a, b in sorted(spans):
        a = max(a, reach)
        if b > a:
            total += b - a
            reach = b
    return total
