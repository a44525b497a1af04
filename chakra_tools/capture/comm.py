"""Communication annotations: wrap every torch.distributed call in a `record_function` whose name
says exactly what the call did (see `annotations.py` for the keys).

Why: on CPU with gloo, PyTorch 2.13 records a collective only as `c10d::<op>` with an opaque
process group; the annotation gives the converter the group, peer, sizes and dtype on CPU and
GPU alike. The wrappers replace the functions in `torch.distributed`, `distributed_c10d` and the
functional collectives, so a script needs no change; DDP's gradient all-reduce, which C++ issues
without passing through Python, is routed through an annotated Python comm hook (`ddp.py`).
What each call did is read off its arguments by `describe.py` (one description per API); this
module wraps the calls, names and numbers their annotations, and marks where their waits end.

Cost: while the profiler does not record, a wrapper is one flag test and the original call. While
it records, describing the call and entering a record_function costs some microseconds per call
(`bench/bench_capture.py` measures it). Describing never breaks the user's call: any error while
describing skips the annotation and is counted.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
import weakref
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from chakra_tools.core.annotations import format_annotation, parse_annotation

from .describe import ASYNC_APIS, C10D, FUNCOL, Desc


class AnnotationState:
    """Switches and counters shared by all wrappers of one process."""

    def __init__(self) -> None:
        self.recording = False  # set by the runtime while the profiler records
        self.always = False  # annotate even without a recording profiler (benchmarks)
        self.rank = 0
        self.annotated = 0
        self.failures: list[str] = []
        self.seq: dict[str, int] = {}
        self.groups: dict[int, dict[str, Any]] = {}
        self.local = threading.local()  # .inside: a wrapper is already annotating on this thread

    @property
    def active(self) -> bool:
        return self.recording or self.always


STATE = AnnotationState()


# --- the wrapper ---------------------------------------------------------------------------


class Binder:
    """Arguments by parameter name, defaults filled in: `inspect.Signature.bind` does the same
    with checks the call itself makes anyway, at ten times the cost."""

    def __init__(self, fn: Callable) -> None:
        params = list(inspect.signature(fn).parameters.values())
        self.names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                           p.POSITIONAL_OR_KEYWORD)]
        self.defaults = {p.name: p.default for p in params if p.default is not p.empty}

    def __call__(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        a = dict(self.defaults)
        a.update(zip(self.names, args))
        a.update(kwargs)
        return a


SEQ_MARK = "'seq':-7777777"
TEMPLATES: dict[tuple, str] = {}


def group_fields(pg: Any) -> dict[str, Any]:
    """pg, pg_desc, pg_ranks of a process group, cached (groups never change their members)."""
    key = id(pg)
    if key not in STATE.groups:
        fields = {"pg": str(pg.group_name), "pg_ranks": list(dist.get_process_group_ranks(pg))}
        desc = getattr(pg, "group_desc", "")
        if desc and desc != "undefined":
            fields["pg_desc"] = str(desc)
        STATE.groups[key] = fields
    return STATE.groups[key]


def name_template(api: str, op: str, pg: Any, is_async: bool, fields: dict[str, Any]) -> str:
    """The annotation name with a placeholder for `seq`, cached: a training step repeats the
    same calls, and formatting is most of an annotation's cost."""
    key = (api, op, id(pg), is_async,
           *((k, tuple(v) if isinstance(v, list) else v) for k, v in fields.items()))
    template = TEMPLATES.get(key)
    if template is None:
        fields = {**fields, **group_fields(pg), "op": op, "api": api, "rank": STATE.rank,
                  "async": is_async, "seq": -7777777}
        template = format_annotation(fields)
        if len(TEMPLATES) > 4096:
            TEMPLATES.clear()
        TEMPLATES[key] = template
    return template


def describe_call(api: str, describe: Desc, bind: Binder, args, kwargs,
                  is_async: bool | None) -> str | None:
    """The annotation name of one call, or None (counted) when it cannot be described."""
    try:
        a = bind(args, kwargs)
        op, pg, fields = describe(a)
        is_async = bool(a.get("async_op", False)) if is_async is None else is_async
        template = name_template(api, op, pg, is_async, fields)
        pg_name = STATE.groups[id(pg)]["pg"]
        seq = STATE.seq.get(pg_name, 0)
        STATE.seq[pg_name] = seq + 1
        return template.replace(SEQ_MARK, f"'seq':{seq}", 1)
    except Exception as e:  # never break the user's call because of an annotation
        if len(STATE.failures) < 20:
            STATE.failures.append(f"{api}: {type(e).__name__}: {e}")
        return None


