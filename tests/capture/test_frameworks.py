"""The training loops people use, captured unchanged: PyTorch Lightning (one process, and DDP on 2
ranks that Lightning starts itself) and HuggingFace Trainer (one process, DDP under torchrun, and
under `accelerate launch`): every rank captured, converted, validated and replayed as captured."""

from __future__ import annotations

import pytest

from chakra_tools.convert.run import convert, inputs_from_run
from chakra_tools.core.validate import validate_path
from chakra_tools.replay import AS_CAPTURED, AnalyticalBackend, default_network, replay
from chakra_tools.replay.fidelity import compare_with_manifest
from capture_helpers import BIN, EXAMPLES, run_capture

#: `accelerate launch` with every option it would otherwise warn about given
ACCELERATE = [str(BIN / "accelerate"), "launch", "--num_machines", "1", "--mixed_precision", "no",
              "--dynamo_backend", "no"]


def capture_convert_replay(tmp_path, args: list[str], ranks: int, **kw) -> dict:
    run = run_capture(["-o", "run", "--", *args], cwd=tmp_path, folder=tmp_path / "run", timeout=300,
                      **kw)
    assert run.code == 0, run.stderr[-3000:]
    m = run.manifest
    assert m["status"] == "ok" and m["world_size"] == ranks
    assert [(r["rank"], r["status"], bool(r["host_trace"])) for r in m["ranks"]] == [
        (r, "ok", True) for r in range(ranks)]
    convert(inputs_from_run(run.folder), tmp_path / "et", executor="serial")
    assert not validate_path(tmp_path / "et").errors
    result = replay(tmp_path / "et", AnalyticalBackend(default_network(ranks)), modes=AS_CAPTURED)
    fid = compare_with_manifest(result.to_dict(events=False), run.folder / "manifest.json")
    return {**fid, "manifest": m, "stderr": run.stderr}


@pytest.mark.parametrize("devices", [1, 2])
def test_lightning(tmp_path, devices):
    fid = capture_convert_replay(tmp_path, [str(EXAMPLES / "lightning_train.py"), "--steps", "6",
                                            "--devices", str(devices)], devices)
    assert len(fid["ranks"]) == devices


def test_hf_trainer_single_process(tmp_path):
    fid = capture_convert_replay(tmp_path, [str(EXAMPLES / "hf_trainer.py"), "--steps", "6"], 1)
    assert len(fid["ranks"]) == 1


def test_hf_trainer_ddp_under_torchrun(tmp_path):
    """The Trainer's small logging collectives between steps used to make one rank's converted
    sequence differ from the other's ([collective-count]); every capture now converts."""
    from capture_helpers import LAUNCH_2

    fid = capture_convert_replay(tmp_path, [*LAUNCH_2, str(EXAMPLES / "hf_trainer.py"), "--steps", "8"], 2)
    assert len(fid["ranks"]) == 2


def accelerate_env(tmp_path) -> dict:
    """No accelerate config of the user's: HF_HOME is the test's own (empty) folder."""
    pytest.importorskip("accelerate")
    return {"HF_HOME": str(tmp_path / "hf")}


def test_hf_trainer_under_accelerate_launch_multi_gpu(tmp_path):
    """`accelerate launch --multi_gpu` starts its processes through torchrun (on CPU too, gloo):
    each is a rank with RANK in its environment and captures itself (about 27 s)."""
    fid = capture_convert_replay(tmp_path, [*ACCELERATE, "--multi_gpu", "--num_processes", "2",
                                            "--main_process_port", "0", str(EXAMPLES / "hf_trainer.py"),
                                            "--steps", "8"], 2, env=accelerate_env(tmp_path))
    assert len(fid["ranks"]) == 2 and fid["manifest"]["backend"] == "gloo"


def test_hf_trainer_under_accelerate_launch_cpu(tmp_path):
    """`accelerate launch --cpu --num_processes 2` runs the script as one plain process (no rank,
    no process group: accelerate starts several CPU processes only with --mpirun_hostfile). That
    process captures as rank 0 of 1 (it used to capture nothing), and the run says that fewer
    ranks ran than the command asked for."""
    fid = capture_convert_replay(tmp_path, [*ACCELERATE, "--cpu", "--num_processes", "2",
                                            str(EXAMPLES / "hf_trainer.py"), "--steps", "6"], 1,
                                 env=accelerate_env(tmp_path))
    assert len(fid["ranks"]) == 1 and fid["manifest"]["backend"] is None
    warning = "the command asks for 2 processes, but 1 rank(s) ran"
    assert any(w.startswith(warning) for w in fid["manifest"]["warnings"])
    assert f"warning: {warning}" in fid["stderr"]


def test_hf_trainer_under_accelerate_launch_cpu_with_mpirun(tmp_path):
    """`accelerate launch --cpu --mpirun_hostfile` starts its CPU processes with mpirun: each has
    its rank in OMPI_COMM_WORLD_RANK and captures itself."""
    import shutil

    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed (Debian: apt-get install openmpi-bin)")
    (tmp_path / "hostfile").write_text("localhost slots=2\n")
    env = {**accelerate_env(tmp_path), "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    fid = capture_convert_replay(tmp_path, [*ACCELERATE, "--cpu", "--mpirun_hostfile", "hostfile",
                                            "--num_processes", "2", str(EXAMPLES / "hf_trainer.py"),
                                            "--steps", "6"], 2, env=env)
    assert len(fid["ranks"]) == 2 and not fid["manifest"]["warnings"]
