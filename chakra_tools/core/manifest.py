"""The run manifest: what `trace-capture` writes beside a run's traces (manifest.json), and
what converting, comparing a replay with the run and drawing the run read, decoded once here,
typed and checked, naming the file and the place on error.

Each field is described in docs/reference/trace-capture.md. The capture writes the document (a dict, `FORMAT`
in its "format" key); `read_manifest` and `manifest_from_dict` are the one way to read it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .errors import InputError
from .fields import obj, optional_integer
from .model import MAX_RANK

MANIFEST = "manifest.json"
FORMAT = "chakra-tools-capture/1"
MAX_WORLD = MAX_RANK + 1
#: the largest step time, wall-clock instant or step number a manifest holds (int64 nanoseconds,
#: as the capture measures them; a larger one is no time, and Python's float() fails on it)
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class RankRecord:
    """One rank of a run: its status, trace files (names inside the run folder, None where the
    rank wrote none) and the steps it timed."""

    rank: int
    status: str
    error: str | None
    host_trace: str | None
    device_trace: str | None
    captured_steps: tuple[int, ...]
    step_times_ns: tuple[int, ...]
    step_starts_unix_ns: tuple[int, ...]
    #: the machine it ran on (its host name), where the capture recorded it
    host: str | None = None


@dataclass(frozen=True)
class GroupRecord:
    """A process group the run created: its name (pg_name), member ranks, description."""

    name: str
    ranks: tuple[int, ...]
    desc: str


@dataclass(frozen=True)
class NodeRecord:
    """One node's capture of a multi-node launch: which node of how many, its host, its ranks
    and the folder its manifest is in (relative to the job's run folder)."""

    rank: int | None
    count: int
    host: str | None
    ranks: tuple[int, ...]
    folder: str = ""


@dataclass(frozen=True)
class RunManifest:
    source: str  # the file it was read from, for messages
    folder: Path | None  # the run folder (trace names are relative to it)
    status: str
    world_size: int | None
    backend: str | None
    captured_steps: tuple[int, ...]
    ranks: tuple[RankRecord, ...]
    process_groups: tuple[GroupRecord, ...]
    #: a node's capture: this node; a job merged from its nodes' captures: every node
    nodes: tuple[NodeRecord, ...] = ()
    job_id: str | None = None
    #: what trace-capture found went wrong (the failing rank's own error, not a peer's knock-on one)
    error: str | None = None

    def trace_path(self, name: str | None) -> Path | None:
        """A trace named in the manifest, as a path (None for None)."""
        if name is None:
            return None
        return (self.folder / name) if self.folder is not None else Path(name)


def read_manifest(path: str | Path) -> RunManifest:
    """The manifest of a run folder (or the manifest file itself). A multi-node run folder (one
    `node-<k>` folder per node, each with its node's manifest) reads as one job: `read_job`."""
    p = Path(path)
    if p.is_dir() and not (p / MANIFEST).exists():
        nodes = sorted(q.parent for q in p.glob(f"node-*/{MANIFEST}"))
        if nodes:
            return read_job(nodes, folder=p)
    man = _read_node(p)
    if man.nodes and man.nodes[0].count > 1:
        node = man.nodes[0]
        raise InputError(f"{man.source}: the capture of node {node.rank} of a {node.count}-node launch, not "
                         f"the whole job: give the folder that holds every node's folder (node-0, node-1, ...), "
                         f"or every node's folder (trace-convert NODE0 NODE1 ... -o OUT)")
    return man


def _read_node(p: Path) -> RunManifest:
    """One manifest file as it is (a node's, in a multi-node launch)."""
    file = p / MANIFEST if p.is_dir() else p
    try:
        doc = json.loads(file.read_text())
    except FileNotFoundError:
        raise InputError(f"{p}: no {MANIFEST} (not a trace-capture run folder)") from None
    except OSError as e:
        raise InputError(f"{file}: cannot read: {e.strerror}") from None
    except (ValueError, RecursionError) as e:
        raise InputError(f"{file}: not valid JSON: {getattr(e, 'msg', e)}") from None
    return manifest_from_dict(doc, str(file), folder=file.parent)


def read_job(folders: list[str | Path], *, folder: Path | None = None) -> RunManifest:
    """One job from the captures of its nodes (each node's `trace-capture` wrote its own run
    folder): every node of the launch present once, of one launch (the same job id and world),
    their ranks disjoint and together the world. Trace names become paths relative to `folder`
    (the job's run folder, which holds the node folders) or absolute paths."""
    parts = [_read_node(Path(f)) for f in folders]
    for part in parts:
        if not part.nodes:
            raise InputError(f"{part.source}: a single-node capture; a job is merged from the "
                             "captures of a multi-node launch (trace-capture -- torchrun --nnodes N ...)")
    return merge_nodes(parts, folder)


def merge_nodes(parts: list[RunManifest], folder: Path | None = None) -> RunManifest:
    """The job of `parts`, each one node's manifest; InputError naming what does not fit."""
    first = parts[0]
    where = ", ".join(p.source for p in parts)
    for p in parts[1:]:
        if p.job_id != first.job_id or p.world_size != first.world_size:
            raise InputError(f"{p.source} and {first.source} are captures of different launches "
                             f"(job {p.job_id!r} of {p.world_size} ranks, job {first.job_id!r} of "
                             f"{first.world_size} ranks)")
    count = first.nodes[0].count
    seen: dict[int | None, str] = {}
    for p in parts:
        node = p.nodes[0]
        if node.rank in seen:
            raise InputError(f"node {node.rank} was captured twice: {seen[node.rank]} and {p.source}")
        seen[node.rank] = p.source
    missing = _absent(seen, count)
    if missing:
        left = _few(missing, count - len(seen.keys() - {None}))
        raise InputError(f"{where}: the launch ran {count} nodes but node(s) {left} left no capture "
                         "(run trace-capture on every node, into the same --out or one folder each)")
    owner: dict[int, str] = {}
    for p in parts:
        for r in p.ranks:
            if r.rank in owner:
                raise InputError(f"rank {r.rank} appears in both {owner[r.rank]} and {p.source}")
            owner[r.rank] = p.source
    world = first.world_size or len(owner)
    gone = _absent(owner, world)
    if gone or len(owner) != world:
        raise InputError(f"{where}: the job has {world} ranks but no node captured rank(s) "
                         f"{_few(gone, world - len(owner))}")
    ranks, nodes = [], []
    for p in parts:
        base = _relative(p.folder, folder)
        ranks += [replace(r, host_trace=_joined(base, r.host_trace), device_trace=_joined(base, r.device_trace))
                  for r in p.ranks]
        nodes.append(replace(p.nodes[0], folder=base))
    bad = [p for p in parts if p.status != "ok"]
    steps = set(parts[0].captured_steps).intersection(*(p.captured_steps for p in parts))
    groups = {g.name: g for p in parts for g in p.process_groups}
    return RunManifest(where, folder, bad[0].status if bad else "ok", world,
                       first.backend, tuple(sorted(steps)), tuple(sorted(ranks, key=lambda r: r.rank)),
                       tuple(groups[k] for k in sorted(groups, key=lambda n: (len(n), n))),
                       tuple(sorted(nodes, key=lambda n: (n.rank is None, n.rank))), first.job_id,
                       next((p.error for p in bad if p.error), None))


def _absent(present, count: int, shown: int = 8) -> list[int]:
    """The first `shown` of 0..count-1 not in `present`, found without listing the whole range
    (a manifest's world may be 2**31 ranks): at most len(present) + `shown` numbers are tried."""
    out: list[int] = []
    k = 0
    while k < count and len(out) < shown:
        if k not in present:
            out.append(k)
        k += 1
    return out


def _few(listed: list[int], total: int) -> str:
    """`[3, 5]`, or `[3, 5, ...] (1000 in all)` where `listed` is the first few of `total`."""
    return str(listed) if total <= len(listed) else f"{str(listed)[:-1]}, ...] ({total} in all)"


def _relative(node_folder: Path | None, job: Path | None) -> str:
    if node_folder is None:
        return ""
    if job is not None:
        try:
            return str(node_folder.relative_to(job))
        except ValueError:
            pass
    return str(node_folder.absolute())


def _joined(base: str, name: str | None) -> str | None:
    return None if name is None else str(Path(base) / name) if base else name


def manifest_from_dict(doc: Any, source: str = "manifest", *, folder: Path | None = None) -> RunManifest:
    """The typed manifest of a decoded document; InputError naming `source` and the place.
    A document without "format" is taken as this format (a hand-written one in a test or a
    script); one that names another format is refused."""
    if not isinstance(doc, dict):
        raise InputError(f"{source}: a manifest is a JSON object, not {type(doc).__name__}")
    fmt = doc.get("format", FORMAT)
    if fmt != FORMAT:
        raise InputError(f"{source}: format {fmt!r}, expected {FORMAT!r}")
    ranks = doc.get("ranks", [])
    if not isinstance(ranks, list):
        raise InputError(f"{source}: 'ranks' is {type(ranks).__name__}, not a list")
    groups = doc.get("process_groups") or []
    if not isinstance(groups, list):
        raise InputError(f"{source}: 'process_groups' is {type(groups).__name__}, not a list")
    world = _bounded(doc.get("world_size"), source, "world_size", 1, MAX_WORLD)
    ranks = tuple(_rank(r, source, f"ranks[{i}]", world) for i, r in enumerate(ranks))
    _distinct([r.rank for r in ranks], source, "ranks")
    return RunManifest(
        source, folder, _str(doc.get("status"), source, "status") or "unknown",
        world, _str(doc.get("backend"), source, "backend"),
        _ints(doc.get("captured_steps"), source, "captured_steps", INT64_MAX),
        ranks, tuple(_group(g, source, f"process_groups[{i}]") for i, g in enumerate(groups)),
        _node(doc.get("node"), source, world), _str(doc.get("job_id"), source, "job_id"),
        _str(doc.get("error"), source, "error"))


def _node(n: Any, source: str, world: int | None) -> tuple[NodeRecord, ...]:
    """The node of a node's capture (manifest "node"), () for a single-node run. A launch has no
    more nodes than ranks: the count is bounded by the world (`merge_nodes` counts them off)."""
    if n is None:
        return ()
    n = obj(n, source, "node")
    if n.get("count") is None:
        raise InputError(f"{source}: node.count is missing, not a node count")
    count = _bounded(n.get("count"), source, "node.count", 1, world or MAX_WORLD)
    rank = _bounded(n.get("rank"), source, "node.rank", 0, count - 1)
    return (NodeRecord(rank, count, _str(n.get("host"), source, "node.host"),
                       _ints(n.get("ranks"), source, "node.ranks", MAX_RANK)),)


def _rank(r: Any, source: str, where: str, world: int | None) -> RankRecord:
    """One rank's record: its rank within the world (0..MAX_RANK where the world is not
    given), its step numbers, times and wall-clock starts non-negative int64 nanoseconds."""
    r = obj(r, source, where)
    if r.get("rank") is None:
        raise InputError(f"{source}: {where} has no rank")
    rank = _bounded(r.get("rank"), source, f"{where}.rank", 0, (world or MAX_WORLD) - 1)
    return RankRecord(rank, _str(r.get("status"), source, f"{where}.status") or "unknown",
                      _str(r.get("error"), source, f"{where}.error"),
                      _str(r.get("host_trace"), source, f"{where}.host_trace"),
                      _str(r.get("device_trace"), source, f"{where}.device_trace"),
                      _ints(r.get("captured_steps"), source, f"{where}.captured_steps", INT64_MAX),
                      _ints(r.get("step_times_ns"), source, f"{where}.step_times_ns", INT64_MAX),
                      _ints(r.get("step_starts_unix_ns"), source, f"{where}.step_starts_unix_ns", INT64_MAX),
                      _str(r.get("host"), source, f"{where}.host"))


def _group(g: Any, source: str, where: str) -> GroupRecord:
    if not isinstance(g, dict) or "name" not in g:
        raise InputError(f"{source}: {where} is not a process group (an object with a name)")
    name = g["name"]
    if type(name) is int:  # torch's group numbers, as an older capture wrote them
        name = str(_bounded(name, source, f"{where}.name", 0, INT64_MAX))
    ranks = _ints(g.get("ranks"), source, f"{where}.ranks", MAX_RANK)
    _distinct(ranks, source, f"{where}.ranks")
    return GroupRecord(_str(name, source, f"{where}.name"), ranks,
                       _str(g.get("desc"), source, f"{where}.desc") or "")


def _ints(v: Any, source: str, where: str, hi: int) -> tuple[int, ...]:
    """A list of integers in 0..`hi` (ranks, step numbers, nanoseconds: none is negative)."""
    if v is None:
        return ()
    if not isinstance(v, list) or any(type(x) is not int for x in v):
        raise InputError(f"{source}: {where} is {_shown(v)}, not a list of integers")
    for i, x in enumerate(v):
        if not 0 <= x <= hi:
            raise InputError(f"{source}: {where}[{i}] is {_shown(x)}, not 0..{hi}")
    return tuple(v)


def _bounded(v: Any, source: str, where: str, lo: int, hi: int) -> int | None:
    """An optional integer in lo..hi."""
    v = optional_integer(v, source, where)
    if v is not None and not lo <= v <= hi:
        raise InputError(f"{source}: {where} is {_shown(v)}, not {lo}..{hi}")
    return v


def _distinct(ranks, source: str, where: str) -> None:
    """A rank listed twice (two records of one rank, a group member twice) is no capture's."""
    seen: set[int] = set()
    for r in ranks:
        if r in seen:
            raise InputError(f"{source}: {where}: rank {r} is listed twice")
        seen.add(r)


def _shown(v: Any) -> str:
    """`v` for a message, at most 60 characters (an integer of any size: Python's str() refuses
    one of over 4,300 digits)."""
    if type(v) is int and v.bit_length() > 200:
        return f"an integer of {v.bit_length()} bits"
    try:
        text = repr(v)
    except ValueError:
        return f"a {type(v).__name__} holding an integer too long to print"
    return text if len(text) <= 60 else text[:57] + "..."


def _str(v: Any, source: str, where: str) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str):
        raise InputError(f"{source}: {where} is {v!r}, not a string")
    return v
