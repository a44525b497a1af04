"""The capture inside one process: make it capture itself and wire the process to its session.

Started by the startup hook before the user's script runs (`activate`), or by follow.py in a
worker that has joined a process group (`join`). What one rank captures is its `Session`
(`session.py`); this module installs, once per process, what drives the current session: the
optimizer post-step hook that ends steps, the exit handlers that close an open window after an
exception, Ctrl-C, SIGTERM or a normal exit, and a fork handler (a forked child drops the session
it inherited). `SESSION` is the process's current session; `chakra_tools.capture` finds it through
this module by name, without importing torch.
"""

from __future__ import annotations

import atexit
import functools
import os
import signal
import sys
import time

import torch

from . import comm, ddp, follow, protocol
from .session import Session

SESSION: "Session | None" = None


# --- wiring into the process ---------------------------------------------------------------


def _finish_current() -> None:
    if SESSION is not None:
        SESSION.finish()


def _install_exit_handlers() -> None:
    """Note an uncaught exception, turn SIGTERM (a launcher stopping a rank) into a normal exit,
    and finish at exit: atexit runs after the script, including after an exception or Ctrl-C.
    Once per process; each acts on the process's current session."""
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        if SESSION is not None:
            SESSION.record_exception(exc_type, exc)
        if issubclass(exc_type, KeyboardInterrupt) and previous is sys.__excepthook__:
            # Ctrl-C reaches every rank: one line each, not a traceback each (the manifest
            # records it); the process still ends as an interrupted one
            sys.stderr.write(f"rank {os.environ.get('RANK', '0')}: interrupted\n")
            return
        previous(exc_type, exc, tb)

    def on_sigterm(signum, frame):
        if SESSION is not None and SESSION.status == "running":
            SESSION.status, SESSION.error = "terminated", "SIGTERM"
            SESSION.failed_at = time.time()
        raise SystemExit(128 + signum)

    sys.excepthook = excepthook
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, on_sigterm)
    atexit.register(_finish_current)


def _install_step_hooks() -> None:
    """Optimizer post-step hook for step ends, once per process, acting on the current session."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(
        lambda opt, args, kwargs: SESSION.on_optimizer_step(opt) if SESSION is not None else None)
    _flush_after_optimizer_step()


def _mark_first_forward(session: Session) -> None:
    """The first nn.Module forward marks step 0's start (the time spent importing and building
    before it is no step)."""
    handle = None

    def first_forward(module, args):
        if session.step_num == 0 and not session.step_times_ns:
            session.begin_step()
        handle.remove()

    handle = torch.nn.modules.module.register_module_forward_pre_hook(first_forward)


def _flush_after_optimizer_step() -> None:
    """Make every optimizer's step, once it has left its record_function, complete the step end
    its post-step hook noted. Optimizers wrap their class's `step` with `profile_hook_step` when
    first instantiated, which happens after this runs (before the user's script)."""
    optimizer = torch.optim.Optimizer
    original = optimizer.profile_hook_step

    def profile_hook_step(func):
        inner = original(func)

        @functools.wraps(inner)
        def step(*args, **kwargs):
            try:
                return inner(*args, **kwargs)
            finally:
                if SESSION is not None:
                    SESSION.flush_step()

        return step

    optimizer.profile_hook_step = staticmethod(profile_hook_step)


_WIRED = False  # the process-wide hooks are installed (a forked child inherits them)
_FORKED = False  # this process is a fork of a capturing one


def _after_fork_in_child() -> None:
    """A fork of a capturing process (multiprocessing's default start method) is not that rank:
    it drops the inherited session, and captures itself if it joins a process group (follow.py)."""
    global SESSION, _FORKED
    if SESSION is None:
        return
    SESSION, _FORKED = None, True
    comm.STATE.recording = False
    text = os.environ.get(protocol.ENV_CONFIG)
    if text:
        follow.follow(functools.partial(join, text))


def join(config_text: str, rank: int, world: int) -> None:
    """Start capturing in a process that has just joined a process group as `rank` of `world`
    (follow.py calls it in a spawned or forked worker), unless it captures already."""
    if SESSION is None:
        activate(protocol.CaptureConfig.from_env(config_text), rank=rank, world=world)


def activate(cfg: protocol.CaptureConfig, env=os.environ, *, rank: int | None = None,
             world: int | None = None) -> Session:
    """Make this process capture itself (called by the startup hook; by follow.py, with the
    rank and world size of the process group a spawned worker joined)."""
    global SESSION
    if not os.path.isdir(cfg.out_dir):
        raise FileNotFoundError(f"run folder {cfg.out_dir} does not exist")
    rank = protocol.env_int(protocol.RANK_VARS, 0, env) if rank is None else rank
    local_rank = protocol.env_int(protocol.LOCAL_RANK_VARS, rank, env)
    world = protocol.env_int(protocol.WORLD_VARS, 1, env) if world is None else world
    os.environ[protocol.ENV_OWNER] = str(os.getpid())
    session = Session(cfg, rank, local_rank, world)
    SESSION = session
    comm.STATE.always = cfg.annotate == "always"
    if cfg.annotate != "off":
        comm.install(rank, waits=cfg.waits)
    if cfg.ddp_hook:
        ddp.install()
    global _WIRED
    if not _WIRED:
        _WIRED = True
        _install_step_hooks()
        _install_exit_handlers()
        os.register_at_fork(after_in_child=_after_fork_in_child)
    if _FORKED:  # a forked child ends in os._exit, after multiprocessing's finalizers only
        import multiprocessing.util

        multiprocessing.util.Finalize(None, _finish_current, exitpriority=100)
    _mark_first_forward(session)
    if cfg.profile:
        session.start_profiler()
    session.write_status()
    return session
