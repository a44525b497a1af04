"""Bad input: a clear message naming the problem, a non-zero exit, nothing written."""

from __future__ import annotations

import pytest

from capture_helpers import EXAMPLES, TORCHRUN, run_capture


def assert_refused(run, *words):
    assert run.code != 0
    assert "Traceback" not in run.stderr
    for w in words:
        assert w in run.stderr, run.stderr


def nothing_written(tmp_path, keep=()):
    return sorted(p.name for p in tmp_path.iterdir() if p.name not in keep) == []


def test_missing_script(tmp_path):
    run = run_capture(["nope.py"], tmp_path)
    assert_refused(run, "nope.py", "no such script")
    assert nothing_written(tmp_path)


def test_not_python(tmp_path):
    (tmp_path / "notes.txt").write_text("this is not python at all {\n")
    run = run_capture(["notes.txt"], tmp_path)
    assert_refused(run, "notes.txt", "not a Python script")
    assert nothing_written(tmp_path, keep={"notes.txt"})


def test_python_with_syntax_error(tmp_path):
    (tmp_path / "broken.py").write_text("def f(:\n")
    run = run_capture(["broken.py"], tmp_path)
    assert_refused(run, "broken.py", "line 1")
    assert nothing_written(tmp_path, keep={"broken.py"})


def test_binary_file(tmp_path):
    (tmp_path / "blob.py").write_bytes(b"\x7fELF\x00\x01\x02")
    run = run_capture(["blob.py"], tmp_path)
    assert_refused(run, "blob.py", "not a Python script")


def test_missing_launcher(tmp_path):
    run = run_capture(["--", "no-such-launcher", "--nproc-per-node", "2", "x.py"], tmp_path)
    assert_refused(run, "no-such-launcher", "PATH")
    assert nothing_written(tmp_path)


def test_launcher_with_missing_script(tmp_path):
    run = run_capture(["--", *TORCHRUN, "--nproc-per-node", "2", "missing.py"], tmp_path)
    assert_refused(run, "missing.py")
    assert nothing_written(tmp_path)


def test_missing_module(tmp_path):
    run = run_capture(["-m", "no_such_module_xyz"], tmp_path)
    assert_refused(run, "no_such_module_xyz")
    assert nothing_written(tmp_path)


def test_no_script(tmp_path):
    run = run_capture([], tmp_path)
    assert_refused(run, "no script given")


def test_output_folder_not_writable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    run = run_capture(["--out", str(blocker / "run"), str(EXAMPLES / "mlp.py")], tmp_path)
    assert_refused(run, "not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_output_folder_unwritable_filesystem(tmp_path):
    run = run_capture(["--out", "/proc/chakra-run", str(EXAMPLES / "mlp.py")], tmp_path)
    assert_refused(run, "/proc/chakra-run")
    assert nothing_written(tmp_path)


def test_existing_run_folder(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    run = run_capture(["--out", str(out), str(EXAMPLES / "mlp.py")], tmp_path)
    assert_refused(run, "exists", "--force")
    assert (out / "manifest.json").read_text() == "{}"


def test_force_refuses_a_folder_that_is_no_run(tmp_path):
    out = tmp_path / "home"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    run = run_capture(["--out", str(out), "--force", str(EXAMPLES / "mlp.py")], tmp_path)
    assert_refused(run, "--force replaces only a run folder")
    assert (out / "precious.txt").read_text() == "keep me"


@pytest.mark.slow
def test_force_replaces_a_run_folder(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    (out / "rank-0.host.json.gz").write_text("old")
    run = run_capture(["--out", str(out), "--force", str(EXAMPLES / "mlp.py"), "--steps", "4"],
                      tmp_path, out)
    assert run.code == 0, run.stderr
    assert run.manifest["status"] == "ok"
    assert (out / "rank-0.host.json.gz").read_bytes()[:2] == b"\x1f\x8b"


@pytest.mark.parametrize("opt,value", [("--active", "0"), ("--wait", "-1")])
def test_bad_schedule(tmp_path, opt, value):
    run = run_capture([opt, value, str(EXAMPLES / "mlp.py")], tmp_path)
    assert_refused(run, opt)
    assert nothing_written(tmp_path)
