"""manifest.json: what a captured run holds and how it ended, folded from the ranks' status files.

The parent writes it once the command has exited. Every rank wrote `.rank-<r>.status.json` when
its capture window closed and again at its exit; a rank that died without exiting (SIGKILL,
segfault) left only the first (status "running") or none, and is reported as "killed" or
"missing". docs/reference/trace-capture.md documents every field. No torch here.
"""

from __future__ import annotations

import json
import re
import socket
from importlib import metadata
from pathlib import Path
from typing import Any

from . import protocol

RUN_STATUSES = ("ok", "no-step", "script-error", "interrupted", "rank-failed")


def tool_version() -> str:
    try:
        return metadata.version("chakra-tools")
    except metadata.PackageNotFoundError:
        return "unknown"


def torch_version(records: list[dict[str, Any]]) -> str | None:
    for r in records:
        if r.get("torch_version"):
            return r["torch_version"]
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def read_status_files(run_dir: Path) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Every rank's last status record, by rank, and warnings for files that do not parse."""
    records, warnings = {}, []
    for path in sorted(run_dir.glob(".rank-*.status.json")):
        try:
            record = json.loads(path.read_text())
            records[int(record["rank"])] = record
        except (OSError, ValueError, KeyError, TypeError) as e:
            warnings.append(f"{path.name}: unreadable rank status ({e})")
    return records, warnings


def rank_entry(rank: int, record: dict[str, Any] | None, run_dir: Path) -> dict[str, Any]:
    """One element of manifest["ranks"]; trace names only for files that really exist."""
    if record is None:
        return {"rank": rank, "status": "missing", "error": "no status: the rank never started "
                "capturing or died at once", "host_trace": None, "device_trace": None,
                "captured_steps": [], "step_times_ns": [], "step_starts_unix_ns": [], "device": None,
                "host": None}
    status = record["status"]
    error = record.get("error")
    if status == "running":
        status, error = "killed", "the rank ended without running its exit handlers (killed?)"
    entry = {k: record.get(k) for k in ("rank", "local_rank", "host", "node_rank", "pid", "host_trace",
                                        "device_trace", "captured_steps", "step_times_ns",
                                        "step_starts_unix_ns",
                                        "device", "annotated_calls", "annotation_failures",
                                        "failed_at", "capture_error")}
    entry.update(status=status, error=error)
    for key in ("host_trace", "device_trace"):
        if entry[key] and not (run_dir / entry[key]).is_file():
            entry[key] = None
    return entry


def run_status(ranks: list[dict[str, Any]], exit_code: int, interrupted: bool) -> str:
    """ok | no-step | script-error | interrupted | rank-failed (see docs/reference/trace-capture.md)."""
    states = {r["status"] for r in ranks}
    if interrupted or "interrupted" in states:
        return "interrupted"
    if exit_code == 0 and "no-step" in states and states <= {"ok", "no-step"}:
        return "no-step"
    if len(ranks) > 1 and states != {"ok"}:
        return "rank-failed"
    if exit_code != 0 or states != {"ok"}:
        return "script-error"
    return "ok"


#: how a rank's collective library reports that a peer went away: an effect, not the cause
PEER_LOSS = re.compile(r"connection (closed|reset)|closed by peer|broken pipe|socket timeout|"
                       r"timed out|peer .* (died|exited)|NCCL communicator was aborted", re.I)


def run_error(ranks: list[dict[str, Any]], status: str, exit_code: int) -> str | None:
    """The run's error: the first failure that is not merely a peer going away (a rank whose
    peer died reports a connection error, possibly before the failing rank's own record lands)."""
    if status == "ok":
        return None
    failed = [r for r in ranks if r["status"] not in ("ok", "terminated") and r.get("error")]
    failed = failed or [r for r in ranks if r["status"] != "ok" and r.get("error")]
    failed.sort(key=lambda r: (bool(PEER_LOSS.search(str(r["error"]))), r.get("failed_at") or float("inf")))
    if failed:
        first = failed[0]
        prefix = f"rank {first['rank']}: " if len(ranks) > 1 else ""
        return prefix + str(first["error"])
    if status == "interrupted":
        return "interrupted (Ctrl-C)"
    return f"the command exited with code {exit_code}"


