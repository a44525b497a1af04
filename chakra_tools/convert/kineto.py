"""Reading Kineto device traces (`torch.profiler`, Chrome trace JSON).

Only complete events (`ph: "X"`) matter. They fall into three lanes:

* host events: `cpu_op` and `user_annotation` (older traces: `Operator`, `user_annotation`) on
  CPU threads; each knows its enclosing host event by time containment on its thread;
* runtime calls: `cuda_runtime`/`cuda_driver` (`Runtime` in old traces), tied to the kernel they
  launch by `correlation`;
* device work: `kernel`, `gpu_memcpy`, `gpu_memset` (old: `Kernel`, `Memcpy`, `Memset`) with a
  `stream`.

Timestamps are microseconds, integers in old traces and floats in new ones; both are read as
floats. Nesting is computed with a small tolerance (1 ns) because float timestamps of a child and
its parent can differ in the last digit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from chakra_tools.core.errors import InputError

HOST_CATS = frozenset({"cpu_op", "user_annotation", "Operator", "operator"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "hip_runtime", "hip_driver"})
GPU_CATS = frozenset({"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"})
EPS = 1e-3


class Event:
    """One complete Kineto event. `parent` is the index of the enclosing host event on the same
    thread (-1 for none); `child_us` the summed duration of its direct host children."""

    __slots__ = ("idx", "name", "cat", "tid", "ts", "dur", "args", "parent", "child_us")

    def __init__(self, idx: int, e: dict):
        self.idx = idx
        self.name = e.get("name", "")
        self.cat = e.get("cat", "")
        self.tid = e.get("tid", 0)
        self.ts = float(e.get("ts", 0.0))
        self.dur = float(e.get("dur", 0.0) or 0.0)
        self.args = e.get("args") or {}
        self.parent = -1
        self.child_us = 0.0

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def exclusive_us(self) -> float:
        return max(self.dur - self.child_us, 0.0)

    def __repr__(self) -> str:
        return f"Event({self.name!r}, {self.cat}, tid={self.tid}, ts={self.ts})"


@dataclass
class DeviceTrace:
    path: str
    host: list[Event] = field(default_factory=list)
    runtime: list[Event] = field(default_factory=list)
    gpu: list[Event] = field(default_factory=list)
    dist_info: dict = field(default_factory=dict)
    #: runtime event index (in `runtime`) -> index of the innermost enclosing host event
    runtime_parent: dict[int, int] = field(default_factory=dict)

    @property
    def has_rf_ids(self) -> bool:
        """True if host events carry a usable `Record function id` (some traces write 0s)."""
        return any(e.args.get("Record function id") for e in self.host[:2000])


def parse_device(doc: Any, path: str) -> DeviceTrace:
    """Normalise a loaded Kineto trace. Raises InputError if it is not one."""
    if isinstance(doc, list):
        events = doc
        doc = {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = doc["traceEvents"]
    else:
        raise InputError(f"{path}: not a Kineto device trace (no 'traceEvents' list)")
    dt = DeviceTrace(path, dist_info=doc.get("distributedInfo") or {})
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        if cat in HOST_CATS:
            dt.host.append(Event(len(dt.host), e))
        elif cat in RUNTIME_CATS:
            dt.runtime.append(Event(len(dt.runtime), e))
        elif cat in GPU_CATS:
            dt.gpu.append(Event(len(dt.gpu), e))
    _nest(dt)
    return dt


def _nest(dt: DeviceTrace) -> None:
    """Set each host event's parent and children time, and each runtime call's host event."""
    by_tid: dict[Any, list[tuple[float, float, int, int]]] = {}
    for e in dt.host:
        by_tid.setdefault(e.tid, []).append((e.ts, -e.dur, 0, e.idx))
    for e in dt.runtime:
        by_tid.setdefault(e.tid, []).append((e.ts, -e.dur, 1, e.idx))
    host = dt.host
    for items in by_tid.values():
        items.sort()
        stack: list[Event] = []
        ends: list[float] = []  # stack[i]'s end plus the tolerance
        for ts, neg_dur, kind, idx in items:
            end = ts - neg_dur
            while ends and end > ends[-1]:
                stack.pop()
                ends.pop()
            if kind == 1:
                if stack:
                    dt.runtime_parent[idx] = stack[-1].idx
                continue
            ev = host[idx]
            if stack:
                top = stack[-1]
                ev.parent = top.idx
                top.child_us += ev.dur
            stack.append(ev)
            ends.append(end + EPS)


# --------------------------------------------------------------------------------------------
# fast path: scan complete events without building the JSON document
# --------------------------------------------------------------------------------------------
#
# Kineto writes every event's `ph`, `cat`, `name`, `pid`, `tid`, `ts`, `dur` first, then an
# `args` object without nested objects. One regular expression finds those fields, and only the
# few `args` the converter reads are extracted (the whole `args` object is decoded only for host
# events of device-only conversions and for NCCL kernels). Every `"ph": "X"` must be accounted
# for, else the file is parsed as plain JSON.

_EVENT = re.compile(rb'"ph": "X",\s*"cat": "([^"\n]*)",\s*"name": "((?:[^"\\\n]|\\.)*)",\s*'
                    rb'"pid": ([^,\n]*),\s*"tid": ([^,\n]*),\s*"ts": ([^,\s]*),\s*"dur": ([^,\s]*)'
                    rb'(\s*,\s*"args": \{)?')
def _arg_rx(key: str) -> tuple[str, re.Pattern]:
    return key, re.compile(rb'"' + key.encode() + rb'": (-?\d+)')


_RF_ONLY = (_arg_rx("Record function id"),)
_CORR_ONLY = (_arg_rx("correlation"),)
_GPU_KEYS = (_arg_rx("correlation"), _arg_rx("stream"), _arg_rx("bytes"))
_DIST = re.compile(rb'"distributedInfo": (\{[^\n]*\}),?\n')


def parse_device_bytes(data: bytes, path: str, *, full_args: bool = False) -> DeviceTrace:
    """A device trace from the file's bytes: the fast scan when it applies, else JSON."""
    from .jsonio import parse_json_bytes, repair_names, unescaped_annotations

    if unescaped_annotations(data):
        data = repair_names(data)
    dt = _parse_fast(data, path, full_args)
    if dt is not None:
        _nest(dt)
        return dt
    return parse_device(parse_json_bytes(data, path), path)


