"""One rank's capture session: step detection, the profiler, trace files, its status.

Steps end when an optimizer steps (the global post-step hook `runtime.py` installs) or when the
script calls `chakra_tools.capture.step()`. Each step end advances one `torch.profiler.profile`
whose `execution_trace_observer=` is the host-trace observer, so host and device traces start and
stop at the same step boundaries.

Files (all written under temporary names and renamed): `rank-<r>.host.json.gz`,
`rank-<r>.device.json.gz` as soon as the capture window closes, and `.rank-<r>.status.json`
(what the parent folds into manifest.json) then and again at exit. An exception, Ctrl-C or SIGTERM
still closes a window that is open (`Session.finish`, which `runtime.py` calls at exit), so the
steps finished so far stay valid.

A session does not touch the process it runs in beyond its profiler and files: `runtime.py`
creates it and wires the process's hooks, exit handlers and forks to it, so a session can be
built and driven on its own (the tests do).
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import shutil
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ExecutionTraceObserver, ProfilerAction, ProfilerActivity

from . import comm, protocol

RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def _now() -> int:
    return time.perf_counter_ns()


def _iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class Session:
    """One rank's capture: counts steps, drives the profiler, writes the rank's files."""

    def __init__(self, cfg: protocol.CaptureConfig, rank: int, local_rank: int, world_size: int):
        self.cfg, self.rank, self.local_rank, self.world_size = cfg, rank, local_rank, world_size
        self.out = Path(cfg.out_dir)
        self.step_num = 0
        self.step_times_ns: list[int] = []
        #: wall-clock (time.time_ns) start of every step: one clock for all ranks of a host, so
        #: the captured window of the whole job can be measured across ranks
        self.step_starts_unix_ns: list[int] = []
        self.step_start_ns = _now()
        self.step_start_unix_ns = time.time_ns()
        self.explicit = False  # the script calls capture.step(): the optimizer hook stands down
        self.last_by_optimizer = False
        self.lead_optimizer: int | None = None
        self.pending_end_ns: int | None = None
        self.captured: list[int] = []
        self.traces: dict[str, str | None] = {"host_trace": None, "device_trace": None}
        self.status, self.error = "running", None
        self.failed_at: float | None = None  # wall clock of the failure: the first one is the cause
        self.capture_error: str | None = None  # the capture itself failed (the script went on)
        self.started = _iso()
        self.prof: Any = None
        self.et: ExecutionTraceObserver | None = None
        self.et_path: Path | None = None
        self.groups: list[dict[str, Any]] = []
        self.backend: str | None = None
        self.finished = False

    # --- steps -----------------------------------------------------------------------------

    def on_optimizer_step(self, optimizer: Any) -> None:
        """Global optimizer post-step hook: the first optimizer that steps marks step ends, so
        scripts with several optimizers (GAN, per-stage) count each iteration once.

        The hook runs inside the optimizer's `Optimizer.step#...` record_function; advancing the
        profiler there would stop the observer before that node is written while its children
        are (half a graph). So the step end is only noted here, with its time, and completed by
        `flush_step` once `Optimizer.step` has returned."""
        if self.explicit:
            return
        if self.lead_optimizer is None:
            self.lead_optimizer = id(optimizer)
        if id(optimizer) == self.lead_optimizer:
            self.pending_end_ns = _now()

    def flush_step(self) -> None:
        """Complete a step end noted by the optimizer hook (outside every optimizer scope)."""
        end, self.pending_end_ns = self.pending_end_ns, None
        if end is not None:
            self.end_step(end)
            self.last_by_optimizer = True

    def on_explicit_step(self) -> None:
        """capture.step(): from the first call on, only explicit calls end steps. A first call
        right after an optimizer step already ended this step is not counted twice."""
        if not self.explicit:
            self.explicit = True
            if self.last_by_optimizer:
                return
        self.end_step()

    def begin_step(self) -> None:
        """Start timing a step now (the step_scope context manager): the gap before is left out."""
        self.step_start_ns, self.step_start_unix_ns = _now(), time.time_ns()

    def end_step(self, end_ns: int | None = None) -> None:
        """End the step at `end_ns` (the optimizer hook's instant) or now; a step the profiler
        traces ends where the profiler closes its `ProfilerStep#N` range, so the step measured
        and the step traced are the same instants (a stall before that close, 6 ms on a loaded
        host, is in the trace and the replay: left out of the measured step, the replay looked
        that much slower than the run)."""
        self.last_by_optimizer = False
        self._note_groups()
        end = _now() if self.prof is not None else (end_ns or _now())
        self.step_times_ns.append(end - self.step_start_ns)
        self.step_starts_unix_ns.append(self.step_start_unix_ns)
        if self.prof is not None:
            self._guarded(self._advance_profiler)
        self.step_num += 1
        # the profiler's work between steps (saving) is no step's
        self.step_start_ns, self.step_start_unix_ns = _now(), time.time_ns()

    # --- the profiler ----------------------------------------------------------------------

    def start_profiler(self) -> None:
        """Create and start the profiler; the observer is registered only just before it records,
        so the steps before the window pay nothing for it."""
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        cfg = self.cfg
        self.et = ExecutionTraceObserver()
        self.prof = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=cfg.wait, warmup=cfg.warmup, active=cfg.active,
                                             repeat=1),
            on_trace_ready=self._on_trace_ready,
            execution_trace_observer=self.et,
        )
        if cfg.first_captured == 0:
            self._register_observer()
        self.prof.start()
        self._sync_recording()

    def _register_observer(self) -> None:
        name = f".{protocol.rank_stem(self.rank, self.world_size)}.host.tmp-{os.getpid()}.json"
        self.et_path = self.out / name
        self.et.register_callback(str(self.et_path))

    def _advance_profiler(self) -> None:
        if self.step_num + 1 == self.cfg.first_captured:
            self._register_observer()
        self.prof.step()
        self._sync_recording()
        if self.traces["host_trace"] is not None or self.step_num + 1 >= self._window_end():
            self._close_profiler()

    def _guarded(self, action) -> None:
        """Run a profiler action; if it fails, stop capturing and say so, but never raise into
        the user's training loop (this runs inside `optimizer.step()` or `capture.step()`)."""
        try:
            action()
        except Exception as e:
            self.prof = None
            comm.STATE.recording = False
            self.capture_error = f"capture stopped at step {self.step_num}: {type(e).__name__}: {e}"
            print(f"trace-capture: rank {self.rank}: {self.capture_error}", file=sys.stderr)

    def _window_end(self) -> int:
        return self.cfg.first_captured + self.cfg.active

    def _sync_recording(self) -> None:
        recording = self.prof is not None and self.prof.current_action in RECORDING
        comm.STATE.recording = recording and self.cfg.annotate == "auto"

    def _close_profiler(self) -> None:
        """Stop the profiler; a window still open is saved (its finished steps are captured)."""
        prof, self.prof = self.prof, None
        comm.STATE.recording = False
        if prof is None:
            return
        prof.stop()
        if self.et is not None:
            self.et.unregister_callback()
        if self.et_path is not None and self.traces["host_trace"] is None:
            self.et_path.unlink(missing_ok=True)

    def _on_trace_ready(self, prof: Any) -> None:
        """The window closed: write both traces under their final names."""
        first = self.cfg.first_captured
        self.captured = list(range(first, max(first, prof.step_num)))
        self._note_groups()
        host = self.out / protocol.host_trace_name(self.rank, self.world_size)
        device = self.out / protocol.device_trace_name(self.rank, self.world_size)
        tmp_device = self.out / f".{device.name}.tmp-{os.getpid()}.json.gz"
        prof.export_chrome_trace(str(tmp_device))
        os.replace(tmp_device, device)
        self.et.unregister_callback()
        _gzip_into(self.et_path, host)
        self.traces = {"host_trace": host.name, "device_trace": device.name}
        self.write_status()

    # --- what the parent reads -------------------------------------------------------------

    def _note_groups(self) -> None:
        """Remember the process groups while they exist (the script may destroy them at exit)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return
        self.world_size = max(self.world_size, dist.get_world_size())  # ranks a framework started
        world = dist.distributed_c10d._world
        if len(world.pg_names) == len(self.groups) and self.backend:
            return
        self.backend = str(dist.get_backend())
        self.groups = sorted((_group_record(pg, name) for pg, name in world.pg_names.items()),
                             key=lambda g: (len(g["name"]), g["name"]))

    def status_record(self) -> dict[str, Any]:
        return {
            "rank": self.rank, "local_rank": self.local_rank, "world_size": self.world_size,
            "pid": os.getpid(), "host": socket.gethostname(), "status": self.status,
            "node_rank": protocol.env_int(protocol.NODE_RANK_VARS, None),
            "local_world_size": protocol.env_int(protocol.LOCAL_WORLD_VARS, None),
            "job_id": protocol.job_id(),
            "error": self.error, "failed_at": self.failed_at, "started": self.started,
            "finished": _iso() if self.finished else None,
            "torch_version": torch.__version__, "backend": self.backend,
            "process_groups": self.groups, "captured_steps": self.captured,
            "step_times_ns": self.step_times_ns, "step_starts_unix_ns": self.step_starts_unix_ns,
            "device": device_record(),
            "capture_error": self.capture_error, "annotated_calls": comm.STATE.annotated,
            "annotation_failures": comm.STATE.failures,
            **self.traces,
        }

    def write_status(self) -> None:
        path = self.out / protocol.status_name(self.rank)
        tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(self.status_record(), indent=1))
        os.replace(tmp, path)

    # --- the end ---------------------------------------------------------------------------

    def record_exception(self, exc_type: type, exc: BaseException) -> None:
        if self.status != "running":
            return
        if issubclass(exc_type, KeyboardInterrupt):
            self.status, self.error = "interrupted", "KeyboardInterrupt"
        elif issubclass(exc_type, SystemExit):
            return
        else:
            self.status = "script-error"
            text = "".join(traceback.format_exception_only(exc_type, exc)).strip()
            self.error = text.splitlines()[0][:500] if text else exc_type.__name__
        self.failed_at = time.time()

    def finish(self) -> None:
        """At exit: close an open window, record the status. Runs once; Ctrl-C cannot cut it."""
        if self.finished:
            return
        self.finished = True
        _ignore_sigint()
        try:
            self.flush_step()
            self._note_groups()
            self._close_profiler()
        except Exception as e:  # a failing save is reported, never hidden
            self.error = (self.error + "; " if self.error else "") + f"saving traces failed: {e}"
            self.status = "script-error" if self.status == "running" else self.status
        if self.status == "running":
            self.status = "ok"
        if not self.step_times_ns and self._record_taken():
            return  # a worker it spawned captured this rank (follow.py): its record stands
        if self.status == "ok" and self.cfg.profile and not self.captured:
            self.status, self.error = "no-step", self.no_step_message()
            self._drop_traces()
        self.write_status()

    def _drop_traces(self) -> None:
        """Remove traces that hold no finished step (the window opened as the script ended)."""
        for key, name in self.traces.items():
            if name:
                (self.out / name).unlink(missing_ok=True)
            self.traces[key] = None

    def no_step_message(self) -> str:
        """Why a rank that ran to its end captured no step, and what to do about it."""
        first, last = self.cfg.first_captured, self.cfg.first_captured + self.cfg.active - 1
        if not self.step_times_ns:
            return ("captured no step: the script ended no step (a step ends when a torch.optim "
                    "optimizer steps; a script without one calls chakra_tools.capture.step() at "
                    "the end of each step)")
        text = (f"captured no step: the script ended {len(self.step_times_ns)} step(s), the "
                f"capture window is steps {first}..{last} (0-based)")
        if self.capture_error:
            return f"{text}; {self.capture_error}"
        return text + ": run more steps, or lower --wait/--warmup"

    def _record_taken(self) -> bool:
        """Whether another process has written this rank's status since this one did."""
        try:
            record = json.loads((self.out / protocol.status_name(self.rank)).read_text())
        except (OSError, ValueError):
            return False
        return record.get("pid") != os.getpid()


def _gzip_into(src: Path, dest: Path) -> None:
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    with open(src, "rb") as fin, gzip.GzipFile(tmp, "wb", compresslevel=6, mtime=0) as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
    os.replace(tmp, dest)
    src.unlink()


def _group_record(pg: Any, name: str) -> dict[str, Any]:
    import torch.distributed as dist

    desc = getattr(pg, "group_desc", "") or ""
    return {"name": str(name), "desc": desc, "ranks": list(dist.get_process_group_ranks(pg))}


def device_record() -> dict[str, Any]:
    """What the rank computed on: the current CUDA device, else the CPU."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        index = torch.cuda.current_device()
        p = torch.cuda.get_device_properties(index)
        return {"type": "cuda", "index": index, "name": p.name, "total_memory": p.total_memory,
                "multi_processor_count": p.multi_processor_count,
                "capability": f"{p.major}.{p.minor}"}
    return {"type": "cpu", "name": platform.processor() or platform.machine(),
            "machine": platform.machine(), "logical_cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads()}


def _ignore_sigint() -> None:
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        pass
