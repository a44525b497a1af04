"""`trace-visualize timeline`: an `EventSet` drawn as Chrome / Perfetto trace JSON.

One process per rank; lanes for host threads, then compute, then communication (a lane whose
events overlap without nesting is split into "compute #2", ... so that nothing is hidden); one
complete event per piece of work at its exact time; one flow per dependency whose two ends are
drawn on different lanes or ranks (a dependency along one lane is already visible as order).

>>> from chakra_tools.visualize.events import Event, EventSet
>>> es = EventSet("inline", "simulated", [Event(0, "gemm", "compute", "compute", 0, 500, 1),
...                                       Event(0, "ar", "comm", "communication", 500, 900, 2)],
...               deps=[(0, 1, 0, 2)])
>>> tl = build_timeline(es)
>>> len(tl.trace.slices), len(tl.trace.flows), tl.lanes
(2, 1, 2)
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from chakra_tools.core.chrome_trace import ChromeTrace, Slice, write_parts

from .events import COMM, COMPUTE, HOST, Event, EventSet

_KIND_ORDER = {HOST: 0, COMPUTE: 1, COMM: 2}


@dataclass
class Timeline:
    """The trace plus what was drawn, for `--json` and for tests."""

    trace: ChromeTrace
    events: int
    flows: int
    lanes: int
    skipped_deps: int

    def to_dict(self) -> dict:
        return {"events": self.events, "flows": self.flows, "lanes": self.lanes,
                "ranks": len(self.trace.processes), "skipped_deps": self.skipped_deps}


def build_timeline(es: EventSet, *, progress: Callable[[Iterable], Iterable] = lambda x: x) -> Timeline:
    """Draw `es`; times are rebased to the earliest event (`origin_ns`), so the trace starts at 0."""
    trace = ChromeTrace(origin_ns=es.origin_ns, metadata={"source": es.source, "times": es.label,
                                                           "origin_ns": es.origin_ns, "source_shift_ns": es.shift_ns,
                                                           "notes": es.notes})
    for r in es.ranks:
        trace.process(r, f"rank {r}", sort_index=r)
    slot = _assign_lanes(trace, es.events)
    drawn: dict[int, Slice] = {}
    for i in progress(range(len(es.events))):
        e = es.events[i]
        drawn[id(e)] = trace.complete(e.rank, slot[i], e.name, start_ns=e.start_ns, dur_ns=max(0, e.dur_ns),
                                      cat=e.cat or e.kind, args=e.args)
    skipped = _draw_dep_flows(trace, es, drawn) + _draw_event_flows(trace, es, drawn)
    lanes = sum(len(p.lanes) for p in trace.processes.values())
    return Timeline(trace, len(trace.slices), len(trace.flows), lanes, skipped)


def write_timeline(es: EventSet, out: str | Path, *, window_ns: tuple[int, int] | None = None,
                   max_events: int = 500_000, compress: bool | None = None,
                   progress: Callable[[Iterable], Iterable] = lambda x: x) -> dict:
    """Draw `es` and write it to `out` (`trace-visualize timeline`): only the events inside
    `window_ns` (from the run's start) if given, in numbered parts of at most `max_events` so a
    browser can open them; gzip by the name or `compress`. Returns what was written."""
    tl = build_timeline(es, progress=progress)
    trace = tl.trace
    if window_ns is not None:
        trace = trace.window(trace.origin_ns + window_ns[0], trace.origin_ns + window_ns[1])
    files = write_parts(trace, out, max_events=max_events, compress=compress)
    return {**tl.to_dict(), "source": es.label, "events_written": len(trace.slices),
            "flows_written": len(trace.flows), "files": [str(f) for f in files], "notes": es.notes}


def _assign_lanes(trace: ChromeTrace, events: list[Event]) -> list[int]:
    """The tid of each event: lanes per rank in host, compute, comm order, split when needed."""
    groups: dict[tuple[int, str], list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        groups[(e.rank, e.lane)].append(i)
    kind_of = {key: events[idx[0]].kind for key, idx in groups.items()}
    slot = [0] * len(events)
    for key in sorted(groups, key=lambda k: (k[0], _KIND_ORDER.get(kind_of[k], 3), k[1])):
        rank, lane = key
        sub = _pack([events[i] for i in groups[key]])
        for i, k in zip(groups[key], sub):
            slot[i] = trace.lane(rank, lane if k == 0 else f"{lane} #{k + 1}")
    return slot


def _pack(events: list[Event]) -> list[int]:
    """Sub-lane of each event: events on one sub-lane are disjoint or properly nested, which is
    what a trace viewer can draw without overlapping boxes."""
    order = sorted(range(len(events)), key=lambda i: (events[i].start_ns, -events[i].end_ns, i))
    stacks: list[list[int]] = []
    out = [0] * len(events)
    for i in order:
        e = events[i]
        for k, stack in enumerate(stacks):
            while stack and stack[-1] <= e.start_ns and not (stack[-1] == e.start_ns == e.end_ns):
                stack.pop()
            if not stack or e.end_ns <= stack[-1]:
                stack.append(e.end_ns)
                out[i] = k
                break
        else:
            stacks.append([e.end_ns])
            out[i] = len(stacks) - 1
    return out


def drawable(a: Slice, b: Slice) -> bool:
    """A dependency gets an arrow when its ends are on different lanes or ranks."""
    return (a.pid, a.tid) != (b.pid, b.tid)


def _draw_dep_flows(trace: ChromeTrace, es: EventSet, drawn: dict[int, Slice]) -> int:
    nodes = es.by_node()
    skipped = 0
    for sr, sn, dr, dn in es.deps:
        a, b = nodes.get((sr, sn)), nodes.get((dr, dn))
        if a is None or b is None:
            skipped += 1
            continue
        sa, sb = drawn[id(a)], drawn[id(b)]
        if drawable(sa, sb):
            trace.flow((sa.pid, sa.tid, sa.start_ns), (sb.pid, sb.tid, sb.start_ns),
                       name="dep", cat="cross-rank" if sr != dr else "cross-lane")
    return skipped


def _draw_event_flows(trace: ChromeTrace, es: EventSet, drawn: dict[int, Slice]) -> int:
    for a, b, kind in es.flows:
        sa, sb = drawn.get(id(a)), drawn.get(id(b))
        if sa is not None and sb is not None and drawable(sa, sb):
            trace.flow((sa.pid, sa.tid, sa.start_ns), (sb.pid, sb.tid, sb.start_ns), name=kind, cat=kind)
    return 0