def annotation_scope() -> Callable[[str], Any]:
    """The record_function context manager for annotations: the C++ `_RecordFunctionFast` when
    torch has it (0.2 us per call against 6-17 us for `torch.profiler.record_function`, measured
    on this project's CI machine), else `record_function`. Both put a node of that name in the
    host trace and an event in the device trace (category `cpu_op` for the fast one,
    `user_annotation` for the other): readers match annotations by name, not by category."""
    fast = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", None)
    return fast or torch.autograd.profiler.record_function


def wrap(api: str, orig: Callable, describe: Desc, is_async: bool | None = None) -> Callable:
    """A function that behaves as `orig` and, while annotating, runs it inside the annotation."""
    bind = Binder(orig)
    record_function = annotation_scope()
    local = STATE.local

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        if not (STATE.recording or STATE.always) or getattr(local, "inside", False):
            return orig(*args, **kwargs)
        name = describe_call(api, describe, bind, args, kwargs, is_async)
        if name is None:
            return orig(*args, **kwargs)
        local.inside = True
        try:
            STATE.annotated += 1
            with record_function(name):
                result = orig(*args, **kwargs)
            note_work(result, name)
            return result
        finally:
            local.inside = False

    wrapper.__chakra_original__ = orig  # type: ignore[attr-defined]
    return wrapper


def _patch_module(modules: list[Any], table: dict[str, Desc], prefix: str,
                  is_async: Callable[[str], bool | None]) -> list[str]:
    """Replace each function of `table` in every module of `modules` that holds the same object."""
    done = []
    for name, describe in table.items():
        orig = getattr(modules[0], name, None)
        if orig is None or hasattr(orig, "__chakra_original__"):
            continue
        wrapper = wrap(prefix + name, orig, describe, is_async(name))
        for module in modules:
            if getattr(module, name, None) is orig:
                setattr(module, name, wrapper)
        done.append(prefix + name)
    return done


# --- Work.wait(): the end of an asynchronous call ---------------------------------------------
#
# `async_op=True`, `isend` and `irecv` return a Work whose `wait()` PyTorch does not trace, so
# nothing in the trace says where the script waited for the call. While annotating, the Work an
# annotated call returned is remembered (weakly) with its annotation, and as `Work.wait` returns
# an instant "wait" annotation names that call's group and sequence number (annotations.py); the
# converter makes it depend on the call. An instant, not a range around the wait: a range would
# be the parent of what gloo's worker records meanwhile, and the wait itself stays untraced time
# as it always was (the converter re-creates it from the call).

WORKS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def note_work(result: Any, name: str) -> None:
    """Remember the Work(s) an annotated call returned (a list for batch_isend_irecv)."""
    for work in result if isinstance(result, list) else (result,):
        if isinstance(work, dist.Work):
            try:
                WORKS[work] = name
            except TypeError:  # not weakly referenceable in this torch: no wait annotation
                return


def wait_annotation(call_name: str, waited_us: int | None = None) -> str | None:
    """The annotation of a wait on the call annotated `call_name`: its group and sequence, and
    how long the wait took (µs; ops the wait ran on this thread meanwhile, as gloo's copies of
    a reduce-scatter's result, included), which tells the converter where it began."""
    fields = parse_annotation(call_name)
    if not fields:
        return None
    keep = {k: fields[k] for k in ("pg", "pg_ranks", "pg_desc", "rank", "seq") if k in fields}
    timed = {"waited_us": int(waited_us)} if waited_us is not None else {}
    return format_annotation({**keep, "op": "wait", "api": "Work.wait", "waits_for": fields.get("op"), **timed})


def _install_wait() -> bool:
    orig = dist.Work.wait
    if hasattr(orig, "__chakra_original__"):
        return False
    record_function = annotation_scope()

    @functools.wraps(orig)
    def wait(self, *args, **kwargs):
        call = WORKS.get(self) if (STATE.recording or STATE.always) else None
        if call is None:
            return orig(self, *args, **kwargs)
        began = time.perf_counter_ns()
        result = orig(self, *args, **kwargs)
        name = wait_annotation(call, (time.perf_counter_ns() - began) // 1000)
        if name is not None:
            with record_function(name):  # an instant, as the wait returns: nothing nests in it
                pass
        return result

    wait.__chakra_original__ = orig  # type: ignore[attr-defined]
    dist.Work.wait = wait
    return True


def install(rank: int, waits: bool = True) -> list[str]:
    """Wrap every torch.distributed call this module knows (and `Work.wait`, with `waits`);
    returns the wrapped API names."""
    STATE.rank = rank
    if waits and _install_wait():
        done_wait = ["Work.wait"]
    else:
        done_wait = []
    done = done_wait + _patch_module([c10d, dist], C10D, "",
                                     lambda n: True if n in ASYNC_APIS else None)
    try:
        from torch.distributed import _functional_collectives as funcol
    except ImportError:
        return done
    return done + _patch_module([funcol], FUNCOL, "funcol.", lambda n: True)
