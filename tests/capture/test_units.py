"""The torch-free parts: command parsing, rank file names, activation rule, the run status, and
the annotation format (round trip, and safe inside an unescaped JSON string)."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chakra_tools.capture import command, manifest, protocol
from chakra_tools.core.annotations import format_annotation, parse_annotation
from chakra_tools.core.errors import InputError
from capture_helpers import EXAMPLES, TORCHRUN


def test_rank_names_sort():
    names = [protocol.host_trace_name(r, 12) for r in range(12)]
    assert names[0] == "rank-00.host.json.gz" and names == sorted(names)
    assert protocol.device_trace_name(1, 2) == "rank-1.device.json.gz"


def test_script_runs_directly():
    cmd = command.parse_command([str(EXAMPLES / "mlp.py"), "--steps", "3"])
    assert cmd.mode == "direct" and cmd.name == "mlp"
    assert cmd.argv == [sys.executable, str(EXAMPLES / "mlp.py"), "--steps", "3"]


def test_module_runs_directly():
    cmd = command.parse_command(["-m", "json.tool", "x"])
    assert cmd.mode == "direct" and cmd.argv == [sys.executable, "-m", "json.tool", "x"]


def test_torchrun_is_a_launcher():
    cmd = command.parse_command([*TORCHRUN, "--nproc-per-node", "2", str(EXAMPLES / "ddp.py")])
    assert cmd.mode == "launcher" and cmd.name == "ddp"
    assert cmd.argv[:len(TORCHRUN)] == TORCHRUN


def test_python_m_torch_distributed_run_is_a_launcher():
    cmd = command.parse_command([sys.executable, "-m", "torch.distributed.run",
                                str(EXAMPLES / "ddp.py")])
    assert cmd.mode == "launcher" and cmd.name == "ddp"


@pytest.mark.parametrize("words,message", [([], "no script given"),
                                           (["-m"], "needs a module"),
                                           (["-m", "1bad"], "not a module name"),
                                           (["--frobnicate", "x.py"], "unknown option")])
def test_bad_commands(words, message):
    with pytest.raises(InputError, match=message):
        command.parse_command(words)


def test_activation_rule():
    cfg = protocol.CaptureConfig(out_dir="/x", parent_pid=10, mode="direct")
    assert protocol.should_activate(cfg, env={}, ppid=10)
    assert not protocol.should_activate(cfg, env={}, ppid=11)  # a grandchild
    assert not protocol.should_activate(cfg, env={protocol.ENV_OWNER: "5"}, ppid=10)
    cfg.mode = "launcher"
    assert protocol.should_activate(cfg, env={"RANK": "3"}, ppid=99)
    assert not protocol.should_activate(cfg, env={}, ppid=10)  # torchrun's agent
    assert protocol.should_activate(cfg, env={"OMPI_COMM_WORLD_RANK": "0"}, ppid=1)


def test_a_launchers_rankless_child_is_its_only_worker():
    """accelerate launch (no torchrun, no mpirun) runs the script as one process with no rank:
    the launcher notes its pid, its rankless child captures; the launcher, its grandchildren
    and a rank-holding worker's own children do not take that place."""
    cfg = protocol.CaptureConfig(out_dir="/x", parent_pid=10, mode="launcher")
    assert protocol.is_launcher(cfg, env={}, ppid=10)
    assert not protocol.is_launcher(cfg, env={"RANK": "0"}, ppid=10)
    assert not protocol.is_launcher(cfg, env={}, ppid=11)
    launched = {protocol.ENV_LAUNCHER: "20"}
    assert protocol.should_activate(cfg, env=launched, ppid=20)
    assert not protocol.should_activate(cfg, env=launched, ppid=21)  # a grandchild
    assert not protocol.should_activate(cfg, env={**launched, protocol.ENV_OWNER: "20"}, ppid=20)
    # a multiprocessing worker the launcher spawned is handed its rank later: it follows
    spawned = ["-c", protocol.SPAWNED_ARG]
    assert not protocol.should_activate(cfg, env=launched, ppid=20, argv=spawned)
    assert protocol.should_follow(env=launched, ppid=20, argv=spawned)
    assert not protocol.should_follow(env=launched, ppid=20, argv=["train.py"])
    assert not protocol.should_follow(env=launched, ppid=21, argv=spawned)
    assert protocol.should_follow(env={protocol.ENV_OWNER: "7"}, ppid=1, argv=["train.py"])
    cfg.mode = "direct"
    assert not protocol.is_launcher(cfg, env={}, ppid=10)


