"""The network probe's measurements (probe.json): what `python -m chakra_tools.capture.probe` writes
under a job's own launcher and `trace-convert calibrate --probe` fits a network to.

A capture of a training job often shows one message size per collective kind (every bucket of a
DDP job is 25 MiB, every layer's gradient the same), which cannot tell a link's latency from its
bandwidth. The probe measures them, as nccl-tests does: point-to-point messages over a sweep of
sizes between two ranks of one machine and between two machines, and every collective kind over
the same sweep on the whole job, on the machines, placement and library the job runs with.

Document (JSON object, `FORMAT` in "format"):

- `backend` (gloo, nccl), `world_size`, `hosts`: the host name of each rank, in rank order;
- `p2p`: [{src, dst, size (bytes), one_way_ns: [...]}]: half the round trip of a message of
  `size` bytes from src to dst and back, once per repetition;
- `collectives`: [{kind (a CollectiveCommType name), ranks, size (`comm_size`, the converter's
  convention: docs/reference/trace-convert.md), ns: [...]}]: each repetition's time from the call to the return of
  its slowest member, all members starting together; a call whose buffer is at most
  `TIMED_ALONE_BYTES` was timed alone, after every rank sat idle (`CollectiveSample.timed_alone`),
  larger ones back to back;
- `reduce`: [{size, ns: [...]}]: one rank adding two buffers of `size` bytes (the reduction a
  collective performs per byte it receives);
- `idle_send` (optional): [{src, dst, size, idle_ns, ns: [...]}]: a message sent after the link
  sat idle `idle_ns` to a receiver already waiting, to the receiver's one-float reply: what a
  shaped link lets through at line rate after an idle spell (a token bucket's burst);
- `late_recv` (optional): [{src, dst, size, delay_ns, ns: [...]}]: a message sent while its
  receiver sleeps `delay_ns` before posting the receive, and the time the receive then takes:
  what the sender could not send ahead of the receive (past the library's window, which for
  gloo is what the receiver's TCP buffers hold) nor the link's burst carry.

`read_probe` is the one reader: every field checked, an InputError naming the file and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError
from .model import MAX_RANK, CommType

FORMAT = "chakra-tools-probe/1"
#: collectives whose buffer is at most this were timed one at a time after an idle pause (they
#: set the floors a round pays; a shaped link's bucket, refilled in the pause, carried their bytes)
TIMED_ALONE_BYTES = 16 << 10
PROBE_FILE = "probe.json"


@dataclass(frozen=True)
class P2PSample:
    src: int
    dst: int
    size: int
    one_way_ns: tuple[float, ...]


@dataclass(frozen=True)
class CollectiveSample:
    kind: str
    ranks: tuple[int, ...]
    size: int
    ns: tuple[float, ...]

    @property
    def timed_alone(self) -> bool:
        """Whether the probe timed it alone after an idle pause (its buffer: `size`, but each
        member's share of an all-gather's output)."""
        buffer = self.size * len(self.ranks) if self.kind == "ALL_GATHER" else self.size
        return buffer <= TIMED_ALONE_BYTES


@dataclass(frozen=True)
class ReduceSample:
    size: int
    ns: tuple[float, ...]


@dataclass(frozen=True)
class PacedSample:
    """A message timed after a pause (`pause_ns`): the link's idle spell before an `idle_send`,
    the receiver's delay before a `late_recv`."""

    src: int
    dst: int
    size: int
    pause_ns: float
    ns: tuple[float, ...]


@dataclass(frozen=True)
class ProbeResult:
    source: str
    backend: str | None
    hosts: tuple[str, ...]
    p2p: tuple[P2PSample, ...]
    collectives: tuple[CollectiveSample, ...]
    reduce: tuple[ReduceSample, ...]
    idle_send: tuple[PacedSample, ...] = ()
    late_recv: tuple[PacedSample, ...] = ()

    @property
    def world_size(self) -> int:
        return len(self.hosts)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "backend": self.backend, "world_size": self.world_size,
                "hosts": list(self.hosts),
                "p2p": [{"src": s.src, "dst": s.dst, "size": s.size, "one_way_ns": list(s.one_way_ns)}
                        for s in self.p2p],
                "collectives": [{"kind": c.kind, "ranks": list(c.ranks), "size": c.size, "ns": list(c.ns)}
                                for c in self.collectives],
                "reduce": [{"size": r.size, "ns": list(r.ns)} for r in self.reduce],
                "idle_send": [{"src": s.src, "dst": s.dst, "size": s.size, "idle_ns": s.pause_ns,
                               "ns": list(s.ns)} for s in self.idle_send],
                "late_recv": [{"src": s.src, "dst": s.dst, "size": s.size, "delay_ns": s.pause_ns,
                               "ns": list(s.ns)} for s in self.late_recv]}


