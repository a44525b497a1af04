"""What `trace-capture` (the parent) and the captured ranks (its children) agree on: the
environment variables that carry the configuration, the run folder's file names and the
activation rule of the startup hook.

No torch here: the parent, the startup hook of every Python process the command starts and the
launcher processes (torchrun's agent) import this module, and none of them should pay for torch.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field

from chakra_tools.core.manifest import FORMAT, MANIFEST  # noqa: F401  (core owns the manifest)

ENV_CONFIG = "CHAKRA_CAPTURE_CONFIG"  # JSON of CaptureConfig
ENV_OWNER = "CHAKRA_CAPTURE_OWNER"  # set by a capturing process so its children stay out
ENV_LAUNCHER = "CHAKRA_CAPTURE_LAUNCHER"  # pid of the launcher (set by its startup hook)
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
WORLD_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
#: the node a rank runs on, and how many ranks its node runs (torchrun: GROUP_RANK and
#: LOCAL_WORLD_SIZE; Slurm and Open MPI spell them their own way)
NODE_RANK_VARS = ("GROUP_RANK", "SLURM_NODEID")
LOCAL_WORLD_VARS = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")
SPAWNED_ARG = "--multiprocessing-fork"  # in the argv of a process multiprocessing spawned


@dataclass
class CaptureConfig:
    """How each rank captures; travels to the ranks as JSON in $CHAKRA_CAPTURE_CONFIG.

    mode      "direct": the process trace-capture started (pid `parent_pid` is its parent) captures;
              "launcher": every process that has a rank in its environment captures.
    profile   False runs hooks and annotations without profiler (benchmarks only).
    annotate  "auto": annotate torch.distributed calls while the profiler records; "off"; "always"
              (benchmarks: our annotation cost without the profiler).
    ddp_hook  route DDP's gradient all-reduce through an annotated Python comm hook.
    waits     mark where `Work.wait()` on an annotated asynchronous call returned (comm.py).
    """

    out_dir: str
    parent_pid: int
    mode: str = "direct"
    wait: int = 1
    warmup: int = 1
    active: int = 2
    profile: bool = True
    annotate: str = "auto"
    ddp_hook: bool = True
    waits: bool = True
    extra: dict = field(default_factory=dict)

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, text: str) -> "CaptureConfig":
        return cls(**json.loads(text))

    @property
    def first_captured(self) -> int:
        return self.wait + self.warmup

    @property
    def captured_steps(self) -> list[int]:
        """The step numbers a run that lives long enough captures."""
        return list(range(self.first_captured, self.first_captured + self.active))


def env_int(names: tuple[str, ...], default: int | None, env=os.environ) -> int | None:
    """The first of `names` set in `env` as an int (launchers spell ranks differently)."""
    for name in names:
        value = env.get(name, "").strip()
        if value.lstrip("-").isdigit():
            return int(value)
    return default


def should_activate(cfg: CaptureConfig, env=os.environ, ppid: int | None = None,
                    argv: list[str] = sys.argv) -> bool:
    """Whether this process is one that captures itself.

    One capturing process per rank: a process that already captures marks the environment, so
    its children (DataLoader workers, compile workers) stay out. In direct mode the script's own
    process captures; in launcher mode the launcher's processes have no rank and stay out, its
    workers have one and capture. A launcher's child with no rank is the launcher's only worker
    (`accelerate launch` without torchrun or mpirun runs the script as one plain process): it
    captures as the script of direct mode does, rank 0 until it joins a group; unless it is a
    multiprocessing worker, which is handed its rank after it starts (`should_follow`).
    """
    if env.get(ENV_OWNER):
        return False
    ppid = ppid if ppid is not None else os.getppid()
    if cfg.mode == "direct":
        return ppid == cfg.parent_pid
    if env_int(RANK_VARS, None, env) is not None:
        return True
    return _launched_by_launcher(env, ppid) and SPAWNED_ARG not in argv


def should_follow(env=os.environ, ppid: int | None = None, argv: list[str] = sys.argv) -> bool:
    """Whether this process captures only once it joins a process group (follow.py): one that a
    capturing process started (`torch.multiprocessing.spawn`, Lightning's launcher), or a rankless
    multiprocessing worker that the launcher started."""
    if env.get(ENV_OWNER):
        return True
    ppid = ppid if ppid is not None else os.getppid()
    return (_launched_by_launcher(env, ppid) and SPAWNED_ARG in argv
            and env_int(RANK_VARS, None, env) is None)


def _launched_by_launcher(env, ppid: int) -> bool:
    return env.get(ENV_LAUNCHER, "") == str(ppid)


def is_launcher(cfg: CaptureConfig, env=os.environ, ppid: int | None = None) -> bool:
    """Whether this is the launcher: in launcher mode, the process trace-capture started, with no
    rank. Its startup hook notes its pid (ENV_LAUNCHER) for its children to recognise it."""
    return (cfg.mode == "launcher" and not env.get(ENV_OWNER)
            and env_int(RANK_VARS, None, env) is None
            and (ppid if ppid is not None else os.getppid()) == cfg.parent_pid)


def node_folder(node_rank: int) -> str:
    """The folder of one node's capture in a multi-node run folder: `node-<k>`, each node's
    `trace-capture` writing its own, so the nodes may share the run folder.

    >>> node_folder(3)
    'node-3'
    """
    return f"node-{node_rank}"


def job_id(env=os.environ) -> str | None:
    """What every rank of one launch shares and another launch does not: the rendezvous
    (torchrun's master address and port, and its run id where it has one)."""
    addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if not addr or not port:
        return None
    run = env.get("TORCHELASTIC_RUN_ID")
    return f"{addr}:{port}" + (f"/{run}" if run and run != "none" else "")


def rank_stem(rank: int, world_size: int) -> str:
    """`rank-07` for rank 7 of 16: zero-padded so that the files sort in rank order.

    >>> rank_stem(3, 2), rank_stem(7, 16)
    ('rank-3', 'rank-07')
    """
    width = len(str(max(world_size - 1, 0)))
    return f"rank-{rank:0{width}d}"


def host_trace_name(rank: int, world_size: int) -> str:
    return f"{rank_stem(rank, world_size)}.host.json.gz"


def device_trace_name(rank: int, world_size: int) -> str:
    return f"{rank_stem(rank, world_size)}.device.json.gz"


def status_name(rank: int) -> str:
    """The per-rank status file the parent folds into manifest.json and then removes."""
    return f".rank-{rank}.status.json"


def is_scratch(name: str) -> bool:
    """Files the ranks leave only while they run: status files and temporary traces."""
    return name.startswith(".rank-") or ".tmp" in name