def _parse_fast(data: bytes, path: str, full_args: bool) -> DeviceTrace | None:
    if data.find(b'"traceEvents"') < 0:
        return None
    expected = data.count(b'"ph": "X"')
    dt = DeviceTrace(path, dist_info=_dist_info(data))
    names: dict[bytes, str] = {}
    lanes = {}
    for cat in HOST_CATS:
        lanes[cat.encode()] = (dt.host, _RF_ONLY, full_args)
    for cat in RUNTIME_CATS:
        lanes[cat.encode()] = (dt.runtime, _CORR_ONLY, False)
    for cat in GPU_CATS:
        lanes[cat.encode()] = (dt.gpu, _GPU_KEYS, False)
    found, last = 0, 0
    new = Event.__new__
    for m in _EVENT.finditer(data):
        found += 1
        last = m.end()
        cat, raw, tid, ts, dur, has_args = m.group(1, 2, 4, 5, 6, 7)
        lane = lanes.get(cat)
        if lane is None:
            continue
        events, keys, want_all = lane
        name = names.get(raw)
        if name is None:
            name = names[raw] = json.loads(b'"' + raw + b'"') if b"\\" in raw else raw.decode()
        ev = new(Event)
        ev.idx, ev.name, ev.cat = len(events), name, cat.decode()
        ev.tid = int(tid) if tid.isdigit() else _id_value(tid)
        ev.ts, ev.dur = float(ts), float(dur or 0)
        ev.parent, ev.child_us = -1, 0.0
        ev.args = (_args(data, m.end(), keys, want_all or name.startswith("nccl"))
                   if has_args else {})
        events.append(ev)
    complete = data.find(b"]", last) >= 0 and data.rstrip().endswith(b"}")
    return dt if found == expected and found and complete else None


def _args(data: bytes, start: int, keys: tuple, want_all: bool) -> dict:
    end = data.find(b"}", start)
    if want_all:
        try:
            return json.loads(b"{" + data[start:end + 1])
        except ValueError:
            pass
    out = {}
    for key, rx in keys:
        m = rx.search(data, start, end)
        if m is not None:
            out[key] = int(m.group(1))
    return out


def _id_value(raw: bytes):
    s = raw.strip().strip(b'"')
    return int(s) if s.lstrip(b"-").isdigit() else s.decode()


def _dist_info(data: bytes) -> dict:
    m = _DIST.search(data, 0, 1 << 16)
    if m is None:
        return {}
    try:
        return json.loads(m.group(1))
    except ValueError:
        return {}
