"""How long each host op of a rank runs in a replay of its recorded timeline (`--host-time
timeline`): the pure part of recorded.py, given the rank's host ops as (start ns, id, own ns,
deps) in start order, the spans the replay re-creates (`blocked`) and where untraced time turns
into the next op's (`split_at`); recorded.py's docstring says how those are read off a capture.
"""

from __future__ import annotations

import bisect
from itertools import accumulate
from typing import Sequence


def _merged(host: list, blocked: list[tuple[int, int]], split_at: Sequence[int] = ()) -> dict[int, int]:
    """Each host op: the time to the next host op's start, less the blocked time in between.
    Where a call was issued or a wait began after the op's own time (`split_at`, sorted), the
    time from the first of them on is the next op's: it came after the call or the wait. Given to
    the op before, it would hold the call back in the replay (an asynchronous gloo call whose
    caller then stalled 5 ms) or vanish under the wait (Python after `work.wait()` returned)."""
    covered = coverage(blocked)
    out = dict.fromkeys((h[1] for h in host), 0)
    for h, nxt in zip(host, host[1:]):
        split = _split(split_at, h[0] + h[2], nxt[0])
        out[h[1]] += (split - h[0]) - (covered(split) - covered(h[0]))
        out[nxt[1]] += (nxt[0] - split) - (covered(nxt[0]) - covered(split))
    if host:
        out[host[-1][1]] += host[-1][2]
    return out


def retimed(host: list, blocked: list[tuple[int, int]], split_at: Sequence[int],
            threads: dict[int, int], others_end: dict[int, int]) -> dict[int, int]:
    """Each host op's time in the replay: `_merged` where the rank's host ops record one thread or
    none. Where they record several, each thread's timeline is its own (40 threads of an inference
    server, handing work to each other through queues the trace does not show, took 43% of their
    window replayed beside each other with the time up to the next op of *any* thread given to
    each op).

    Each op is *released* (its dependents may start) where `_merged` would end its time on its
    own thread (its thread's next op, or the first call issued or wait begun after its own
    time), or earlier where another thread's op that depends on it started (a fork: the autograd
    engine's thread starting while the main thread is inside `loss.backward()`). An op takes the
    time from its thread's op before's release, or the latest of what it waits for on other lanes
    (another thread's op's release, through the edges `convert/threads.py` draws where the
    timeline switches thread; a kernel's or a call's recorded end, `others_end`), to its own
    release, less the time its rank was blocked. Replayed as recorded, every op then ends at its
    release: a thread's idle time lies before the op that ended it, and a wait on another lane is
    re-created from the edge. A thread's first op that waits for nothing takes the time from the
    rank's first host op on (it starts at 0 in the replay)."""
    by_thread: dict = {}
    for h in host:
        by_thread.setdefault(threads.get(h[1]), []).append(h)
    if len(by_thread) <= 1:
        return _merged(host, blocked, split_at)
    known = {h[1] for h in host}
    crossing = {nid: [d for d in deps if d in known and threads.get(d) != threads.get(nid)]
                for _, nid, _, deps in host}
    forked: dict[int, int] = {}  # op -> earliest start of another thread's op that depends on it
    for start, nid, _, _ in host:
        for d in crossing[nid]:
            forked[d] = min(start, forked.get(d, start))
    released: dict[int, int] = {}
    for ops in by_thread.values():
        for (start, nid, own, _), nxt in zip(ops, [*ops[1:], None]):
            end = start + own if nxt is None else _split(split_at, start + own, nxt[0])
            released[nid] = max(start, min(end, forked.get(nid, end)))
    covered = coverage(blocked)
    out: dict[int, int] = {}
    for ops in by_thread.values():
        before = None
        for start, nid, _, deps in ops:
            base = released[before] if before is not None else (host[0][0] if not deps else start)
            waits = [released[d] for d in crossing[nid]] + [others_end[d] for d in deps if d in others_end]
            if waits:
                base = max(base, min(start, max(waits)))
            end = released[nid]
            out[nid] = max(0, (end - base) - (covered(end) - covered(base)))
            before = nid
    return out


def _split(split_at: Sequence[int], own_end: int, next_start: int) -> int:
    """Where an op's time on its thread ends: at the first call issued or wait begun after its
    own time (`split_at`, sorted), if one comes before the next op's start, else that start."""
    i = bisect.bisect_left(split_at, own_end)
    return split_at[i] if i < len(split_at) and split_at[i] < next_start else next_start


def coverage(intervals: list[tuple[int, int]]):
    """t -> total length of `intervals` (sorted, disjoint) before t."""
    ends = [e for _, e in intervals]
    before = [0, *accumulate(e - s for s, e in intervals)]

    def covered(t: int) -> int:
        i = bisect.bisect_right(ends, t)  # intervals wholly before t
        inside = max(0, t - intervals[i][0]) if i < len(intervals) else 0
        return before[i] + inside

    return covered
