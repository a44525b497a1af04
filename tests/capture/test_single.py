"""Capture the MLP example for real, single process: files, manifest, step times, same steps in
both traces."""

from __future__ import annotations

import json
import socket

from capture_helpers import device_steps, host_steps

FIELDS = ("format", "tool_version", "torch_version", "command", "cwd", "host", "started",
          "finished", "status", "exit_code", "error", "world_size", "backend", "process_groups",
          "schedule", "captured_steps", "ranks")


def test_exit_code_and_output(mlp_run):
    assert mlp_run.code == 0, mlp_run.stderr
    assert "mlp: 6 steps" in mlp_run.stdout  # the script's own output passes through
    assert "captured steps [2, 3]" in mlp_run.stderr


def test_files(mlp_run):
    names = sorted(p.name for p in mlp_run.folder.iterdir())
    assert names == ["manifest.json", "rank-0.device.json.gz", "rank-0.host.json.gz"]


def test_manifest_fields(mlp_run):
    m = mlp_run.manifest
    assert all(k in m for k in FIELDS), [k for k in FIELDS if k not in m]
    assert m["format"] == "chakra-tools-capture/1"
    assert m["status"] == "ok" and m["exit_code"] == 0 and m["error"] is None
    assert m["world_size"] == 1 and m["backend"] is None and m["process_groups"] == []
    assert m["schedule"] == {"wait": 1, "warmup": 1, "active": 2}
    assert m["captured_steps"] == [2, 3]
    assert m["command"][-2:] == ["--steps", "6"] and m["command"][0].endswith("mlp.py")
    assert m["host"] == socket.gethostname()
    assert m["torch_version"].startswith("2.")
    assert m["started"] <= m["finished"]


def test_rank_entry(mlp_run):
    (rank,) = mlp_run.manifest["ranks"]
    assert rank["rank"] == 0 and rank["status"] == "ok"
    assert rank["host_trace"] == "rank-0.host.json.gz"
    assert rank["device_trace"] == "rank-0.device.json.gz"
    assert rank["device"]["type"] == "cpu" and rank["device"]["logical_cpus"] >= 1


def test_step_times_cover_every_step(mlp_run):
    times = mlp_run.manifest["ranks"][0]["step_times_ns"]
    assert len(times) == 6
    assert all(1_000 < t < 10_000_000_000 for t in times), times


def test_step_wall_clock_starts_follow_the_step_times(mlp_run):
    """Each step starts after the previous one ended (on the wall clock shared by the ranks)."""
    rank = mlp_run.manifest["ranks"][0]
    starts, times = rank["step_starts_unix_ns"], rank["step_times_ns"]
    assert len(starts) == len(times) == 6
    assert all(starts[i] + times[i] <= starts[i + 1] + 1_000_000 for i in range(5)), (starts, times)
    assert abs(starts[0] / 1e9 - __import__("time").time()) < 3600


def test_host_and_device_cover_the_same_steps(mlp_run):
    assert host_steps(mlp_run.host(0)) == [2, 3]
    assert device_steps(mlp_run.device(0)) == [2, 3]


def test_host_trace_is_a_complete_graph(mlp_run):
    """Every parent a node names was written (the observer ran through the profiler)."""
    nodes = mlp_run.host(0)["nodes"]
    ids = {n["id"] for n in nodes}
    assert len(nodes) > 100
    orphans = [n["name"] for n in nodes if n["ctrl_deps"] not in ids
               and not n["name"].startswith("[pytorch|")]
    assert orphans == []
    assert any(n["name"] == "aten::addmm" for n in nodes)


def test_device_trace_has_the_ops(mlp_run):
    events = mlp_run.device(0)["traceEvents"]
    assert any(e.get("cat") == "cpu_op" and e["name"] == "aten::addmm" for e in events)
    json.dumps(events)  # plain JSON values only


def test_module_with_explicit_steps(tmp_path):
    """`-m MODULE`, no optimizer: steps come from capture.step() and capture.step_scope()."""
    from capture_helpers import run_capture

    (tmp_path / "train_mod.py").write_text(
        "import torch\n"
        "from chakra_tools import capture\n"
        "w = torch.randn(32, 32, requires_grad=True)\n"
        "for i in range(3):\n"
        "    (w @ w).sum().backward()\n"
        "    capture.step()\n"
        "for i in range(2):\n"
        "    with capture.step_scope():\n"
        "        (w @ w).sum().backward()\n"
        "print('module ran as', __name__, capture.is_capturing())\n")
    out = tmp_path / "run"
    run = run_capture(["--out", str(out), "--wait", "0", "-m", "train_mod"], tmp_path, out)
    assert run.code == 0, run.stderr
    assert "module ran as __main__ True" in run.stdout
    m = run.manifest
    assert m["command"] == ["-m", "train_mod"] and m["captured_steps"] == [1, 2]
    assert len(m["ranks"][0]["step_times_ns"]) == 5
    assert host_steps(run.host(0)) == device_steps(run.device(0)) == [1, 2]


def test_a_shadowed_sitecustomize_still_runs(tmp_path):
    """Our startup hook is a sitecustomize first on PYTHONPATH; the site's own still runs."""
    import os

    from capture_helpers import run_capture

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['SITE_RAN'] = 'yes'\n")
    (tmp_path / "show.py").write_text("import os\nprint('site ran:', os.environ.get('SITE_RAN'))\n")
    out = tmp_path / "run"
    env_path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    run = run_capture(["--out", str(out), "show.py"], tmp_path, out,
                      env={**os.environ, "PYTHONPATH": env_path, "OMP_NUM_THREADS": "1"})
    assert "site ran: yes" in run.stdout
    # and the capture hook ran too: it found that the script ends no step
    assert run.code == 2 and run.manifest["ranks"][0]["status"] == "no-step", run.stderr
