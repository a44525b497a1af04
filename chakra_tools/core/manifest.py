"""The run manifest: what `trace-capture` writes beside a run's traces (manifest.json), and
what converting, comparing a replay with the run and drawing the run read, decoded once here,
typed and checked, naming the file and the place on error.

Each field is described in docs/capture.md. The capture writes the document (a dict, `FORMAT`
in its "format" key); `read_manifest` and `manifest_from_dict` are the one way to read it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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


@dataclass(frozen=True)
class GroupRecord:
    """A process group the run created: its name (pg_name), member ranks, description."""

    name: str
    ranks: tuple[int, ...]
    desc: str


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

    def trace_path(self, name: str | None) -> Path | None:
        """A trace named in the manifest, as a path (None for None)."""
        if name is None:
            return None
        return (self.folder / name) if self.folder is not None else Path(name)


def read_manifest(path: str | Path) -> RunManifest:
    """The manifest of a run folder (or the manifest file itself)."""
    p = Path(path)
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
        tuple(_group(g, source, f"process_groups[{i}]") for i, g in enumerate(groups)))


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
                      _ints(r.get("step_starts_unix_ns"), source, f"{where}.step_starts_unix_ns"))


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
