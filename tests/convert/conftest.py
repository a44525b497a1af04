"""Inputs of the converter tests: the real fixtures (unpacked), a run traced with plain
torch.profiler (convert_workload.py), and runs captured with trace-capture from examples/.

Traced runs are session-scoped: each costs a few seconds of two processes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from torch_jobs import run_torch_job

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


@pytest.fixture(scope="session")
def dlrm(unpack) -> list[tuple[Path, Path]]:
    """(host, device) of the 8 DLRM ranks, in rank order."""
    hosts = unpack("param/dlrm_8rank_host_et.tar.gz")
    devs = unpack("param/dlrm_8rank_kineto.tar.gz")
    pairs = []
    for r in range(8):
        host = next(hosts.rglob(f"dlrm_eg_{r}.json"))
        dev = next(devs.rglob(f"worker{r}_step_12.*.json"))
        pairs.append((host, dev))
    return pairs


@pytest.fixture(scope="session")
def chakra_102(unpack) -> Path:
    folder = unpack("chakra/host_et_1.0.2_allgather_2rank.tgz")
    return next(p for p in folder.rglob("1.0.2-chakra.0.0.4.json") if not p.name.startswith("._"))


@pytest.fixture(scope="session")
def raw_run(tmp_path_factory) -> Path:
    """workload.py traced on 2 gloo ranks: host-<r>.json and device-<r>.json."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("raw_run")
    proc = run_torch_job([sys.executable, str(HERE / "convert_workload.py"), str(out)], timeout=240)
    if proc.returncode != 0:
        pytest.fail(f"convert_workload.py failed:\n{proc.stderr[-3000:]}")
    return out


def _trace_capture(tmp_path_factory, name: str, script: str, *args: str, ranks: int = 2) -> Path:
    pytest.importorskip("torch")
    exe = Path(sys.executable).parent / "trace-capture"
    torchrun = Path(sys.executable).parent / "torchrun"
    if not exe.exists() or not torchrun.exists() or not (REPO / "examples" / script).exists():
        pytest.skip("trace-capture or the example is not installed")
    out = tmp_path_factory.mktemp(name) / "run"
    # --standalone: a free port each, not torchrun's fixed 29500, which two workers of the
    # suite (pytest -n 2) launching at once would share
    launcher = [str(torchrun), "--standalone", "--nproc-per-node", str(ranks)] if ranks > 1 else []
    proc = run_torch_job([str(exe), "-o", str(out), "--", *launcher, str(REPO / "examples" / script), *args],
                         output=out, timeout=300, cwd=REPO)
    if proc.returncode != 0 or not (out / "manifest.json").exists():
        pytest.fail(f"trace-capture {script} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return out


@pytest.fixture(scope="session")
def collectives_run(tmp_path_factory) -> Path:
    return _trace_capture(tmp_path_factory, "collectives", "collectives.py", "--steps", "4")


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory) -> Path:
    return _trace_capture(tmp_path_factory, "ddp", "ddp.py", "--steps", "5")


@pytest.fixture(scope="session")
def mlp_run(tmp_path_factory) -> Path:
    return _trace_capture(tmp_path_factory, "mlp", "mlp.py", "--steps", "4", ranks=1)


@pytest.fixture(scope="session")
def pipeline_run(tmp_path_factory) -> Path:
    return _trace_capture(tmp_path_factory, "pipeline", "pipeline.py", "--steps", "4")


@pytest.fixture(scope="session")
def pipeline_dp_run(tmp_path_factory) -> Path:
    """examples/pipeline.py --stages 2 on 2 ranks: 2 stages, one replica with its gradient
    all-reduce on a group of one (as DDP at one rank)."""
    return _trace_capture(tmp_path_factory, "pipeline_dp", "pipeline.py", "--steps", "4", "--stages", "2")


@pytest.fixture(scope="session")
def tp_dp_run(tmp_path_factory) -> Path:
    """examples/tensor_parallel.py on 4 ranks as 2 tensor-parallel x 2 data-parallel."""
    return _trace_capture(tmp_path_factory, "tp_dp", "tensor_parallel.py", "--steps", "3", "--tp", "2", ranks=4)
