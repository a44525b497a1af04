"""Helpers of the capture tests: running trace-capture for real and reading what it wrote.
(A module of its own, not conftest.py: several test folders have a conftest.)"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from torch_jobs import run_torch_job

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


def run_capture(args: list[str], cwd: Path, folder: Path | None = None, timeout: int = 120,
                **kw) -> Run:
    """trace-capture ARGS in `cwd`; `folder` is the run folder the test expects (a run that died
    of gloo's teardown abort alone is run again once, when the folder is known)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.update(kw.pop("env", {}))
    cmd = [*capture_cmd(), *args]
    if folder is None:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **kw)
    else:
        proc = run_torch_job(cmd, output=folder, cwd=cwd, env=env, timeout=timeout, **kw)
    return Run(proc.returncode, proc.stdout, proc.stderr, folder or cwd)


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
