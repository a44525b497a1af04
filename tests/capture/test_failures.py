"""A script that raises, a rank that dies, Ctrl-C: the finished steps' traces are still valid,
the manifest says what happened and the exit code is the script's."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from capture_helpers import (EXAMPLES, LAUNCH_2, capture_cmd, device_steps, host_steps, load_gz,
                      run_capture)


def test_raise_after_the_window(tmp_path):
    out = tmp_path / "run"
    run = run_capture(["--out", str(out), str(EXAMPLES / "mlp.py"), "--steps", "8",
                       "--fail-at", "5"], tmp_path, out)
    assert run.code == 1
    assert "failing on purpose" in run.stderr  # the script's traceback is shown
    m = run.manifest
    assert m["status"] == "script-error" and m["exit_code"] == 1
    assert "RuntimeError: failing on purpose at step 5" in m["error"]
    assert m["captured_steps"] == [2, 3]
    assert len(m["ranks"][0]["step_times_ns"]) == 5  # steps 0-4 finished
    assert host_steps(run.host(0)) == device_steps(run.device(0)) == [2, 3]


@pytest.mark.slow
def test_raise_inside_the_window(tmp_path):
    """Step 3 raises while the profiler records: step 2 is captured, the files are valid."""
    out = tmp_path / "run"
    run = run_capture(["--out", str(out), str(EXAMPLES / "mlp.py"), "--steps", "8",
                       "--fail-at", "3"], tmp_path, out)
    assert run.code == 1
    m = run.manifest
    assert m["status"] == "script-error" and m["captured_steps"] == [2]
    assert m["ranks"][0]["captured_steps"] == [2]
    assert 2 in host_steps(run.host(0)) and 2 in device_steps(run.device(0))
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "rank-0.device.json.gz",
                                                     "rank-0.host.json.gz"]


@pytest.mark.slow
def test_rank_failure(tmp_path):
    """Rank 1 raises at step 5 of DDP: rank-failed, rank 1 named as the cause, traces kept."""
    out = tmp_path / "run"
    run = run_capture(["--out", str(out), "--", *LAUNCH_2, str(EXAMPLES / "ddp.py"),
                       "--steps", "8", "--fail-rank", "1", "--fail-at", "5"], tmp_path, out)
    assert run.code != 0
    m = run.manifest
    assert m["status"] == "rank-failed" and m["exit_code"] == run.code
    assert m["error"].startswith("rank 1: RuntimeError: rank 1 failing on purpose")
    assert m["ranks"][1]["status"] == "script-error"
    assert m["ranks"][0]["status"] in ("script-error", "terminated")
    assert m["captured_steps"] == [2, 3]
    for rank in (0, 1):
        assert host_steps(run.host(rank)) == [2, 3]
        assert len(m["ranks"][rank]["step_times_ns"]) == 5


def test_exit_code_and_argv_are_the_scripts(tmp_path):
    script = tmp_path / "argv.py"
    script.write_text("import os, sys, json\n"
                      "json.dump({'argv': sys.argv, 'name': __name__, 'cwd': os.getcwd()},"
                      " open('seen.json', 'w'))\n"
                      "sys.exit(3)\n")
    out = tmp_path / "run"
    run = run_capture(["--out", str(out), str(script), "a b", "--flag"], tmp_path, out)
    assert run.code == 3
    import json
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {"argv": [str(script), "a b", "--flag"], "name": "__main__",
                    "cwd": str(tmp_path)}
    m = run.manifest
    assert m["status"] == "script-error" and m["exit_code"] == 3
    # no exception (the script chose its exit code), and no step: the rank says the latter
    assert m["ranks"][0]["status"] == "no-step" and m["ranks"][0]["error"].startswith("captured no step")
    assert m["captured_steps"] == [] and m["ranks"][0]["host_trace"] is None


def _ctrl_c(args: list[str], out, written: str, within_s: float) -> tuple[int, str]:
    """trace-capture --out OUT ARGS in its own session; once OUT/`written` exists, SIGINT to the
    whole process group, as a terminal sends it: (exit code, stderr)."""
    # a terminal's foreground job takes Ctrl-C: SIGINT at its default, whatever the test run
    # inherited (a shell starts background jobs with SIGINT ignored, which exec passes on to the
    # launcher and the script it starts: the script would never stop)
    proc = subprocess.Popen([*capture_cmd(), "--out", str(out), *args], cwd=out.parent, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + within_s
        while not (out / written).exists() and time.time() < deadline:
            time.sleep(0.2)
        assert (out / written).exists()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, err


def test_ctrl_c(tmp_path):
    """SIGINT to the whole process group, as a terminal sends it, after the window closed."""
    script = tmp_path / "long.py"
    script.write_text("import time, torch\n"
                      "m = torch.nn.Linear(8, 8); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                      "while True:\n"
                      "    m(torch.randn(4, 8)).sum().backward(); o.step(); time.sleep(0.01)\n")
    out = tmp_path / "run"
    code, err = _ctrl_c([str(script)], out, "rank-0.host.json.gz", 60)
    assert code == 130, err[-2000:]
    assert "Traceback" not in err and "interrupted" in err  # one line, not a traceback per rank
    import json
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["exit_code"] == 130
    assert m["ranks"][0]["status"] == "interrupted" and m["captured_steps"] == [2, 3]
    assert len(m["ranks"][0]["step_times_ns"]) >= 4
    assert host_steps(load_gz(out / "rank-0.host.json.gz")) == [2, 3]


NO_OPTIMIZER = """
import torch
model = torch.nn.Linear(8, 8)
for _ in range(6):
    model(torch.randn(4, 8)).sum().backward()
