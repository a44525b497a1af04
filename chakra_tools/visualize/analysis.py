"""The numbers the report draws: per-rank breakdown, top operators, communication volume,
critical path. Pure functions of an `EventSet`.

Breakdown (per rank, from its first piece of work to its last, as the replayer counts it):
compute = time some compute runs; overlap = time compute and communication run together;
exposed communication = communication time not hidden behind compute; idle = the rest. A rank
with no device compute (a CPU-only run) counts its host work as compute, except where its thread
was inside a communication call (waiting, not computing) and the profiler's step markers
(`ProfilerStep#N`, which span whole steps and are no work).

>>> from chakra_tools.visualize.events import Event, EventSet
>>> es = EventSet("inline", "measured", [Event(0, "gemm", "compute", "c", 100, 600, 1),
...                                      Event(0, "ar", "comm", "m", 400, 1000, 2)])
>>> breakdown(es)[0]
{'start_ns': 0, 'finish_ns': 900, 'compute_ns': 500, 'exposed_comm_ns': 400, 'overlap_ns': 200, 'idle_ns': 0}
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from chakra_tools.core.annotations import call_name

from .events import COMM, COMPUTE, HOST, Event, EventSet
from .select import STEP_NAME

Interval = tuple[int, int]
BREAKDOWN_KEYS = ("compute_ns", "exposed_comm_ns", "overlap_ns", "idle_ns")
def is_marker(e: Event) -> bool:
    """A profiler step range: it spans its step's work and is none itself."""
    return e.kind == HOST and STEP_NAME.fullmatch(e.name) is not None


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Merged, sorted, disjoint intervals.

    >>> union([(5, 8), (0, 2), (1, 3), (8, 9)])
    [(0, 3), (5, 9)]
    """
    out: list[Interval] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        elif e > s:
            out.append((s, e))
    return out


def length(intervals: Iterable[Interval]) -> int:
    return sum(e - s for s, e in intervals)


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The parts of merged intervals `a` outside merged intervals `b`.

    >>> subtract([(0, 10), (20, 30)], [(5, 8), (25, 40)])
    [(0, 5), (8, 10), (20, 25)]
    """
    out, j = [], 0
    for s, e in a:
        while j < len(b) and b[j][1] <= s:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > s:
                out.append((s, b[k][0]))
            s = max(s, b[k][1])
            k += 1
        if s < e:
            out.append((s, e))
    return out


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """Intersection of two merged interval lists (a linear merge walk)."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def breakdown(es: EventSet) -> dict[int, dict[str, int]]:
    """rank -> start_ns, finish_ns (from the run's origin), compute_ns, exposed_comm_ns,
    overlap_ns, idle_ns (the source's own breakdown when it has one, as the replayer's)."""
    if es.breakdown is not None:
        return es.breakdown
    origin = es.origin_ns
    per_rank: dict[int, list[Event]] = defaultdict(list)
    for e in es.events:
        per_rank[e.rank].append(e)
    return {r: _rank_breakdown(per_rank[r], origin) for r in sorted(per_rank)}


def _rank_breakdown(events: list[Event], origin: int) -> dict[str, int]:
    start = min((e.start_ns for e in events), default=origin)
    end = max((e.end_ns for e in events), default=start)
    comm = union((e.start_ns, e.end_ns) for e in events if e.kind == COMM)
    if any(e.kind == COMPUTE for e in events):
        comp = union((e.start_ns, e.end_ns) for e in events if e.kind == COMPUTE)
    else:  # a thread inside a communication call waits: per host thread, its calls taken out
        lanes: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
        for e in events:
            if e.kind in (HOST, COMM) and not is_marker(e):
                lanes[e.lane][e.kind == COMM].append((e.start_ns, e.end_ns))
        comp = union(iv for work, calls in lanes.values() for iv in subtract(union(work), union(calls)))
    overlap = length(intersect(comp, comm))
    busy = length(union(comp + comm))
    return {"start_ns": start - origin, "finish_ns": end - origin,
            "compute_ns": length(comp), "exposed_comm_ns": length(comm) - overlap,
            "overlap_ns": overlap, "idle_ns": (end - start) - busy}


def self_times(events: list[Event]) -> list[int]:
    """Each event's own time: its duration less that of the events nested in it on its lane
    (a host op's children), so a step marker does not count its whole step again.

    >>> from chakra_tools.visualize.events import Event
    >>> self_times([Event(0, "step", "host", "t", 0, 100), Event(0, "mm", "host", "t", 10, 40),
    ...             Event(0, "add", "host", "t", 15, 20), Event(0, "k", "compute", "s", 0, 50)])
    [70, 25, 5, 50]
    """
    own = [e.dur_ns for e in events]
    lanes: dict[tuple[int, str], list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        lanes[(e.rank, e.lane)].append(i)
    for idx in lanes.values():
        stack: list[int] = []
        for i in sorted(idx, key=lambda i: (events[i].start_ns, -events[i].end_ns, i)):
            while stack and events[stack[-1]].end_ns <= events[i].start_ns:
                stack.pop()
            if stack and events[i].end_ns <= events[stack[-1]].end_ns:
                own[stack[-1]] -= events[i].dur_ns
            stack.append(i)
    return own


def top_operators(es: EventSet, n: int = 15) -> list[dict]:
    """The `n` operator names with the most self time (device work and communication; host work
    in its place when a run has no device compute, as on CPU), with their count, kind and share.
    A trace-capture annotation is named by the call it stands for (`dist.all_to_all_single`,
    `Work.wait`); the profiler's step markers are no operators (their self time is the untraced
    time and, on CPU, the waits in other threads' calls)."""
    kinds = {COMPUTE, COMM} if any(e.kind == COMPUTE for e in es.events) else {HOST, COMM}
    total: dict[str, list] = {}
    for e, own in zip(es.events, self_times(es.events)):
        if e.kind in kinds and not is_marker(e):
            t = total.setdefault(call_name(e.name) or e.name, [0, 0, e.kind])
            t[0] += own
            t[1] += 1
    grand = sum(t[0] for t in total.values()) or 1
    rows = sorted(total.items(), key=lambda kv: (-kv[1][0], kv[0]))[:n]
    return [{"name": k, "total_ns": v[0], "count": v[1], "kind": v[2], "share": v[0] / grand} for k, v in rows]


P2P_KINDS = ("SEND", "RECV", "SEND_RECV")
POINT_TO_POINT = "point-to-point"  # a send's group says nothing: its peer is on the other side


def comm_volume(es: EventSet) -> list[dict]:
    """Communication by (kind, group): operations and bytes, summed over the ranks' records."""
    acc: dict[tuple[str, str], list[int]] = {}
    for c in es.comms:
        a = acc.setdefault((c.kind, POINT_TO_POINT if c.kind in P2P_KINDS else c.group), [0, 0])
        a[0] += 1
        a[1] += c.bytes
    return [{"kind": k, "group": g, "count": v[0], "bytes": v[1]}
            for (k, g), v in sorted(acc.items(), key=lambda kv: (-kv[1][1], kv[0]))]


def critical_path(es: EventSet) -> list[Event]:
    """The chain of events that decided the finish time.

    The source's own path when it has one (the replayer's); otherwise walk back from the event
    that ends last, each time to the dependency that finished last — on a measured or laid-out
    schedule that is the chain nothing could have shortened without moving the end.
    """
    nodes = es.by_node()
    if es.critical_path:
        return [nodes[k] for k in es.critical_path if k in nodes]
    preds: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for sr, sn, dr, dn in es.deps:
        preds[(dr, dn)].append((sr, sn))
    if not preds or not nodes:
        return []
    key = max(nodes, key=lambda k: (nodes[k].end_ns, k))
    path, seen = [], set()
    while key is not None and key not in seen:
        seen.add(key)
        path.append(nodes[key])
        cands = [p for p in preds.get(key, ()) if p in nodes and p not in seen]
        key = max(cands, key=lambda k: (nodes[k].end_ns, k)) if cands else None
    return path[::-1]
