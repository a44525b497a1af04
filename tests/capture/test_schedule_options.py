"""--wait/--warmup/--active choose the captured steps; --no-ddp-hook leaves DDP's all-reduce alone."""

from __future__ import annotations

from capture_helpers import EXAMPLES, LAUNCH_2, device_steps, host_annotations, host_steps, run_capture


def test_warmup_zero_captures_the_step_after_wait(tmp_path):
    out = tmp_path / "run"
    run = run_capture(["--out", str(out), "--wait", "2", "--warmup", "0", "--active", "1",
                       str(EXAMPLES / "mlp.py"), "--steps", "5"], tmp_path, out)
    assert run.code == 0, run.stderr
    assert run.manifest["captured_steps"] == [2]
    assert run.manifest["schedule"] == {"wait": 2, "warmup": 0, "active": 1}
    assert host_steps(run.host(0)) == [2] and device_steps(run.device(0)) == [2]


def test_no_ddp_hook_leaves_the_gradient_all_reduce_unannotated(tmp_path):
    out = tmp_path / "run"
    run = run_capture(["--out", str(out), "--no-ddp-hook", "--", *LAUNCH_2, str(EXAMPLES / "ddp.py"),
                       "--steps", "5"], tmp_path, out)
    assert run.code == 0, run.stderr
    for rank in (0, 1):
        names = host_annotations(run.host(rank))
        # DDP's own C++ all-reduce is still in the trace, but nothing annotated it
        assert not any('all_reduce' in n for n in names), names
        assert run.manifest["ranks"][rank]["annotated_calls"] == 0