def read_probe(path: str | Path) -> ProbeResult:
    """The probe measurements in `path` (probe.json, or a folder holding it)."""
    from .files import read_json

    p = Path(path)
    file = p / PROBE_FILE if p.is_dir() else p
    if not file.is_file():
        raise InputError(f"{file}: no such file (the probe writes {PROBE_FILE}: "
                         "torchrun ... -m chakra_tools.capture.probe --out FOLDER)")
    return probe_from_dict(read_json(file, what="an object (a probe.json)"), str(file))


def probe_from_dict(doc: Any, source: str = "probe") -> ProbeResult:
    def bad(where: str, want: str) -> InputError:
        return InputError(f"{source}: {where}: expected {want}")

    if not isinstance(doc, dict):
        raise bad("document", "a JSON object")
    if doc.get("format") != FORMAT:
        raise bad("format", repr(FORMAT))
    hosts = doc.get("hosts")
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
        raise bad("hosts", "a list of host names, one per rank")
    if len(hosts) > MAX_RANK + 1:
        raise bad("hosts", f"at most {MAX_RANK + 1} ranks")
    world = len(hosts)

    def rank(v: Any, where: str) -> int:
        if type(v) is not int or not 0 <= v < world:
            raise bad(where, f"a rank 0..{world - 1}")
        return v

    def size(v: Any, where: str) -> int:
        if type(v) is not int or not 0 <= v < 1 << 62:
            raise bad(where, "a size in bytes")
        return v

    def times(v: Any, where: str) -> tuple[float, ...]:
        if not isinstance(v, list) or not v or not all(
                isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t < 1e15 for t in v):
            raise bad(where, "a non-empty list of times in ns")
        return tuple(float(t) for t in v)

    def items(key: str) -> list:
        v = doc.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
            raise bad(key, "a list of objects")
        return v

    p2p = tuple(P2PSample(rank(s.get("src"), f"p2p[{i}].src"), rank(s.get("dst"), f"p2p[{i}].dst"),
                          size(s.get("size"), f"p2p[{i}].size"), times(s.get("one_way_ns"), f"p2p[{i}].one_way_ns"))
                for i, s in enumerate(items("p2p")))
    colls = []
    for i, c in enumerate(items("collectives")):
        kind = c.get("kind")
        if kind not in CommType.__members__:
            raise bad(f"collectives[{i}].kind", "a collective kind (ALL_REDUCE, ALL_GATHER, ...)")
        ranks = c.get("ranks")
        if not isinstance(ranks, list) or len(ranks) < 2:
            raise bad(f"collectives[{i}].ranks", "a list of two ranks or more")
        colls.append(CollectiveSample(kind, tuple(rank(r, f"collectives[{i}].ranks") for r in ranks),
                                      size(c.get("size"), f"collectives[{i}].size"),
                                      times(c.get("ns"), f"collectives[{i}].ns")))
    reduce = tuple(ReduceSample(size(r.get("size"), f"reduce[{i}].size"), times(r.get("ns"), f"reduce[{i}].ns"))
                   for i, r in enumerate(items("reduce")))
    def paced(key: str, pause: str) -> tuple[PacedSample, ...]:
        out = []
        for i, s in enumerate(items(key)):
            ns = s.get(pause)
            if isinstance(ns, bool) or not isinstance(ns, (int, float)) or not 0 < ns < 1e12:
                raise bad(f"{key}[{i}].{pause}", "a pause in ns above 0")
            out.append(PacedSample(rank(s.get("src"), f"{key}[{i}].src"), rank(s.get("dst"), f"{key}[{i}].dst"),
                                   size(s.get("size"), f"{key}[{i}].size"), float(ns), times(s.get("ns"), f"{key}[{i}].ns")))
        return tuple(out)

    backend = doc.get("backend")
    if backend is not None and not isinstance(backend, str):
        raise bad("backend", "a string")
    return ProbeResult(source, backend, tuple(hosts), p2p, tuple(colls), reduce,
                       paced("idle_send", "idle_ns"), paced("late_recv", "delay_ns"))