@pytest.mark.parametrize("argv,asked", [
    (["accelerate", "launch", "--num_processes", "2", "--cpu", "t.py", "-n", "9"], 2),
    (["accelerate", "launch", "--num-processes=3", "t.py"], 3),
    (["torchrun", "--standalone", "--nproc-per-node", "4", "t.py"], 4),
    (["mpirun", "-np", "2", "python", "t.py"], 2),
    (["torchrun", "--standalone", "t.py", "--nproc-per-node", "4"], None),  # the script's option
])
def test_requested_processes(argv, asked):
    assert command.requested_processes(argv) == asked


def test_fewer_ranks_than_asked_is_said():
    argv = ["accelerate", "launch", "--num_processes", "2", "--cpu", "t.py"]
    assert "--mpirun_hostfile" in command.fewer_ranks_warning(argv, 1)
    assert command.fewer_ranks_warning(argv, 2) is None
    assert "accelerate" not in command.fewer_ranks_warning(["torchrun", "--nproc-per-node", "2", "t.py"], 1)


def _ranks(*states):
    return [{"rank": i, "status": s, "error": None if s == "ok" else "boom"}
            for i, s in enumerate(states)]


@pytest.mark.parametrize("states,code,interrupted,expected", [
    (("ok",), 0, False, "ok"),
    (("ok",), 3, False, "script-error"),
    (("script-error",), 1, False, "script-error"),
    (("interrupted",), 130, False, "interrupted"),
    (("ok",), 0, True, "interrupted"),
    (("ok", "script-error"), 1, False, "rank-failed"),
    (("ok", "missing"), 1, False, "rank-failed"),
    (("ok", "ok"), 1, False, "script-error"),
    (("no-step",), 0, False, "no-step"),
    (("ok", "no-step"), 0, False, "no-step"),
    (("no-step",), 1, False, "script-error"),
    (("no-step", "missing"), 0, False, "rank-failed"),
])
def test_run_status(states, code, interrupted, expected):
    assert manifest.run_status(_ranks(*states), code, interrupted) == expected


def test_first_failure_is_the_cause():
    ranks = [{"rank": 0, "status": "script-error", "error": "gloo: peer closed", "failed_at": 2.0},
             {"rank": 1, "status": "script-error", "error": "ValueError: x", "failed_at": 1.0}]
    assert manifest.run_error(ranks, "rank-failed", 1) == "rank 1: ValueError: x"


def test_a_peer_loss_is_not_the_cause_even_when_recorded_first():
    """Under load the surviving rank's connection error can be stamped before the failing rank's
    own exception record; the cause is still the rank that really raised."""
    ranks = [{"rank": 0, "status": "script-error", "failed_at": 1.0,
              "error": "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:4242"},
             {"rank": 1, "status": "script-error", "error": "RuntimeError: rank 1 failing on purpose", "failed_at": 1.5}]
    assert manifest.run_error(ranks, "rank-failed", 1) == "rank 1: RuntimeError: rank 1 failing on purpose"
    only_peer = ranks[:1]
    assert manifest.run_error(only_peer, "rank-failed", 1).startswith("RuntimeError: [../third_party/gloo")


FIELDS = st.fixed_dictionaries(
    {"op": st.sampled_from(["all_reduce", "send", "all_to_all", "barrier"])},
    optional={"pg": st.text(max_size=8), "pg_desc": st.text(max_size=20),
              "pg_ranks": st.lists(st.integers(0, 4096), max_size=8),
              "peer": st.integers(0, 4096), "in_nelems": st.integers(0, 2**40),
              "in_split": st.lists(st.integers(0, 2**20), max_size=8),
              "async": st.booleans(), "dtype": st.sampled_from(["float32", "bfloat16"])})


@given(FIELDS)
def test_annotation_round_trip_and_survives_an_unescaped_writer(fields):
    name = format_annotation(fields)
    assert '"' not in name and "\\" not in name
    # the execution-trace writer pastes names between double quotes without escaping
    assert json.loads('{"name": "' + name + '"}')["name"] == name
    parsed = parse_annotation(name)
    clean = {k: ("".join(c for c in v if c.isascii() and c.isprintable() and c not in "'\"\\")
                 if isinstance(v, str) else v) for k, v in fields.items()}
    assert parsed == clean


