"""A rank that ran but was not captured makes the run an error, whichever way the rank was
started: by torchrun, by mpirun, or by the script itself (as PyTorch Lightning and
torch.multiprocessing start theirs). Each case starts rank 1 without the capture's startup hook
(PYTHONPATH removed, as a launcher that cleans the environment would): the captured rank knows
the world size, the manifest names rank 1 `missing`, the run is `rank-failed`, and
trace-capture exits 2 although the command exited 0."""

from __future__ import annotations

import shutil
import sys
import textwrap

import pytest

from capture_helpers import EXAMPLES, MPI_SHIM, TORCHRUN, free_port, run_capture

#: runs the rest of its command line, without the startup hook on rank 1
NO_HOOK_ON_RANK_1 = textwrap.dedent("""\
    #!/bin/sh
    if [ "${RANK:-$OMPI_COMM_WORLD_RANK}" = 1 ]; then unset PYTHONPATH; fi
    exec "$@"
""")

#: starts its own rank 1, as Lightning's subprocess launcher does, but with a cleaned environment
OWN_RANKS = textwrap.dedent("""
    import os, subprocess, sys
    import torch, torch.distributed as dist
    peer = None
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        peer = subprocess.Popen([sys.executable, __file__, *sys.argv[1:]], env={**env, "RANK": "1"})
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    sys.exit(peer.wait() if peer else 0)
""")


def command(how: str, tmp_path) -> list[str]:
    wrapper = tmp_path / "no_hook_on_rank_1.sh"
    wrapper.write_text(NO_HOOK_ON_RANK_1)
    wrapper.chmod(0o755)
    ddp = [str(EXAMPLES / "ddp.py"), "--steps", "5"]
    if how == "torchrun":
        return [*TORCHRUN, "--standalone", "--nproc-per-node", "2", "--no-python", str(wrapper),
                sys.executable, *ddp]
    if how == "mpirun":
        (tmp_path / "mpi_shim.py").write_text(MPI_SHIM)
        return ["mpirun", "-n", "2", "--allow-run-as-root", "--oversubscribe", "-x",
                f"MASTER_PORT={free_port()}", str(wrapper), sys.executable, "mpi_shim.py", *ddp]
    (tmp_path / "own_ranks.py").write_text(OWN_RANKS)
    return ["own_ranks.py", str(free_port())]


@pytest.mark.parametrize("how", ["torchrun", "mpirun", "the script"])
def test_a_rank_that_ran_uncaptured_fails_the_run(tmp_path, how):
    if how == "mpirun" and shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed (Debian: apt-get install openmpi-bin)")
    out = tmp_path / "run"
    run = run_capture(["--out", str(out), "--", *command(how, tmp_path)], tmp_path, out, timeout=240)
    m = run.manifest
    assert m["exit_code"] == 0 and run.code == 2, run.stderr[-3000:]
    assert m["status"] == "rank-failed" and m["world_size"] == 2
    assert [(r["rank"], r["status"]) for r in m["ranks"]] == [(0, "ok"), (1, "missing")]
    assert m["ranks"][0]["host_trace"] and m["error"].startswith("rank 1: no status")
    assert "rank-failed" in run.stderr
