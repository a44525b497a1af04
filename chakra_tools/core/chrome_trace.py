"""Build Chrome / Perfetto trace JSON (the "Trace Event Format"), dependency-free.

Every timeline this project draws (`trace-visualize timeline`, `trace-replay --timeline`) goes
through this module, so they all look alike in https://ui.perfetto.dev and chrome://tracing:
one *process* per rank, named *lanes* (threads) inside it, *complete events* (`ph: "X"`) for the
work and *flow events* (`ph: "s"` / `"f"`, bound to the enclosing slices) for dependencies.

Assumptions, stated once:

- Times come in as integer nanoseconds (`*_ns`, the replayer's unit) and are written as float
  microseconds (the format's unit), so `ts * 1000` rounds back to the exact nanosecond as long as
  times are below ~2**53 ns / 1000 (about 100 days). Epoch-based times must be rebased first
  (`origin_ns`), or nanoseconds are lost to the double's 53 bits.
- Output bytes depend only on the input: processes and lanes are written in sort order, events in
  (time, process, lane, insertion) order, keys in a fixed order, gzip without a name or time stamp.
- Flows follow Kineto's convention, which every viewer accepts: the start (`s`) sits at the start
  of the source slice, the end (`f`, `bp: "e"`) at the start of the destination slice, both with
  the same `id`, so each binds to the slice that encloses it.

Example (runs as a doctest):

>>> t = ChromeTrace()
>>> t.process(0, "rank 0")
>>> comp = t.lane(0, "compute")
>>> comm = t.lane(0, "communication")
>>> _ = t.complete(0, comp, "matmul", start_ns=0, dur_ns=1500, cat="COMP")
>>> _ = t.complete(0, comm, "all_reduce", start_ns=1500, dur_ns=2001, cat="COMM_COLL")
>>> _ = t.flow((0, comp, 0), (0, comm, 1500), name="data")
>>> doc = t.to_dict()
>>> [(e["name"], e["ts"], e["dur"]) for e in doc["traceEvents"] if e["ph"] == "X"]
[('matmul', 0.0, 1.5), ('all_reduce', 1.5, 2.001)]
>>> sorted(e["ph"] for e in doc["traceEvents"] if e["ph"] in "sf")
['f', 's']
>>> [len(p.slices) for p in t.split(max_events=1)]
[1, 1]
"""

from __future__ import annotations

import gzip
import json
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import InputError
from .commit import atomic_output

#: a point on a lane: (pid, tid, time in ns)
Point = tuple[int, int, int]

#: What a browser opens comfortably; beyond this, `split()` the trace (Perfetto's UI handles more,
#: chrome://tracing struggles past a few hundred thousand events).
BROWSER_EVENT_LIMIT = 500_000

#: one encoder for every event line: json.dumps with options builds a new one per call
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


@dataclass(frozen=True)
class Slice:
    """One complete event: `dur_ns` of work on lane `tid` of process `pid`."""

    pid: int
    tid: int
    name: str
    start_ns: int
    dur_ns: int
    cat: str = ""
    args: Mapping[str, Any] | None = None
    seq: int = 0

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass(frozen=True)
class Flow:
    """An arrow from a point on one lane to a point on another (both usually slice starts)."""

    id: int
    src: Point
    dst: Point
    name: str = "dep"
    cat: str = "dep"


@dataclass
class _Process:
    name: str
    sort_index: int
    lanes: dict[int, tuple[str, int]] = field(default_factory=dict)  # tid -> (name, sort index)


def us(ns: int | float) -> float:
    """Nanoseconds to the format's microseconds, as a float that keeps the nanoseconds.

    >>> us(1234567), us(0), us(1)
    (1234.567, 0.0, 0.001)
    """
    return ns / 1000.0


