"""Captured runs: the Kineto device traces of a `trace-capture` folder, as measured events.

A captured run is a folder with `manifest.json` (written by `trace-capture`: per rank a
`device_trace`, e.g. `rank-0.device.json.gz`), or simply a folder or file of Kineto traces
(`*trace*.json[.gz]`; the rank comes from `distributedInfo`, else a `rank-N` / `workerN` name).

Every complete event is re-emitted as measured: host events on a lane per thread, kernels on a
lane per CUDA stream, split into compute and communication (NCCL) streams; Kineto's launch ->
kernel flows (`ac2g`) are kept. Times are rebased so the run starts at 0, because epoch
microseconds in a double lose the nanoseconds. Communication volume comes from the host-side
collective calls (`nccl:all_reduce` with `Input Dims` / `Input type`, or `In msg nelems` /
`dtype`), falling back to the kernels (size unknown) when the host side was not recorded.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from chakra_tools.core.chrome_trace import load as load_chrome
from chakra_tools.core.errors import InputError
from chakra_tools.core.manifest import MANIFEST, read_manifest

from chakra_tools.core.annotations import PREFIX as ANNOTATION_PREFIX, parse_annotation

from .events import COMM, COMPUTE, HOST, CommRecord, Event, EventSet, group_label

NS_PER_US = 1000

KINETO_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.I)
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
SKIP_CATS = ("ac2g", "Trace", "python_function")


def kineto_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir()
                  if p.name.endswith((".json", ".json.gz")) and p.name != "manifest.json"
                  and ("trace" in p.name or "device" in p.name or "kineto" in p.name))


def capture_files(path: str | Path) -> dict[int, Path]:
    """rank -> Kineto device trace of a captured run (manifest), a folder of traces or one file."""
    p = Path(path)
    if p.is_file():
        return {_rank_of(p, 0): p}
    if (p / MANIFEST).exists():
        man = read_manifest(p)
        return {r.rank: man.trace_path(r.device_trace) for r in man.ranks if r.device_trace}
    files = kineto_files(p)
    if not files:
        raise InputError(f"{p}: no manifest.json and no Kineto trace files (*.json, *.json.gz)")
    return {_rank_of(f, i): f for i, f in enumerate(files)}


def _rank_of(path: Path, default: int) -> int:
    m = KINETO_NAME.search(path.name)
    return int(m.group(1)) if m else default


def from_capture(path: str | Path) -> EventSet:
    """Measured events of every rank; times rebased so the earliest event of the run is 0."""
    es = EventSet(str(path), "measured")
    files = capture_files(path)
    if not files:
        raise InputError(f"{path}: the manifest lists no device traces (ranks[].device_trace)")
    for rank, f in sorted(files.items()):
        doc = load_chrome(f)
        if "traceEvents" not in doc:
            raise InputError(f"{f}: rank {rank}: not a Kineto device trace (no traceEvents); "
                             "host execution traces go through trace-convert first")
        rank = _dist_rank(doc, rank)
        events, flows = kineto_events(doc.get("traceEvents", []), rank)
        es.comms.extend(_capture_comms(events, rank))
        events = _calls_as_comm(events)
        es.events.extend(events)
        es.flows.extend(flows)
    return _rebase(es)


def _calls_as_comm(events: list[Event]) -> list[Event]:
    """On a rank without device work, its communication calls (`gloo:all_reduce` on gloo's
    worker, the c10d wrappers, trace-capture's annotations) are its communication, as the
    converter makes them communication nodes; on a GPU rank they only launch kernels."""
    if any(e.kind == COMPUTE for e in events):
        return events
    return [replace(e, kind=COMM) if e.kind == HOST and (COMM_CALL.match(e.name) or e.name.startswith(ANNOTATION_PREFIX))
            else e for e in events]


def _capture_comms(events: list[Event], rank: int) -> list[CommRecord]:
    """One record per host-side collective call (`nccl:all_reduce`, with its size; the outermost
    wrappers `c10d::allreduce_` / `record_param_comms` only when the backend level is missing), or
    per communication kernel when the host side was not recorded (sizes then unknown: 0)."""
    calls: list[Event] = []
    host = [e for e in events if e.kind == HOST and (e.args or {}).get("bytes") is not None]
    for level in (ANNOTATION_PREFIX, "nccl:", "gloo:", "c10d::", "record_param_comms"):  # one level of the stack
        calls = [e for e in host if e.name.startswith(level)]
        if calls:
            break
    chosen = calls or [e for e in events if e.kind == COMM]
    return [CommRecord(rank, e.name, (e.args or {}).get("comm_kind") or _nccl_kind(e.name),
                       int((e.args or {}).get("bytes") or 0),
                       group_label(str((e.args or {}).get("pg", "0")), _members((e.args or {}).get("pg_ranks"))))
            for e in chosen]


def _members(value) -> list[int]:
    """A group's ranks as an annotation (a list) or Kineto (`Process Group Ranks`, a list or
    its text "[0, 1]") records them; [] where unknown or unreadable.

    >>> _members("[0, 2]"), _members([1, 3]), _members(None), _members("[0, x]")
    ([0, 2], [1, 3], [], [])
    """
    if isinstance(value, str):
        value = value.strip().strip("[]").split(",") if value.strip().strip("[]") else []
    try:
        return [int(v) for v in value or ()]
    except (TypeError, ValueError):
        return []


#: bytes per element of the dtype names Kineto and record_param_comms write
DTYPE_BYTES = {"float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
               "c10::half": 2, "c10::bfloat16": 2, "int": 4, "int32": 4, "long": 8, "int64": 8, "long int": 8,
               "short": 2, "int16": 2, "signed char": 1, "unsigned char": 1, "char": 1, "int8": 1,
               "uint8": 1, "byte": 1, "bool": 1}
COMM_CALL = re.compile(r"^(nccl|gloo|c10d|record_param_comms)", re.I)


def _call_bytes(name: str, args: dict) -> int | None:
    """Bytes moved by a host-side collective call, from whichever size fields the trace has."""
    if not COMM_CALL.match(name):
        return None
    types, dims = args.get("Input type"), args.get("Input Dims")
    first_type = types[0] if isinstance(types, list) and types else ""
    dtype = str(args.get("dtype") or first_type).lower()
    size = DTYPE_BYTES.get(dtype.removeprefix("torch."), 0)
    nelems = args.get("In msg nelems")
    if type(nelems) is int and 0 <= nelems < 2**63:  # a size only where it is one (a bad trace shows 0 B)
        return nelems * size
    dims = dims[0] if isinstance(dims, list) and dims else []
    if isinstance(dims, list) and dims and all(type(d) is int and 0 <= d < 2**63 for d in dims):
        n = 1
        for d in dims:
            n *= d
        return n * size
    return 0


def _dist_rank(doc: dict, default: int) -> int:
    info = doc.get("distributedInfo") or {}
    return int(info["rank"]) if isinstance(info, dict) and "rank" in info else default


def kineto_events(raw: list[dict], rank: int) -> tuple[list[Event], list[tuple[Event, Event, str]]]:
    """Complete events as Events (host threads, compute and comm streams); ac2g flows as pairs."""
    events: list[Event] = []
    starts: dict[Any, Event] = {}
    ends: dict[Any, tuple[int, int, int]] = {}
    for e in raw:
        ph = e.get("ph")
        if ph == "X" and e.get("cat") not in SKIP_CATS and "ts" in e:
            ev = _kineto_event(e, rank)
            events.append(ev)
        elif ph in ("s", "f") and "id" in e and "ts" in e:
            (starts if ph == "s" else ends)[e["id"]] = (e.get("pid"), e.get("tid"), _ns(e["ts"]))  # type: ignore[assignment]
    return events, _bind_flows(events, starts, ends)


def _ns(ts) -> int:
    """Kineto µs (int in old traces, float in new) to ns, without multiplying an epoch-sized
    float (a double near 1.7e18 ns is only good to ~256 ns)."""
    if isinstance(ts, int):
        return ts * NS_PER_US
    whole = int(ts)
    return whole * NS_PER_US + round((float(ts) - whole) * NS_PER_US)


def _kineto_event(e: dict, rank: int) -> Event:
    cat, name = str(e.get("cat", "")), str(e.get("name", ""))
    args = e.get("args") or {}
    start = _ns(e["ts"])
    end = start + _ns(e.get("dur", 0))
    if cat in DEVICE_CATS:
        stream = args.get("stream", e.get("tid"))
        kind = COMM if "nccl" in name.lower() else COMPUTE
        lane = f"{'communication' if kind == COMM else 'compute'} (stream {stream})"
    else:
        kind, lane = HOST, f"host thread {e.get('tid')}"
    keep = {k: args[k] for k in ("External id", "correlation", "stream", "Process Group Name",
                                 "In msg nelems", "Out msg nelems", "dtype") if k in args}
    if "Process Group Name" in args:
        keep["pg"] = args["Process Group Name"]
    if "Process Group Ranks" in args:
        keep["pg_ranks"] = args["Process Group Ranks"]
    if kind == HOST and (ann := parse_annotation(name)) is not None:
        # a trace-capture annotation: exact sizes and group, on CPU where Kineto records none
        keep.update(bytes=max(ann.get("in_bytes", 0), ann.get("out_bytes", 0)), pg=str(ann.get("pg", "0")),
                    pg_ranks=ann.get("pg_ranks"), comm_kind=ann["op"].upper())
    elif kind == HOST and (nbytes := _call_bytes(name, args)) is not None:
        keep["bytes"] = nbytes
    return Event(rank, name, kind, lane, start, end, None, cat, {**keep, "pid": e.get("pid"), "tid": e.get("tid")})


def _bind_flows(events: list[Event], starts: dict, ends: dict) -> list[tuple[Event, Event, str]]:
    """Kineto's flows name a (pid, tid, ts); find the event each end sits in (start time match)."""
    at: dict[tuple[Any, Any, int], Event] = {}
    for ev in events:
        at.setdefault((ev.args["pid"], ev.args["tid"], ev.start_ns), ev)  # type: ignore[index]
    out = []
    for fid, s in starts.items():
        a, b = at.get(s), at.get(ends.get(fid, ()))
        if a is not None and b is not None and a is not b:
            out.append((a, b, "launch"))
    return out


def _nccl_kind(name: str) -> str:
    n = name.lower().replace("_", "")
    for key, kind in (("allreduce", "ALL_REDUCE"), ("allgather", "ALL_GATHER"), ("reducescatter", "REDUCE_SCATTER"),
                      ("alltoall", "ALL_TO_ALL"), ("broadcast", "BROADCAST"), ("sendrecv", "SEND_RECV"),
                      ("send", "SEND"), ("recv", "RECV"), ("reduce", "REDUCE")):
        if key in n:
            return kind
    return "OTHER"


def _rebase(es: EventSet) -> EventSet:
    """Shift every time so the run starts at 0: epoch microseconds would lose nanoseconds."""
    o = es.origin_ns
    if not o:
        return es
    moved = {id(e): _shift(e, o) for e in es.events}
    es.events = [moved[id(e)] for e in es.events]
    es.flows = [(moved[id(a)], moved[id(b)], k) for a, b, k in es.flows]
    es.shift_ns += o
    es.notes.append(f"times shifted by {o} ns so the run starts at 0")
    return es


def _shift(e: Event, o: int) -> Event:
    return replace(e, start_ns=e.start_ns - o, end_ns=e.end_ns - o)

