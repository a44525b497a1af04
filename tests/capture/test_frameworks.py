"""The training loops people use, captured unchanged: PyTorch Lightning (one process, and DDP on 2
ranks that Lightning starts itself) and HuggingFace Trainer (one process): every rank captured,
converted, validated and replayed as captured."""

from __future__ import annotations

import pytest

from chakra_tools.convert.run import convert, inputs_from_run
from chakra_tools.core.validate import validate_path
from chakra_tools.replay import AS_CAPTURED, AnalyticalBackend, default_network, replay
from chakra_tools.replay.fidelity import compare_with_manifest
from capture_helpers import EXAMPLES, run_capture


def capture_convert_replay(tmp_path, args: list[str], ranks: int) -> dict:
    run = run_capture(["-o", "run", "--", *args], cwd=tmp_path, folder=tmp_path / "run", timeout=300)
    assert run.code == 0, run.stderr[-3000:]
    m = run.manifest
    assert m["status"] == "ok" and m["world_size"] == ranks
    assert [(r["rank"], r["status"], bool(r["host_trace"])) for r in m["ranks"]] == [
        (r, "ok", True) for r in range(ranks)]
    convert(inputs_from_run(run.folder), tmp_path / "et", executor="serial")
    assert not validate_path(tmp_path / "et").errors
    result = replay(tmp_path / "et", AnalyticalBackend(default_network(ranks)), modes=AS_CAPTURED)
    return compare_with_manifest(result.to_dict(events=False), run.folder / "manifest.json")


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
