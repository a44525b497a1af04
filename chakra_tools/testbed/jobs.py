"""Running a job across the test bed's nodes the way a cluster user does: one `torchrun` per node
(`--nnodes N --node-rank i`, node 0's address as the rendezvous), each wrapped in its own
`trace-capture` when the run is captured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Sequence

from .cluster import NODE_IF, Cluster, free_port, wait_all

SURROGATE = "chakra_tools.testbed.surrogate"
PROBE = "chakra_tools.capture.probe"


@dataclass
class NodeRun:
    """What one node's launcher did: its exit code (None: killed at the timeout) and output."""

    node: int
    code: int | None
    log: Path


def job_env(extra: dict | None = None) -> dict:
    """The ranks' environment: gloo over the node's own interface, one thread per rank, this
    interpreter's scripts (torchrun, trace-capture) first on PATH."""
    env = dict(os.environ)
    env.update(GLOO_SOCKET_IFNAME=NODE_IF, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""))
    env.update(extra or {})
    return env


def torchrun_argv(cluster: Cluster, node: int, nproc: int, port: int, module: str,
                  args: Sequence[str]) -> list[str]:
    return ["torchrun", "--nnodes", str(cluster.nodes), "--node-rank", str(node),
            "--nproc-per-node", str(nproc), "--master-addr", cluster.address(0),
            "--master-port", str(port), "-m", module, *args]


def run_job(cluster: Cluster, nproc: int, args: Sequence[str], *, logs: Path,
            module: str = SURROGATE, capture: Path | None = None,
            capture_options: Sequence[str] = (), timeout_s: float = 600) -> list[NodeRun]:
    """Run `module args` on every node, `nproc` ranks each; with `capture`, each node's launcher
    runs under `trace-capture --out <capture>` (each node then writes its own node folder there).
    Output goes to `logs/node-<i>.log`."""
    logs.mkdir(parents=True, exist_ok=True)
    port = free_port()
    procs, paths = [], []
    for i in range(cluster.nodes):
        argv = torchrun_argv(cluster, i, nproc, port, module, args)
        if capture is not None:
            argv = ["trace-capture", *capture_options, "--out", str(capture), "--", *argv]
        path = logs / f"node-{i}.log"
        log = open(path, "w")
        procs.append(cluster.popen(i, argv, env=job_env(), stdout=log, stderr=subprocess.STDOUT))
        log.close()
        paths.append(path)
    codes = wait_all(procs, timeout_s)
    return [NodeRun(i, c, p) for i, (c, p) in enumerate(zip(codes, paths))]


def failed(runs: Sequence[NodeRun]) -> str | None:
    """A message naming the nodes that failed, with the end of their logs; None if all ran."""
    bad = [r for r in runs if r.code != 0]
    if not bad:
        return None
    parts = []
    for r in bad:
        tail = r.log.read_text(errors="replace").splitlines()[-15:]
        parts.append(f"node {r.node}: exit {r.code if r.code is not None else 'timeout'}\n  "
                     + "\n  ".join(tail))
    return "\n".join(parts)


#: a timed step this much longer than its rank's median was stalled (`stalled_steps`)
STALL = 1.25


def measured_step_ns(result: Path) -> int:
    """The step a surrogate run measured (its --result file): each rank's median timed step, the
    slowest rank's. Not the mean: the bed's nodes share one machine's cores, and now and then the
    machine stalls a rank for a step (a pipeline's 7 timed steps on 4x2 @500 Mbit/s: six of 192-205
    ms and one of 325), which moves a 7-step mean by 9% and is no part of the network the bed
    models. A file without the ranks' steps: its mean span."""
    doc = json.loads(result.read_text())
    steps = doc.get("steps_ns")
    if not steps or not all(steps):
        return int(doc["step_ns"])
    return int(max(median(rank) for rank in steps))


def stalled_steps(result: Path) -> int:
    """How many of a run's timed steps some rank took `STALL` times its median or longer."""
    steps = json.loads(result.read_text()).get("steps_ns") or []
    stalled = set()
    for rank in steps:
        if rank:
            typical = median(rank)
            stalled.update(i for i, s in enumerate(rank) if s >= STALL * typical)
    return len(stalled)


def host_load(result: Path) -> float:
    """The share of the host's cores a surrogate run's ranks kept busy over its timed steps (its
    --result file): all the bed's nodes share one machine's cores, so near 1 the machine, not the
    network the bed models, sets the pace."""
    doc = json.loads(result.read_text())
    return float(doc["cores_busy"]) / max(1, int(doc["host_cores"]))