class ChromeTrace:
    """An in-memory trace: processes, lanes, slices and flows; `write()` emits the JSON.

    Lanes are identified by (pid, tid); `lane(pid, name)` hands out stable tids (the same name
    always gets the same tid within a process, in order of first use, starting at 1) unless the
    caller fixes one.
    """

    def __init__(self, *, origin_ns: int = 0, metadata: Mapping[str, Any] | None = None):
        self.origin_ns = origin_ns
        self.metadata = dict(metadata or {})
        self.processes: dict[int, _Process] = {}
        self.slices: list[Slice] = []
        self.flows: list[Flow] = []
        self._lane_ids: dict[tuple[int, str], int] = {}

    # -- structure ------------------------------------------------------------------------------
    def process(self, pid: int, name: str | None = None, sort_index: int | None = None) -> None:
        """Declare (or rename) a process; `sort_index` orders processes in the viewer."""
        p = self.processes.get(pid)
        if p is None:
            self.processes[pid] = _Process(name or f"process {pid}", pid if sort_index is None else sort_index)
        else:
            p.name = name or p.name
            p.sort_index = p.sort_index if sort_index is None else sort_index

    def lane(self, pid: int, name: str, *, tid: int | None = None, sort_index: int | None = None) -> int:
        """The tid of lane `name` in process `pid`, created on first use."""
        key = (pid, name)
        if key in self._lane_ids:
            return self._lane_ids[key]
        if pid not in self.processes:
            self.process(pid)
        lanes = self.processes[pid].lanes
        if tid is None:
            tid = max(lanes, default=0) + 1
        if tid in lanes:
            raise ValueError(f"process {pid}: tid {tid} already names lane {lanes[tid][0]!r}")
        lanes[tid] = (name, tid if sort_index is None else sort_index)
        self._lane_ids[key] = tid
        return tid

    # -- events ---------------------------------------------------------------------------------
    def complete(self, pid: int, tid: int, name: str, *, start_ns: int, dur_ns: int,
                 cat: str = "", args: Mapping[str, Any] | None = None) -> Slice:
        """Add one complete ("X") event; negative durations are an error in the caller."""
        if dur_ns < 0:
            raise ValueError(f"pid {pid} tid {tid}: slice {name!r} has negative duration {dur_ns} ns")
        s = Slice(pid, tid, name, start_ns, dur_ns, cat, args, len(self.slices))
        self.slices.append(s)
        return s

    def flow(self, src: Point, dst: Point, *, name: str = "dep", cat: str = "dep") -> Flow:
        """Add an arrow from `src` to `dst`, each (pid, tid, time_ns) inside a slice."""
        f = Flow(len(self.flows) + 1, src, dst, name, cat)
        self.flows.append(f)
        return f

    # -- output ---------------------------------------------------------------------------------
    def _metadata_events(self, pids: Iterable[int]) -> list[dict]:
        out: list[dict] = []
        for pid in sorted(pids):
            p = self.processes[pid]
            out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": p.name}})
            out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                        "args": {"sort_index": p.sort_index}})
            for tid in sorted(p.lanes):
                lname, sort = p.lanes[tid]
                out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": lname}})
                out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                            "args": {"sort_index": sort}})
        return out

    def _slice_event(self, s: Slice) -> dict:
        e = {"ph": "X", "name": s.name, "cat": s.cat, "pid": s.pid, "tid": s.tid,
             "ts": us(s.start_ns - self.origin_ns), "dur": us(s.dur_ns)}
        if s.args:
            e["args"] = dict(s.args)
        return e

    def _flow_events(self, f: Flow) -> list[dict]:
        (sp, st, sts), (dp, dt, dts) = f.src, f.dst
        return [{"ph": "s", "id": f.id, "name": f.name, "cat": f.cat, "pid": sp, "tid": st,
                 "ts": us(sts - self.origin_ns)},
                {"ph": "f", "bp": "e", "id": f.id, "name": f.name, "cat": f.cat, "pid": dp, "tid": dt,
                 "ts": us(dts - self.origin_ns)}]

    def events(self) -> list[dict]:
        """Every event in output order: metadata, then slices and flow ends by time."""
        pids = set(self.processes) | {s.pid for s in self.slices}
        for pid in pids - set(self.processes):
            self.process(pid)
        timed = [((s.start_ns, s.pid, s.tid, 0, s.seq), self._slice_event(s)) for s in self.slices]
        for f in self.flows:
            s_ev, f_ev = self._flow_events(f)
            timed.append(((f.src[2], f.src[0], f.src[1], 1, f.id), s_ev))
            timed.append(((f.dst[2], f.dst[0], f.dst[1], 2, f.id), f_ev))
        timed.sort(key=lambda t: t[0])
        return self._metadata_events(pids) + [e for _, e in timed]

    def to_dict(self) -> dict:
        doc: dict[str, Any] = {"traceEvents": self.events(), "displayTimeUnit": "ns"}
        if self.metadata:
            doc["otherData"] = self.metadata
        return doc

    def dumps(self) -> bytes:
        """The JSON, one event per line (diffable, streamable); same input, same bytes."""
        doc = self.to_dict()
        encode = _ENCODER.encode
        lines = [encode(e) for e in doc.pop("traceEvents")]
        head = '{"traceEvents":[\n' + ",\n".join(lines) + "\n]"
        tail = "".join(f",{json.dumps(k)}:{json.dumps(v, sort_keys=True, default=str)}" for k, v in doc.items())
        return (head + tail + "}\n").encode()

    def write(self, path: str | Path, *, compress: bool | None = None) -> Path:
        """Write atomically; gzip when `compress` or when the name ends in `.gz`."""
        path = Path(path)
        data = self.dumps()
        if compress if compress is not None else path.suffix == ".gz":
            data = gzip.compress(data, compresslevel=6, mtime=0)
        with atomic_output(path) as f:
            f.write(data)
        return path

    # -- huge traces ----------------------------------------------------------------------------
    def _subset(self, slices: list[Slice], keep_flow) -> "ChromeTrace":
        t = ChromeTrace(origin_ns=self.origin_ns, metadata=self.metadata)
        t.processes = {pid: _Process(p.name, p.sort_index, dict(p.lanes)) for pid, p in self.processes.items()}
        t._lane_ids = dict(self._lane_ids)
        t.slices = slices
        t.flows = [f for f in self.flows if keep_flow(f)]
        return t

    def window(self, start_ns: int, end_ns: int) -> "ChromeTrace":
        """The slices that overlap [start_ns, end_ns) and the flows with both ends inside it.

        Slices are kept whole (not clipped), so their times stay the true ones.
        """
        inside = [s for s in self.slices if s.start_ns < end_ns and s.end_ns > start_ns
                  or s.dur_ns == 0 and start_ns <= s.start_ns < end_ns]

        def keep(f: Flow) -> bool:
            return start_ns <= f.src[2] < end_ns and start_ns <= f.dst[2] < end_ns

        return self._subset(inside, keep)

    def split(self, max_events: int = BROWSER_EVENT_LIMIT) -> list["ChromeTrace"]:
        """Cut into consecutive time parts of at most `max_events` slices each.

        Each slice lands in exactly one part (the one holding its start), so the parts together
        hold every slice once; a flow is kept when both its ends fall in the same part. Slices
        that start at the same nanosecond stay in one part (which may then exceed the limit), so
        that parts are separated by time and no flow end falls on a boundary's wrong side.
        """
        if max_events < 1:
            raise ValueError("max_events must be at least 1")
        order = sorted(self.slices, key=lambda s: (s.start_ns, s.pid, s.tid, s.seq))
        parts, i = [], 0
        while i < len(order):
            j = _cut(order, i, max_events)
            hi = order[j].start_ns if j < len(order) else None
            parts.append(self._subset(order[i:j], _within(order[i].start_ns if parts else None, hi)))
            i = j
        return parts or [self._subset([], lambda f: True)]


