"""The replay result document: what a replay writes (`ReplayResult.write`, `trace-replay --out`)
and what `trace-visualize` and scripts read, decoded once here, typed and checked.

One JSON object; `format` and `version` say what it is:

    {"format": "chakra-tools.replay-result", "version": 1,
     "makespan_ns": ..., "ranks": [{rank, start_ns, finish_ns, compute_ns, comm_ns,
     exposed_comm_ns, overlap_ns, idle_ns, nodes}], "collectives": [{ranks, node_ids, node_id,
     name, comm_type, bytes, pg, issued_ns, start_ns, end_ns, rank}], "critical_path": [[rank,
     node]], "critical_path_ns": ..., "config": {...}, "diagnostics": [...],
     "events": [{rank, node_id, name, type, lane, start_ns, end_ns}],   # unless not recorded
     "deps": [[src_rank, src_node, dst_rank, dst_node]],
     "fidelity": {...}}                                                  # when compared

Each event's `lane` is one of `core.lanes.LANES`, and its class of work follows from it
(`core.lanes.WORK`); nothing is guessed from names. Documents without `format` (written before it
existed, by the same writer) still load as version 1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .errors import InputError
from .fields import integer, obj
from .lanes import LANES, WORK

FORMAT = "chakra-tools.replay-result"
VERSION = 1
_RANK_FIELDS = ("start_ns", "finish_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "overlap_ns",
                "idle_ns", "nodes")


@dataclass(frozen=True)
class ReplayEvent:
    """One replayed node: when it ran, on which rank and lane."""

    rank: int
    node_id: int
    name: str
    type: str  # NodeType.short: COMP, COMM_COLL, ...
    lane: str  # one of core.lanes.LANES
    start_ns: int
    end_ns: int

    @property
    def work(self) -> str:
        """host, compute, comm, memory or other (core.lanes.WORK)."""
        return WORK[self.lane]


@dataclass(frozen=True)
class RankFigures:
    rank: int
    start_ns: int
    finish_ns: int
    compute_ns: int
    comm_ns: int
    exposed_comm_ns: int
    overlap_ns: int
    idle_ns: int
    nodes: int


@dataclass(frozen=True)
class CollectiveRecord:
    """One collective instance: its group, the member nodes, kind, bytes and when it ran."""

    ranks: tuple[int, ...]
    node_ids: dict[int, int]
    node_id: int | None  # the first member's
    name: str
    comm_type: str
    bytes: int
    pg: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class ReplayDocument:
    version: int
    makespan_ns: int
    ranks: tuple[RankFigures, ...]
    collectives: tuple[CollectiveRecord, ...]
    critical_path: tuple[tuple[int, int], ...]
    events: tuple[ReplayEvent, ...]
    deps: tuple[tuple[int, int, int, int], ...]
    config: dict
    diagnostics: tuple[dict, ...]
    fidelity: dict | None


def headline_line(head: dict) -> str:
    """The one error a replay against measured steps is judged by (`fidelity.headline`), as
    `trace-replay` prints it and the report shows it.

    >>> headline_line({"error": 0.0014, "measured_ns": 6025069, "predicted_ns": 6033349, "what": "per step"})
    'error +0.1%: measured 6.025 ms, predicted 6.033 ms (per step)'

    A what-if (`what_if`: the links it changed) is set against the run that was measured, as the
    change it makes, not as an error:

    >>> headline_line({"error": -0.5, "measured_ns": 8e6, "predicted_ns": 4e6, "what": "per step",
    ...                "what_if": "inter-node=x3"})
    'what-if (inter-node=x3) against the captured run: -50.0%, predicted 4.000 ms where it measured 8.000 ms (per step): the change, not an error'
    """
    if head.get("what_if"):
        return (f"what-if ({head['what_if']}) against the captured run: {head['error'] * 100:+.1f}%, predicted "
                f"{head['predicted_ns'] / 1e6:.3f} ms where it measured {head['measured_ns'] / 1e6:.3f} ms "
                f"({head['what']}): the change, not an error")
    return (f"error {head['error'] * 100:+.1f}%: measured {head['measured_ns'] / 1e6:.3f} ms, predicted "
            f"{head['predicted_ns'] / 1e6:.3f} ms ({head['what']})")


def is_replay_result(doc: Any) -> bool:
    """Whether a decoded JSON value is a replay result (by its `format`, or, for documents from
    before it was written, by its keys)."""
    if not isinstance(doc, dict):
        return False
    if "format" in doc:
        return doc["format"] == FORMAT
    return "ranks" in doc and "events" in doc and "traceEvents" not in doc


def write_replay_result(doc: dict, f: IO[str]) -> None:
    """One JSON document, one top-level key per line: compact enough for millions of events."""
    f.write("{\n" + ",\n".join(f"{json.dumps(k)}:{json.dumps(v, separators=(',', ':'), default=str)}"
                                for k, v in doc.items()) + "\n}\n")


def read_replay_result(path: str | Path) -> ReplayDocument:
    """The typed document of a replay result file; InputError naming the file and the place."""
    from .chrome_trace import load
    from .commit import recover

    recover(Path(path).parent)  # a replay killed while it replaced this file is finished first
    return decode_replay_result(load(path), str(path))


def decode_replay_result(doc: Any, source: str) -> ReplayDocument:
    """The typed document of a decoded replay result (`source` names it in errors)."""
    if not is_replay_result(doc):
        raise InputError(f"{source}: not a replay result (expected format {FORMAT!r}, as written "
                         "by trace-replay --out)")
    version = doc.get("version", 1)
    if version != VERSION:
        raise InputError(f"{source}: replay result version {version!r}; this chakra-tools reads "
                         f"version {VERSION}")
    return ReplayDocument(
        version=version,
        makespan_ns=integer(doc.get("makespan_ns", 0), source, "makespan_ns"),
        ranks=tuple(_rank(r, source, f"ranks[{i}]") for i, r in enumerate(_list(doc, "ranks", source))),
        collectives=tuple(_collective(c, source, f"collectives[{i}]")
                          for i, c in enumerate(_list(doc, "collectives", source))),
        critical_path=tuple(_ints(p, 2, source, f"critical_path[{i}]")
                            for i, p in enumerate(_list(doc, "critical_path", source))),
        events=tuple(_event(e, source, f"events[{i}]") for i, e in enumerate(_list(doc, "events", source))),
        deps=tuple(_ints(d, 4, source, f"deps[{i}]") for i, d in enumerate(_list(doc, "deps", source))),
        config=_config(doc.get("config")),
        diagnostics=tuple(d for d in _list(doc, "diagnostics", source) if isinstance(d, dict)),
        fidelity=doc.get("fidelity") if isinstance(doc.get("fidelity"), dict) else None)


def _config(v: Any) -> dict:
    """The replay's settings, shown as they are; `modes` (what a reader acts on) kept only as
    the object replay writes."""
    config = dict(v) if isinstance(v, dict) else {}
    if not isinstance(config.get("modes", {}), dict):
        del config["modes"]
    return config


def _list(doc: dict, key: str, source: str) -> list:
    v = doc.get(key, [])
    if not isinstance(v, list):
        raise InputError(f"{source}: {key!r} is {type(v).__name__}, not a list")
    return v


def _ints(v: Any, n: int, source: str, where: str) -> tuple:
    if not isinstance(v, list) or len(v) != n:
        raise InputError(f"{source}: {where} is {v!r}, not a list of {n} integers")
    return tuple(integer(x, source, where) for x in v)


def _event(e: Any, source: str, where: str) -> ReplayEvent:
    e = obj(e, source, where)
    lane = e.get("lane")
    if lane not in LANES:
        raise InputError(f"{source}: {where}.lane is {lane!r}; lanes are {', '.join(LANES)}")
    return ReplayEvent(integer(e.get("rank"), source, f"{where}.rank"),
                       integer(e.get("node_id"), source, f"{where}.node_id"), str(e.get("name", "")),
                       str(e.get("type", "")), lane, integer(e.get("start_ns"), source, f"{where}.start_ns"),
                       integer(e.get("end_ns"), source, f"{where}.end_ns"))


def _rank(r: Any, source: str, where: str) -> RankFigures:
    r = obj(r, source, where)
    return RankFigures(integer(r.get("rank"), source, f"{where}.rank"),
                       *(integer(r.get(k, 0), source, f"{where}.{k}") for k in _RANK_FIELDS))


def _collective(c: Any, source: str, where: str) -> CollectiveRecord:
    c = obj(c, source, where)
    ranks = c.get("ranks") or ([c["rank"]] if "rank" in c else [])
    if not isinstance(ranks, list):
        raise InputError(f"{source}: {where}.ranks is {ranks!r}, not a list")
    node_ids = c.get("node_ids") or {}
    if not isinstance(node_ids, dict):
        raise InputError(f"{source}: {where}.node_ids is {node_ids!r}, not an object")
    try:
        members = {int(k): integer(v, source, f"{where}.node_ids") for k, v in node_ids.items()}
    except ValueError:
        raise InputError(f"{source}: {where}.node_ids has a key that is not a rank") from None
    node_id = c.get("node_id")
    return CollectiveRecord(tuple(integer(x, source, f"{where}.ranks") for x in ranks), members,
                            None if node_id is None else integer(node_id, source, f"{where}.node_id"),
                            str(c.get("name", "")), str(c.get("comm_type", "UNKNOWN")),
                            integer(c.get("bytes", 0), source, f"{where}.bytes"), str(c.get("pg", "0")),
                            integer(c.get("start_ns", 0), source, f"{where}.start_ns"),
                            integer(c.get("end_ns", 0), source, f"{where}.end_ns"))