print("trained")
"""


@pytest.mark.parametrize("script,steps,says", [
    (NO_OPTIMIZER, [], "chakra_tools.capture.step()"),
    (str(EXAMPLES / "mlp.py"), 2, "ended 2 step(s), the capture window is steps 2..3"),
])
def test_a_run_that_captures_no_step_says_so_and_fails(tmp_path, script, steps, says):
    """A script that steps no optimizer (or too few steps for the window) ran fine but captured
    nothing: the manifest says `no-step`, trace-capture says how to mark steps and exits 2."""
    if steps == []:
        (tmp_path / "train.py").write_text(script)
        args = ["train.py"]
    else:
        args = [script, "--steps", str(steps)]
    out = tmp_path / "run"
    run = run_capture(["--out", str(out), *args], tmp_path, out)
    assert run.code == 2 and says in run.stderr, run.stderr
    m = run.manifest
    assert m["status"] == "no-step" and m["exit_code"] == 0 and says in m["error"]
    assert m["ranks"][0]["status"] == "no-step" and m["ranks"][0]["host_trace"] is None
    assert m["captured_steps"] == [] and sorted(p.name for p in out.iterdir()) == ["manifest.json"]


def test_a_run_that_ends_inside_the_window_says_how_many_steps_it_captured(tmp_path):
    """The window is steps 2..3; the script ends after step 2: the one step converts, and both the
    console and the manifest say it is one of the two asked for."""
    out = tmp_path / "run"
    run = run_capture(["--out", str(out), str(EXAMPLES / "mlp.py"), "--steps", "3"], tmp_path, out)
    assert run.code == 0, run.stderr
    m = run.manifest
    assert m["status"] == "ok" and m["captured_steps"] == [2]
    says = "captured 1 of the 2 steps asked for (--active)"
    assert says in run.stderr and any(says in w for w in m["warnings"])


@pytest.mark.slow
def test_ctrl_c_under_torchrun_ends_in_a_line_per_process(tmp_path):
    """Ctrl-C on `trace-capture -- torchrun ...`: each rank and the launcher say one line (torchrun's
    SignalException traceback, 30 lines, is kept off the console), trace-capture exits 130."""
    out = tmp_path / "run"
    code, err = _ctrl_c(["--", *LAUNCH_2, str(EXAMPLES / "ddp.py"), "--steps", "100000"], out,
                        "rank-1.host.json.gz", 120)
    assert code == 130, err[-2000:]
    assert "Traceback" not in err and "SignalException" not in err, err[-3000:]
    assert "torchrun: interrupted" in err and "trace-capture: interrupted" in err