def merge_groups(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The union of the ranks' process groups (a rank sees only the groups it belongs to)."""
    groups: dict[str, dict[str, Any]] = {}
    for record in records:
        for g in record.get("process_groups") or []:
            groups.setdefault(g["name"], g)
    return [groups[k] for k in sorted(groups, key=lambda n: (len(n), n))]


def common_steps(ranks: list[dict[str, Any]]) -> list[int]:
    """Steps captured on every rank that has traces."""
    sets = [set(r["captured_steps"] or []) for r in ranks if r.get("host_trace")]
    return sorted(set.intersection(*sets)) if sets else []


def build(run_dir: Path, *, command: list[str], cwd: str, cfg: protocol.CaptureConfig,
          started: str, finished: str, exit_code: int, interrupted: bool,
          records: dict[int, dict[str, Any]], warnings: list[str],
          least_world: int = 1, node: dict[str, Any] | None = None) -> dict[str, Any]:
    """The manifest document (see docs/reference/trace-capture.md for each field). `least_world`: the ranks the
    command is known to start (torchrun's --nproc-per-node): those that left no record are
    `missing` even when no rank recorded the world size. `node` ({"rank", "count"}): this is one
    node's capture of a multi-node launch, whose ranks are the ones this node ran."""
    world = max([r.get("world_size") or 1 for r in records.values()] + [least_world, 1])
    if node is None:
        ranks = [rank_entry(r, records.get(r), run_dir) for r in range(world)]
    else:
        ranks = [rank_entry(r, records[r], run_dir) for r in sorted(records)]
    status = run_status(ranks, exit_code, interrupted)
    if node is not None:
        node = node_entry(node, records, least_world)
        if len(ranks) < node["expected_ranks"] and status == "ok":
            status = "rank-failed"
            warnings = warnings + [f"{len(ranks)} of the node's {node['expected_ranks']} ranks left a status"]
    backends = [r["backend"] for r in records.values() if r.get("backend")]
    warnings = warnings + [f"rank {r['rank']}: {r['capture_error']}" for r in ranks
                           if r.get("capture_error")]
    captured = common_steps(ranks)
    if status == "ok" and 0 < len(captured) < cfg.active:
        warnings = warnings + [f"captured {len(captured)} of the {cfg.active} steps asked for (--active): the "
                               f"script ended first, after {cfg.wait} + {cfg.warmup} steps of --wait and --warmup "
                               f"and {len(captured)} more; give it more steps or ask for fewer"]
    return {
        "format": protocol.FORMAT,
        "tool_version": tool_version(),
        "torch_version": torch_version(list(records.values())),
        "command": command,
        "cwd": cwd,
        "host": socket.gethostname(),
        "started": started,
        "finished": finished,
        "status": status,
        "exit_code": exit_code,
        "error": run_error(ranks, status, exit_code),
        "world_size": world,
        "backend": backends[0] if backends else None,
        "process_groups": merge_groups(list(records.values())),
        "schedule": {"wait": cfg.wait, "warmup": cfg.warmup, "active": cfg.active},
        "captured_steps": captured,
        "ranks": ranks,
        "warnings": warnings,
        **({"node": node, "job_id": _job_id(records)} if node is not None else {}),
    }


def node_entry(node: dict[str, Any], records: dict[int, dict[str, Any]], least_world: int) -> dict[str, Any]:
    """manifest["node"]: which node of how many this capture is, its host, the ranks it ran, and
    how many it was to run (the launcher's --nproc-per-node, or what its ranks say)."""
    recorded = {r.get("node_rank") for r in records.values()} - {None}
    rank = node.get("rank")
    if rank is None and len(recorded) == 1:
        rank = recorded.pop()
    local = [r.get("local_world_size") for r in records.values() if r.get("local_world_size")]
    return {"rank": rank, "count": node["count"], "host": socket.gethostname(),
            "ranks": sorted(records), "expected_ranks": max(local + [least_world])}


def _job_id(records: dict[int, dict[str, Any]]) -> str | None:
    ids = sorted({r.get("job_id") for r in records.values()} - {None})
    return ids[0] if ids else None
