"""Edges between a rank's host threads, read off the timeline where it switches thread.

With a device trace every host op has its time, so a switch is seen at any depth: the autograd
engine's thread starts the backward pass while the main thread sits in `loss.backward()`, and the
main thread goes on when that thread is done. The op that started last on the thread left (if it
had ended) precedes the op that starts now, both ways (`order_switches`); the time the main thread
waited inside its op leaves that op (`take_out_thread_waits`), since the replay re-creates it from
those edges. Without times, host traces order their top-level ops by id, and a switch of thread
there orders the new op after the previous one (`order_untimed_switches`).

Each pass takes the rank's records (build.Rec, node `id` at index `id - 1`) and adds to their
`deps`; `timed` is every timed host op as (start, end, thread, node), sorted, in µs.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Sequence

from chakra_tools.core.model import NodeType

#: clock slack between one thread's op ending and the next thread's starting (µs)
SWITCH_SLACK_US = 1.0
_COMP = NodeType.COMP_NODE


def order_switches(recs: Sequence, timed: Sequence[tuple]) -> None:
    """Where the timeline switches thread, the new op waits for the one that started last on
    the thread left, if that one had ended."""
    last: dict = {}  # thread -> (end, node) of the op that started last on it
    prev_tid = None
    for ts, end, tid, nid in timed:
        if prev_tid is not None and prev_tid != tid:
            src_end, src = last[prev_tid]
            if src < nid and src_end <= ts + SWITCH_SLACK_US:
                recs[nid - 1].deps.append(src)
        last[tid] = (end, nid)
        prev_tid = tid


def take_out_thread_waits(recs: Sequence, timed: Sequence[tuple]) -> None:
    """Take out of a host op the time its thread waited, doing nothing traced, while another
    thread ran and until that thread was done (the main thread inside `loss.backward()`), and
    keep it as `thread_wait_ns`: the replay re-creates it from the edges `order_switches` adds.
    A thread that went on before the other was done ran beside it and keeps its time."""
    by_tid: dict = defaultdict(list)
    for item in timed:
        by_tid[item[2]].append(item)
    starts = {t: [it[0] for it in items] for t, items in by_tid.items()}
    stacks: dict = defaultdict(list)  # thread -> [(end, node)] of its ops running, innermost last
    i, n = 0, len(timed)
    while i < n:
        ts, end, tid, nid = timed[i]
        stack = stacks[tid]
        while stack and stack[-1][0] <= ts:
            stack.pop()
        stack.append((end, nid))
        j = i + 1
        if j < n and timed[j][2] != tid:
            _wait_through(recs, timed, j, stacks[tid], starts[tid])
        i = j


def _wait_through(recs: Sequence, timed: Sequence[tuple], j: int, stack: list, own_starts: list) -> None:
    """The thread of `stack` handed over at timed[j]: charge the wait to its innermost op still
    running, if the thread resumed only once the others' ops of that stretch had ended, and make
    the op that took over wait for that op."""
    t = timed[j][0]
    while stack and stack[-1][0] <= t:
        stack.pop()
    if not stack:
        return
    k = bisect.bisect_right(own_starts, t)
    resume = own_starts[k] if k < len(own_starts) else None
    others_end = t
    for m in range(j, len(timed)):
        ts, end = timed[m][0], timed[m][1]
        if resume is not None and ts >= resume:
            break
        others_end = max(others_end, end)
    if resume is not None and others_end > resume + SWITCH_SLACK_US:
        return  # the thread went on while the others still ran: it did not wait
    waiter = recs[stack[-1][1] - 1]
    if waiter.type != _COMP or not waiter.attrs.get("is_cpu_op"):
        return
    forked = timed[j][3]
    if waiter.id < forked and waiter.id not in recs[forked - 1].deps:
        recs[forked - 1].deps.append(waiter.id)  # the other thread began once it waited
    waited = max(0.0, min(others_end, stack[-1][0]) - t)
    waited = min(waited, waiter.dur_us)
    if waited > 0:
        waiter.dur_us -= waited
        waiter.attrs["thread_wait_ns"] = waiter.attrs.get("thread_wait_ns", 0) + int(round(waited * 1000))


def order_untimed_switches(recs: Sequence, tops: Sequence[tuple]) -> None:
    """`tops`: the top-level host ops as (thread, op id, node), in trace order; where the thread
    switches, the new op waits for the previous one if that one's id is lower."""
    prev = None
    for tid, op_id, nid in tops:
        if prev is not None and prev[0] != tid and prev[1] < op_id:
            recs[nid - 1].deps.append(prev[2])
        prev = (tid, op_id, nid)
