"""Reading Kineto device traces (`torch.profiler`, Chrome trace JSON).

Only complete events (`ph: "X"`) matter. They fall into three lanes:

* host events: `cpu_op` and `user_annotation` (older traces: `Operator`, `user_annotation`) on
  CPU threads; each knows its enclosing host event by time containment on its thread;
* runtime calls: `cuda_runtime`/`cuda_driver` (`Runtime` in old traces), tied to the kernel they
  launch by `correlation`;
* device work: `kernel`, `gpu_memcpy`, `gpu_memset` (old: `Kernel`, `Memcpy`, `Memset`) with a
  `stream`;
* synchronisation records (`cuda_sync`, CUPTI's, in traces of PyTorch 2.4 and later): which
  stream waited for which other stream's event (`Stream Wait Event`), kept whole.

Timestamps are microseconds, integers in old traces and floats in new ones; both are read as
floats. Nesting is computed with a small tolerance (1 ns) because float timestamps of a child and
its parent can differ in the last digit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Union

import msgspec

from chakra_tools.core.errors import InputError

from . import hotloops, schema
from .schema import KINETO_COMM_ARGS

HOST_CATS = frozenset({"cpu_op", "user_annotation", "Operator", "operator"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "hip_runtime", "hip_driver"})
GPU_CATS = frozenset({"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"})
SYNC_CATS = frozenset({"cuda_sync"})
EPS = 1e-3


class Event:
    """One complete Kineto event. `parent` is the index of the enclosing host event on the same
    thread (-1 for none); `child_us` the summed duration of its direct host children."""

    __slots__ = ("idx", "name", "cat", "tid", "ts", "dur", "args", "parent", "child_us")

    def __init__(self, idx: int, name: str, cat: str, tid: int | str, ts: float, dur: float,
                 args: dict):
        self.idx, self.name, self.cat, self.tid = idx, name, cat, tid
        self.ts, self.dur, self.args = ts, dur, args
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
    syncs: list[Event] = field(default_factory=list)
    dist_info: dict = field(default_factory=dict)
    #: runtime event index (in `runtime`) -> index of the innermost enclosing host event
    runtime_parent: dict[int, int] = field(default_factory=dict)
    #: the processes its first host events name (`pid`): the one its host trace should come from
    host_pids: frozenset = frozenset()

    @property
    def has_rf_ids(self) -> bool:
        """True if host events carry a usable `Record function id` (some traces write 0s)."""
        return any(e.args.get("Record function id") for e in self.host[:2000])


def parse_device(doc: Any, path: str, *, full_args: bool = False) -> DeviceTrace:
    """A device trace from its plain JSON document, each event the converter uses checked as
    the typed path checks it (schema.py): the same events, or an InputError naming the event.
    Raises InputError if it is not a device trace."""
    if isinstance(doc, list):
        events = doc
        doc = {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = doc["traceEvents"]
    else:
        raise InputError(f"{path}: not a Kineto device trace (no 'traceEvents' list)")
    dt = DeviceTrace(path, dist_info=schema.dist_info(doc.get("distributedInfo"), path))
    lanes = _lanes(dt, full_args)
    for pos, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        lane = lanes.get(cat) if type(cat) is str else None
        if lane is not None:
            lane[0].append(_plain_event(pos, e, lane, path))
    dt.host_pids = _host_pids(dt, ((e.get("cat"), e.get("pid")) for e in events if isinstance(e, dict)))
    _nest(dt)
    return dt


def _host_pids(dt: DeviceTrace, cat_pid, enough: int = 256) -> frozenset:
    """The pids of the first `enough` host events: a host trace of the same process has one of
    them (a device trace's GPU rows carry the device's number instead). Read only where the
    trace records no record-function ids, the one place the link asks (link.py)."""
    if dt.has_rf_ids:
        return frozenset()
    hosts = (pid for cat, pid in cat_pid if type(cat) is str and cat in HOST_CATS)
    return frozenset(pid for pid in islice(hosts, enough) if type(pid) is int)


def _lanes(dt: DeviceTrace, full_args: bool) -> dict[str, tuple[list, int, bool]]:
    """cat -> (its lane, which args it keeps: _KEY_ARGS[i], whether it keeps them all)."""
    lanes = {cat: (dt.host, 0, full_args) for cat in HOST_CATS}
    lanes.update({cat: (dt.runtime, 1, False) for cat in RUNTIME_CATS})
    lanes.update({cat: (dt.gpu, 2, False) for cat in GPU_CATS})
    lanes.update({cat: (dt.syncs, 1, True) for cat in SYNC_CATS})  # few: their args whole
    return lanes


def _plain_event(pos: int, e: dict, lane: tuple, path: str) -> Event:
    """An Event from a plain JSON event, its fields checked as `_RawEvent` types them."""
    events, keys, whole = lane
    place = schema.Place(path, f"traceEvents[{pos}]")
    name = schema.text(e.get("name", ""), place, "name")
    place.record += f" ({name!r})"
    dur = e.get("dur", 0.0)
    ev = Event(len(events), name, e["cat"], schema.tid(e.get("tid", 0), place),
               schema.micros(e.get("ts", 0.0), place, "ts"),
               0.0 if dur is None else schema.micros(dur, place, "dur"), {})
    args = schema.obj(e.get("args", {}), place, "args")
    key_args = _key_args(args, place, keys)
    ev.args = _checked_args(args, place) if whole or _whole_args(name) else _KEY_ARGS[keys](key_args)
    return ev


def _key_args(args: dict, place: schema.Place, lane: int) -> "_KeyArgs":
    """The `args` keys of `_KeyArgs` that events of `lane` are read for, checked as `_KeyArgs`
    checks them (the others are left unread, as they are for the lane's events)."""
    values = {}
    for name in _LANE_FIELDS[lane]:
        key = _ARG_NAMES.get(name, name)
        lo = 0 if name == "bytes" else schema.INT64_MIN
        values[name] = schema.optional_integer(args.get(key), place, key, lo)
    return _KeyArgs(**values)


def _whole_args(name: str) -> bool:
    """Events whose whole `args` the converter reads: NCCL's and `record_param_comms`
    (their collective metadata)."""
    return name.startswith("nccl") or name == "record_param_comms"


#: the argument lists a host event recorded with `record_shapes` carries, one item per input:
#: a device-only conversion reads them as the host trace's shapes and types (rank.py)
SHAPE_ARGS = ("Input Dims", "Input type")


def _checked_args(args: dict, place: schema.Place) -> dict:
    """An event's whole `args`, its collective metadata and its argument lists checked.

    `Input Dims` and `Input type` are optional (a profile taken without `record_shapes` has
    neither; null counts as absent), but where present they must be lists: PyTorch writes
    nothing else, so another type means a damaged file, an InputError naming the event, as
    for every other field of the wrong type. Their items stay loose (a shape that is no list
    of integers, a type that is no text, has no size: tensors.py), as in host traces."""
    for key in SHAPE_ARGS:
        value = args.get(key)
        if value is None:
            args.pop(key, None)
        elif type(value) is not list:
            raise place.error(key, value, "a list (one item per input)")
    return schema.check_comm_attrs(args, place, KINETO_COMM_ARGS)


def _nest(dt: DeviceTrace) -> None:
    """Set each host event's parent and children time, and each runtime call's host event."""
    hotloops.nest(dt.host, dt.runtime, dt.runtime_parent, Event, EPS)


# --------------------------------------------------------------------------------------------
# fast path: typed decoding
# --------------------------------------------------------------------------------------------
#
# msgspec decodes `traceEvents` into small structs holding only the fields the converter reads,
# the few `args` keys included. The events whose whole `args` object is needed (NCCL events; host
# events of device-only conversions) get it from a second, cheap decode that keeps `args` raw.
# A document that does not fit the types goes to the plain JSON path, which reports syntax
# errors with their line.

class _KeyArgs(msgspec.Struct, gc=False, frozen=True):
    """The `args` keys the converter reads of events that are not decoded whole."""

    rf_id: Union[schema.Int64, None] = msgspec.field(default=None, name="Record function id")
    correlation: Union[schema.Int64, None] = None
    stream: Union[schema.Int64, None] = None
    bytes: Union[schema.Count, None] = None


_NO_KEY_ARGS = _KeyArgs()


class _RawEvent(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    tid: schema.Tid = 0
    ts: schema.Micros = 0.0
    dur: Union[schema.Micros, None] = 0.0
    args: _KeyArgs = _NO_KEY_ARGS
    pid: Any = None


class _RawTrace(msgspec.Struct, gc=False):
    traceEvents: list[_RawEvent]
    distributedInfo: Any = None


class _ArgsOnly(msgspec.Struct, gc=False):
    args: msgspec.Raw = msgspec.Raw(b"{}")


class _ArgsTrace(msgspec.Struct, gc=False):
    """The same events again, their `args` left raw: for the few decoded whole."""

    traceEvents: list[_ArgsOnly]


_TRACE = msgspec.json.Decoder(_RawTrace)
_ARGS_TRACE = msgspec.json.Decoder(_ArgsTrace)
_ALL_ARGS = msgspec.json.Decoder(dict)


def parse_device_bytes(data: bytes, path: str, *, full_args: bool = False) -> DeviceTrace:
    """A device trace from the file's bytes: typed decoding when it fits, else plain JSON.

    With `full_args` (device-only conversion) host events keep their whole `args`; NCCL events
    and `record_param_comms` always do (their collective metadata)."""
    from .jsonio import decode_typed, parse_json_bytes

    doc = decode_typed(_TRACE, data)
    dt = _from_typed(doc, path, data, full_args) if doc is not None else None
    if dt is not None:
        _nest(dt)
        return dt
    return parse_device(parse_json_bytes(data, path), path, full_args=full_args)


def _from_typed(doc: _RawTrace, path: str, data: bytes, full_args: bool) -> DeviceTrace | None:
    dt = DeviceTrace(path, dist_info=schema.dist_info(doc.distributedInfo, path))
    lanes = _lanes(dt, full_args)
    whole_args = hotloops.device_events(doc.traceEvents, lanes, Event, _KEY_ARGS, _whole_args)
    if not _decode_whole_args(dt, data, whole_args):
        return None
    dt.host_pids = _host_pids(dt, ((e.cat, e.pid) for e in doc.traceEvents))
    return dt


def _decode_whole_args(dt: DeviceTrace, data: bytes, positions: list[int]) -> bool:
    """Give the events that asked for it (their `args` holds their position) their whole args."""
    if not positions:
        return True
    from .jsonio import decode_typed

    again = decode_typed(_ARGS_TRACE, data)
    if again is None:
        return False
    raw = again.traceEvents
    try:
        for ev in (*dt.host, *dt.runtime, *dt.gpu, *dt.syncs):
            if type(ev.args) is int:
                place = schema.Place(dt.path, f"traceEvents[{ev.args}] ({ev.name!r})")
                ev.args = _checked_args(_ALL_ARGS.decode(raw[ev.args].args), place)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False  # args that are not an object: the plain path says where
    return True


def _host_args(a: _KeyArgs) -> dict:
    return {} if a.rf_id is None else {"Record function id": a.rf_id}


def _runtime_args(a: _KeyArgs) -> dict:
    return {} if a.correlation is None else {"correlation": a.correlation}


def _gpu_args(a: _KeyArgs) -> dict:
    return {k: v for k, v in (("correlation", a.correlation), ("stream", a.stream), ("bytes", a.bytes))
            if v is not None}


_KEY_ARGS = (_host_args, _runtime_args, _gpu_args)
#: the `_KeyArgs` fields each lane reads (host, runtime, device work), and their names in `args`
_LANE_FIELDS = (("rf_id",), ("correlation",), ("correlation", "stream", "bytes"))
_ARG_NAMES = {"rf_id": "Record function id"}
