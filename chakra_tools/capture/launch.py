"""The `trace-capture` parent: check the command (command.py), make the run folder, run the
command with the startup hook on PYTHONPATH, then fold the ranks' status files into manifest.json.

The command runs as its own process (`python SCRIPT ARGS`, `python -m MODULE ARGS`, or the
launcher as given), so `sys.argv`, `__main__`, the working directory and the exit code are the
script's own. Everything that can be wrong with the input is checked before the run folder is
created, so bad input leaves nothing behind. No torch here.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from chakra_tools.core.errors import InputError
from chakra_tools.core.commit import atomic_output

from . import manifest, protocol
from .command import Command, fewer_ranks_warning, launcher_nodes, least_ranks, parse_command

#: trace-capture's exit code when the command succeeded but its capture did not (the manifest's
#: status is not `ok`): the script marks no step (`no-step`), or a rank that ran left no capture
#: (`rank-failed`: a launcher or framework started it without the startup hook)
CAPTURE_FAILED_EXIT = 2
#: a Ctrl-C, as every command exits on one (128 + SIGINT)
INTERRUPTED_EXIT = 130
HOOK_DIR = Path(__file__).resolve().parent / "_hook"
# --- the run folder ------------------------------------------------------------------------


def default_run_dir(name: str, base: Path = Path("traces")) -> Path:
    """traces/<name>-<UTC timestamp>, with a counter if that folder exists already."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    run = base / f"{name}-{stamp}"
    n = 2
    while run.exists():
        run, n = base / f"{name}-{stamp}-{n}", n + 1
    return run


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def check_run_dir(run: Path, force: bool) -> None:
    """Refuse an existing folder (unless --force, and then only a former run folder or an empty
    one), and a place we cannot write."""
    if run.exists():
        if not run.is_dir():
            raise InputError(f"{run}: exists and is not a folder")
        if not force:
            raise InputError(f"{run}: run folder exists; choose another --out or pass --force "
                             "to replace it")
        if any(run.iterdir()) and not (run / protocol.MANIFEST).exists():
            raise InputError(f"{run}: --force replaces only a run folder (one with "
                             f"{protocol.MANIFEST}) or an empty folder; this one holds other files")
        if not os.access(run.parent.absolute(), os.W_OK | os.X_OK):
            raise InputError(f"{run}: cannot replace it: its parent folder is not writable")
        return
    base = _nearest_existing(run.parent)
    if not base.is_dir():
        raise InputError(f"{run}: {base} is not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise InputError(f"{run}: cannot create the run folder: {base} is not writable")


def check_job_dir(job: Path) -> None:
    """The run folder of a multi-node launch, which every node's capture shares (each writes its
    own node-<k> folder in it): new, or one that holds no single-node run."""
    if job.exists() and not job.is_dir():
        raise InputError(f"{job}: exists and is not a folder")
    if (job / protocol.MANIFEST).exists():
        raise InputError(f"{job}: holds a single-node run ({protocol.MANIFEST}); a multi-node launch "
                         "writes one node-<k> folder per node into its run folder: choose another --out")


def make_run_dir(run: Path) -> None:
    if run.exists():
        shutil.rmtree(run)
    try:
        run.mkdir(parents=True)
    except OSError as e:
        raise InputError(f"{run}: cannot create the run folder: {e.strerror}") from None


# --- running -------------------------------------------------------------------------------


#: what the tracers print on every rank at every start and stop ("Enabling Execution Trace
#: Observer", Kineto's stage lines), kept off the user's console; a value the user set is kept
QUIET_TRACERS = {"TORCH_CPP_LOG_LEVEL": "ERROR", "KINETO_LOG_LEVEL": "6"}


def child_env(cfg: protocol.CaptureConfig) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in QUIET_TRACERS.items():
        env.setdefault(key, value)
    env.pop(protocol.ENV_OWNER, None)
    env.pop(protocol.ENV_LAUNCHER, None)
    env[protocol.ENV_CONFIG] = cfg.to_env()
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(HOOK_DIR) + (os.pathsep + old if old else "")
    return env


def wait_for(proc: subprocess.Popen) -> bool:
    """Wait for the command; returns whether Ctrl-C was pressed meanwhile.

    The terminal delivers Ctrl-C to the whole foreground process group, so the command gets it
    too and its ranks finish their traces; here the first one is only noted (a second one is
    passed on). SIGTERM is passed on to the command.
    """
    seen = {"int": 0}

    def on_int(signum, frame):
        seen["int"] += 1
        if seen["int"] > 1 and proc.poll() is None:
            proc.send_signal(signal.SIGINT)

    def on_term(signum, frame):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    old_int = signal.signal(signal.SIGINT, on_int)
    old_term = signal.signal(signal.SIGTERM, on_term)
    try:
        proc.wait()
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
    return seen["int"] > 0


def exit_code_of(returncode: int) -> int:
    """The shell's view: a process killed by signal N exits 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def clean_scratch(run: Path) -> None:
    for p in run.iterdir():
        if protocol.is_scratch(p.name):
            p.unlink(missing_ok=True)


def _iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def check_schedule(wait: int, warmup: int, active: int) -> None:
    for name, value, least in (("--wait", wait, 0), ("--warmup", warmup, 0),
                               ("--active", active, 1)):
        if value < least:
            raise InputError(f"{name} must be at least {least}, got {value}")


def start(cmd: Command, cfg: protocol.CaptureConfig, run: Path) -> subprocess.Popen:
    try:
        return subprocess.Popen(cmd.argv, env=child_env(cfg))
    except OSError as e:
        shutil.rmtree(run, ignore_errors=True)
        raise InputError(f"{cmd.argv[0]}: cannot start: {e.strerror}") from None


def capture(words: list[str], *, out: Path | None, force: bool, wait: int, warmup: int,
            active: int, profile: bool = True, annotate: str = "auto",
            ddp_hook: bool = True, waits: bool = True) -> tuple[int, dict, Path]:
    """Run the command under capture; returns (exit code, manifest, run folder).

    Every check happens before the run folder is made; after that, whatever the command does,
    the manifest is written. The exit code is the command's, or CAPTURE_FAILED_EXIT where the
    command succeeded but the capture did not."""
    check_schedule(wait, warmup, active)
    cmd = parse_command(words)
    node = launcher_nodes(cmd.argv) if cmd.mode == "launcher" else None
    run = out if out is not None else default_run_dir(cmd.name)
    if node is not None:  # one trace-capture per node: each writes its node's folder of the run
        check_job_dir(run)
        run = run / node.folder()
    check_run_dir(run, force)
    make_run_dir(run)
    cfg = protocol.CaptureConfig(out_dir=str(run.absolute()), parent_pid=os.getpid(),
                                 mode=cmd.mode, wait=wait, warmup=warmup, active=active,
                                 profile=profile, annotate=annotate, ddp_hook=ddp_hook, waits=waits)
    started = _iso()
    proc = start(cmd, cfg, run)
    interrupted = wait_for(proc)
    code = exit_code_of(proc.returncode)
    records, warnings = manifest.read_status_files(run)
    doc = manifest.build(run, command=list(words), cwd=os.getcwd(), cfg=cfg, started=started,
                         finished=_iso(), exit_code=code, interrupted=interrupted,
                         records=records, warnings=warnings, least_world=least_ranks(cmd),
                         node=None if node is None else {"rank": node.rank, "count": node.count})
    doc["argv"] = cmd.argv
    if cmd.mode == "launcher" and (fewer := fewer_ranks_warning(cmd.argv, doc["world_size"])):
        doc["warnings"].append(fewer)
    write_manifest(run, doc)
    clean_scratch(run)
    if code == 0 and doc["status"] != "ok":
        code = CAPTURE_FAILED_EXIT
    if interrupted:
        code = INTERRUPTED_EXIT  # whatever the launcher made of the Ctrl-C (torchrun: 1)
    return code, doc, run


def write_manifest(run: Path, doc: dict) -> None:
    import json

    with atomic_output(run / protocol.MANIFEST, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