def _cut(order: list[Slice], i: int, n: int) -> int:
    """End (exclusive) of the part starting at `i`: `i + n`, moved forward past equal starts."""
    j = min(i + n, len(order))
    while 0 < j < len(order) and order[j].start_ns == order[j - 1].start_ns:
        j += 1
    return j


def _within(lo: int | None, hi: int | None):
    """Flows whose two ends lie in [lo, hi); None leaves that side open (first and last part)."""
    def keep(f: Flow) -> bool:
        return all((lo is None or lo <= t) and (hi is None or t < hi) for t in (f.src[2], f.dst[2]))

    return keep


def write_parts(trace: ChromeTrace, path: str | Path, *, max_events: int = BROWSER_EVENT_LIMIT,
                compress: bool | None = None) -> list[Path]:
    """Write `trace` to `path`, or, when it exceeds `max_events`, to `<stem>.part-0001<suffix>`...

    Returns the files written, in time order.
    """
    path = Path(path)
    parts = trace.split(max_events)
    if len(parts) == 1:
        return [parts[0].write(path, compress=compress)]
    name, suffix = _split_name(path.name)
    return [p.write(path.with_name(f"{name}.part-{i:04d}{suffix}"), compress=compress)
            for i, p in enumerate(parts, 1)]


def _split_name(name: str) -> tuple[str, str]:
    """"run.json.gz" -> ("run", ".json.gz"); "run.json" -> ("run", ".json")."""
    for suffix in (".json.gz", ".json", ".gz"):
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def load(path: str | Path) -> dict:
    """Read a Chrome trace JSON file, gzipped or not (for tests and for re-emitting captures)."""
    try:
        raw = Path(path).read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = json.loads(raw)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e}") from None
    except (ValueError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: not a Chrome trace JSON file: {e}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to read (over {sys.getrecursionlimit()} levels)") from None
    return doc if isinstance(doc, dict) else {"traceEvents": doc}
