"""The old degree's waiting in a converted capture's step nodes: where the host thread ran no op
while one of its rank's collectives was in flight (DDP's backward waits for the gradient
all-reduce in no op the profiler records), that time sits in the step node's exclusive time
(`ProfilerStep#N`); it is communication at the captured degree, which a replay at another charges
again, so `trace-convert scale` takes it out (scale.py; the converter now does so itself, and
says `collective_waits_out`).
"""

from __future__ import annotations

import re

from chakra_tools.core.graph import Graph
from chakra_tools.core.measured import step_windows, waits_taken_out
from chakra_tools.core.model import Node, NodeType, make_attr


STEP_NODE = re.compile(r"^ProfilerStep#\d+$")


def step_waits(g: Graph) -> dict[int, int]:
    """{step node id: ns of its exclusive time that was waiting for a collective}. The step
    node's exclusive time is the step's time in no op of its thread: Python between ops, and the
    waits no op records. Within each captured step (`profiler_steps_ns`) the thread's idle
    stretches are estimated (its ops each at its start for its `duration_ns`: a parent's span is
    not recorded, so they cover too little), and the step node's time is split in proportion to
    how much of that idle time a collective of the rank was in flight through (from its start to
    its end; a `launch_only` one, whose end the capture cut off, to the step's end). Nothing
    without the step windows, nor where the converter already took the waits out, each where it
    lay (`core.measured.WAITS_OUT`: an estimate on top would take them out twice)."""
    windows = step_windows(g.metadata)
    if not windows or waits_taken_out(g.metadata):
        return {}
    steps = [n for n in g.nodes.values() if n.type is NodeType.COMP_NODE and STEP_NODE.match(n.name)]
    colls = [(*_span(n), bool(n.attr("launch_only"))) for n in g.nodes.values()
             if n.type is NodeType.COMM_COLL_NODE and n.start_time_micros]
    out = {}
    for step in steps:
        start = step.start_time_micros * 1000
        window = next(((s, e) for s, e in windows if s - 1000 < start < e), None)
        if window is None or not colls:
            continue
        host = [_span(n) for n in g.nodes.values() if n is not step and n.type is NodeType.COMP_NODE
                and n.is_cpu_op and n.attr("tid") == step.attr("tid") and n.start_time_micros]
        idle = _minus([window], _union(host))
        total = sum(e - s for s, e in idle)
        flight = _union([(cs, window[1] if launch_only else ce) for cs, ce, launch_only in colls])
        busy = sum(min(e, ce) - max(s, cs) for s, e in idle for cs, ce in flight if min(e, ce) > max(s, cs))
        if busy > 0:
            out[step.id] = round(_ns(step) * busy / total)
    return out


def waits_out(g: Graph) -> int:
    """The collective waiting the converter took out of the rank's host ops (`collective_wait_ns`)."""
    if not waits_taken_out(g.metadata):
        return 0
    return sum(n.attr("collective_wait_ns") or 0 for n in g.nodes.values())


def _ns(n: Node) -> int:
    a = n.attrs.get("duration_ns")
    return int(a.value) if a is not None else n.duration_micros * 1000


def _span(n: Node) -> tuple[int, int]:
    return n.start_time_micros * 1000, n.start_time_micros * 1000 + _ns(n)


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        elif e > s:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _minus(spans: list[tuple[int, int]], cut: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` less the sorted, disjoint `cut`."""
    out = []
    for s, e in spans:
        for cs, ce in cut:
            if ce <= s or cs >= e:
                continue
            if cs > s:
                out.append((s, cs))
            s = max(s, ce)
        if e > s:
            out.append((s, e))
    return out


def without_wait(n: Node, wait_ns: int) -> Node:
    """A step node less `wait_ns` of its exclusive time (kept as `collective_wait_ns`)."""
    if wait_ns <= 0:
        return n
    ns = _ns(n) - wait_ns
    return n.replace(duration_micros=max(1, round(ns / 1000)) if ns > 0 else 0,
                     attrs={**n.attrs, "duration_ns": make_attr("duration_ns", ns),
                            "collective_wait_ns": make_attr("collective_wait_ns", wait_ns)})
