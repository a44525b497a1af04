"""The launchers people start multi-rank jobs with, each captured end to end on 2 ranks: every
rank's traces in the manifest, and the capture converts."""

from __future__ import annotations

import shutil
import sys

import pytest

from chakra_tools.convert.run import convert, inputs_from_run
from capture_helpers import EXAMPLES, MPI_SHIM, TORCHRUN, free_port, run_capture


def launchers() -> dict:
    port = free_port()
    return {
        "python -m torch.distributed.run": [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                            "--nproc-per-node", "2"],
        "torchrun, c10d rendezvous": [*TORCHRUN, "--nnodes", "1", "--nproc-per-node", "2",
                                      "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"],
        "mpirun": ["mpirun", "-n", "2", "--allow-run-as-root", "--oversubscribe",
                   "-x", f"MASTER_PORT={port}", sys.executable, "mpi_shim.py"],
    }


@pytest.mark.parametrize("launcher", ["python -m torch.distributed.run", "torchrun, c10d rendezvous", "mpirun"])
def test_each_launcher_captures_every_rank(launcher, tmp_path):
    if launcher == "mpirun" and shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed (Debian: apt-get install openmpi-bin)")
    (tmp_path / "mpi_shim.py").write_text(MPI_SHIM)
    run = run_capture(["-o", "run", "--", *launchers()[launcher], str(EXAMPLES / "ddp.py"), "--steps", "6"],
                      cwd=tmp_path, folder=tmp_path / "run", timeout=240)
    assert run.code == 0, run.stderr[-3000:]
    m = run.manifest
    assert m["status"] == "ok" and m["world_size"] == 2
    assert [(r["rank"], r["status"], bool(r["host_trace"]), bool(r["device_trace"])) for r in m["ranks"]] == [
        (0, "ok", True, True), (1, "ok", True, True)]
    report = convert(inputs_from_run(run.folder), tmp_path / "et", executor="serial")
    assert report.rankset.ranks == [0, 1]
