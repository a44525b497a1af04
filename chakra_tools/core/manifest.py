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
    missing = sorted(set(range(count)) - set(seen))
    if missing:
        raise InputError(f"{where}: the launch ran {count} nodes but node(s) {missing} left no capture "
                         "(run trace-capture on every node, into the same --out or one folder each)")
    owner: dict[int, str] = {}
    for p in parts:
        for r in p.ranks:
            if r.rank in owner:
                raise InputError(f"rank {r.rank} appears in both {owner[r.rank]} and {p.source}")
            owner[r.rank] = p.source
    world = first.world_size or len(owner)
    if sorted(owner) != list(range(world)):
        gone = sorted(set(range(world)) - set(owner))
        raise InputError(f"{where}: the job has {world} ranks but no node captured rank(s) {gone}")
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
    world = optional_integer(doc.get("world_size"), source, "world_size")
    if world is not None and not 1 <= world <= MAX_WORLD:
        raise InputError(f"{source}: world_size is {world}, not 1..{MAX_WORLD}")
    return RunManifest(
        source, folder, _str(doc.get("status"), source, "status") or "unknown",
        world, _str(doc.get("backend"), source, "backend"),
        _ints(doc.get("captured_steps"), source, "captured_steps"),
        tuple(_rank(r, source, f"ranks[{i}]") for i, r in enumerate(ranks)),
        tuple(_group(g, source, f"process_groups[{i}]") for i, g in enumerate(groups)),
        _node(doc.get("node"), source), _str(doc.get("job_id"), source, "job_id"),
        _str(doc.get("error"), source, "error"))


def _node(n: Any, source: str) -> tuple[NodeRecord, ...]:
    """The node of a node's capture (manifest "node"), () for a single-node run."""
    if n is None:
        return ()
    n = obj(n, source, "node")
    count = optional_integer(n.get("count"), source, "node.count")
    if count is None or count < 1:
        raise InputError(f"{source}: node.count is {n.get('count')!r}, not a node count")
    rank = optional_integer(n.get("rank"), source, "node.rank")
    if rank is not None and not 0 <= rank < count:
        raise InputError(f"{source}: node.rank is {rank}, not 0..{count - 1}")
    return (NodeRecord(rank, count, _str(n.get("host"), source, "node.host"),
                       _ints(n.get("ranks"), source, "node.ranks")),)


def _rank(r: Any, source: str, where: str) -> RankRecord:
    r = obj(r, source, where)
    rank = optional_integer(r.get("rank"), source, f"{where}.rank")
    if rank is None:
        raise InputError(f"{source}: {where} has no rank")
    return RankRecord(rank, _str(r.get("status"), source, f"{where}.status") or "unknown",
                      _str(r.get("error"), source, f"{where}.error"),
                      _str(r.get("host_trace"), source, f"{where}.host_trace"),
                      _str(r.get("device_trace"), source, f"{where}.device_trace"),
                      _ints(r.get("captured_steps"), source, f"{where}.captured_steps"),
                      _ints(r.get("step_times_ns"), source, f"{where}.step_times_ns"),
                      _ints(r.get("step_starts_unix_ns"), source, f"{where}.step_starts_unix_ns"),
                      _str(r.get("host"), source, f"{where}.host"))


def _group(g: Any, source: str, where: str) -> GroupRecord:
    if not isinstance(g, dict) or "name" not in g:
        raise InputError(f"{source}: {where} is not a process group (an object with a name)")
    return GroupRecord(str(g["name"]), _ints(g.get("ranks"), source, f"{where}.ranks"),
                       _str(g.get("desc"), source, f"{where}.desc") or "")


def _ints(v: Any, source: str, where: str) -> tuple[int, ...]:
    if v is None:
        return ()
    if not isinstance(v, list) or any(type(x) is not int for x in v):
        raise InputError(f"{source}: {where} is {str(v)[:60]}, not a list of integers")
    return tuple(v)


def _str(v: Any, source: str, where: str) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str):
        raise InputError(f"{source}: {where} is {v!r}, not a string")
    return v
