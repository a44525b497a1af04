"""Helpers of the capture tests: running trace-capture for real and reading what it wrote.
(A module of its own, not conftest.py: several test folders have a conftest.)"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
BIN = Path(sys.executable).parent
TORCHRUN = [str(BIN / "torchrun")] if (BIN / "torchrun").exists() else \
    [sys.executable, "-m", "torch.distributed.run"]
LAUNCH_2 = [*TORCHRUN, "--standalone", "--nproc-per-node", "2"]

#: `python mpi_shim.py SCRIPT ARGS` under mpirun: an MPI job has its ranks in OMPI_* variables;
#: c10d's env:// wants them as RANK / WORLD_SIZE
MPI_SHIM = textwrap.dedent("""
    import os, runpy, sys
    os.environ.setdefault("RANK", os.environ["OMPI_COMM_WORLD_RANK"])
    os.environ.setdefault("WORLD_SIZE", os.environ["OMPI_COMM_WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
""")


@dataclass
class Run:
    """One finished trace-capture invocation."""

    code: int
    stdout: str
    stderr: str
    folder: Path

    @property
    def manifest(self) -> dict:
        return json.loads((self.folder / "manifest.json").read_text())

    def host(self, rank: int) -> dict:
        return load_gz(self.folder / self.manifest["ranks"][rank]["host_trace"])

    def device(self, rank: int) -> dict:
        return load_gz(self.folder / self.manifest["ranks"][rank]["device_trace"])


def free_port() -> int:
    """A TCP port nobody listens on now (a rendezvous endpoint for a test's launcher)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_gz(path: Path) -> dict:
    """Strict JSON: a trace that needs repairs to parse is a failure."""
    with gzip.open(path, "rt") as f:
        return json.load(f)


def capture_cmd() -> list[str]:
    script = BIN / "trace-capture"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from chakra_tools.cli.main import capture_main; capture_main()"]


#: what libstdc++ prints when torch 2.13's gloo aborts a rank in interpreter teardown, after the
#: script and the capture have finished (pytorch/pytorch#179291: gloo's worker threads free
#: tensors once Python is gone). Seen about once in a few hundred DDP runs, never reproduced at
#: will; not this project's code, so a run that dies of it alone is run again, once.
TEARDOWN_ABORT = "terminate called without an active exception"


def run_capture(args: list[str], cwd: Path, folder: Path | None = None, timeout: int = 120,
                **kw) -> Run:
    """trace-capture ARGS in `cwd`; `folder` is the run folder the test expects."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.update(kw.pop("env", {}))
    for attempt in (1, 2):
        proc = subprocess.run([*capture_cmd(), *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout, **kw)
        run = Run(proc.returncode, proc.stdout, proc.stderr, folder or cwd)
        if run.code == 0 or TEARDOWN_ABORT not in run.stderr or attempt == 2 or folder is None:
            return run
        shutil.rmtree(folder, ignore_errors=True)
    return run


def host_steps(doc: dict) -> list[int]:
    return sorted(int(n["name"].split("#")[1]) for n in doc["nodes"]
                  if n["name"].startswith("ProfilerStep#"))


def device_steps(doc: dict) -> list[int]:
    return sorted(int(e["name"].split("#")[1]) for e in doc["traceEvents"]
                  if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#"))


def host_annotations(doc: dict) -> list[str]:
    return [n["name"] for n in doc["nodes"] if n["name"].startswith("chakra_tools.comm:")]


def device_annotations(doc: dict) -> list[str]:
    return [e["name"] for e in doc["traceEvents"]
            if e.get("ph") == "X" and e.get("name", "").startswith("chakra_tools.comm:")]