def test_a_run_whose_ranks_were_not_all_captured_is_not_ok(tmp_path):
    """Rank 0 joined a 2-rank group (a framework started rank 1 itself) but rank 1 left no
    record: the manifest names it missing and the run is not "ok"."""
    from chakra_tools.capture import manifest as man

    cfg = protocol.CaptureConfig(out_dir=str(tmp_path), parent_pid=1)
    record = {"rank": 0, "status": "ok", "world_size": 2, "captured_steps": [2, 3], "step_times_ns": [1, 2, 3, 4]}
    doc = man.build(tmp_path, command=["x.py"], cwd=str(tmp_path), cfg=cfg, started="", finished="",
                    exit_code=0, interrupted=False, records={0: record}, warnings=[])
    assert [r["status"] for r in doc["ranks"]] == ["ok", "missing"]
    assert doc["status"] == "rank-failed"


def test_ranks_the_launcher_starts_are_expected_even_when_none_recorded(tmp_path):
    """torchrun --nproc-per-node 2 whose ranks all left no record: both are missing (the run
    does not shrink to the one rank nobody captured)."""
    from chakra_tools.capture import manifest as man

    cmd = command.Command([*TORCHRUN, "--standalone", "--nproc-per-node", "2", "t.py"], "launcher", "t")
    assert command.least_ranks(cmd) == 2
    assert command.least_ranks(command.Command(["accelerate", "launch", "--num_processes", "2", "t.py"],
                                             "launcher", "t")) == 1
    assert command.least_ranks(command.Command(["python", "t.py"], "direct", "t")) == 1
    cfg = protocol.CaptureConfig(out_dir=str(tmp_path), parent_pid=1, mode="launcher")
    doc = man.build(tmp_path, command=["torchrun"], cwd=str(tmp_path), cfg=cfg, started="", finished="",
                    exit_code=0, interrupted=False, records={}, warnings=[], least_world=command.least_ranks(cmd))
    assert doc["world_size"] == 2 and [r["status"] for r in doc["ranks"]] == ["missing", "missing"]
    assert doc["status"] == "rank-failed"


def test_a_traced_step_is_measured_up_to_where_the_profiler_closes_it(tmp_path, monkeypatch):
    """The optimizer hook notes the step's end at t=100; the profiler's range closes later, in
    `prof.step()`, after the capture's own bookkeeping (t=106 here: a loaded host stalled there
    6 ms in fidelity_fuzz seed 15, which the trace and the replay hold). The measured step ends
    where the traced one does; a step outside the window keeps the hook's instant."""
    from chakra_tools.capture import session as capture_session

    clock = iter([0, 106, 200, 300])
    monkeypatch.setattr(capture_session, "_now", lambda: next(clock))
    cfg = protocol.CaptureConfig(out_dir=str(tmp_path), parent_pid=0)
    session = capture_session.Session(cfg, 0, 0, 1)

    class Profiler:  # stands in for torch.profiler.profile: closes its range when stepped
        current_action = None

        def step(self):
            pass

    session.prof = Profiler()
    monkeypatch.setattr(session, "_advance_profiler", lambda: None)
    session.end_step(100)  # traced: measured to 106, where prof.step() is reached
    session.prof = None
    session.end_step(250)  # untraced: the hook's instant
    assert session.step_times_ns == [106, 50]


def test_ranks_keep_the_tracers_banners_off_the_console(monkeypatch):
    """Every rank printed torch's 'Enabling Execution Trace Observer' and Kineto's stage lines at
    each start and stop; the ranks' environment quiets them, unless the user set the level."""
    from chakra_tools.capture import protocol
    from chakra_tools.capture.launch import child_env

    cfg = protocol.CaptureConfig(out_dir="/tmp/x", parent_pid=1, mode="script", wait=1, warmup=1, active=2)
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", "INFO")
    env = child_env(cfg)
    assert env["KINETO_LOG_LEVEL"] == "6" and env["TORCH_CPP_LOG_LEVEL"] == "INFO"


def test_command_doctests():
    import doctest

    result = doctest.testmod(command)
    assert result.attempted > 0 and result.failed == 0
