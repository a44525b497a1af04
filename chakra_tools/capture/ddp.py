"""DDP's gradient all-reduce, made visible to the annotations.

Without a comm hook, DDP's reducer calls the process group's allreduce from C++, past every Python
wrapper, so no annotation could name its group or size. Each DDP module therefore gets, right after
construction, one Python comm hook: a *dispatcher* that calls PyTorch's own `allreduce_hook`
(numerically the reducer's default: divide by the group size, all-reduce) through the annotated
`dist.all_reduce`. A comm hook can be registered only once, so `register_comm_hook` and
`_register_builtin_comm_hook` are patched to retarget the dispatcher instead: a user's hook still
runs, and the collectives it issues through torch.distributed are annotated like any other.

Known difference: the C++ default adapts its divisor for uneven inputs under `Join`; the Python
hook divides by the group size.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable

import torch.distributed as dist

from . import comm


class HookSlot:
    """The dispatcher's state: which hook to run and with which state (default: all-reduce)."""

    def __init__(self, process_group: Any) -> None:
        self.process_group = process_group
        self.hook: Callable | None = None
        self.state: Any = None

    def retarget(self, state: Any, hook: Callable) -> None:
        if self.hook is not None:
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be "
                               "called once.")
        self.state, self.hook = state, hook


def dispatch(slot, bucket):  # no annotations: DDP checks them against dist.GradBucket objects
    """The one comm hook DDP sees: the user's hook if one was registered, else all-reduce.
    Returns a Future of the reduced bucket tensor."""
    if slot.hook is not None:
        return slot.hook(slot.state, bucket)
    if comm.STATE.active:  # annotate: PyTorch's own hook, through the wrapped dist.all_reduce
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        return default_hooks.allreduce_hook(slot.process_group, bucket)
    return _plain_allreduce(slot.process_group, bucket)


def _plain_allreduce(pg, bucket):
    """The same reduction straight on the process group: outside the capture window the hook
    skips torch.distributed's Python layer (about half of the hook's cost)."""
    tensor = bucket.buffer()
    tensor.div_(pg.size())
    return pg.allreduce([tensor]).get_future().then(_first)


def _first(fut):
    return fut.value()[0]


def _builtin_as_python(comm_hook_type: Any) -> Callable:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if comm_hook_type == dist.BuiltinCommHookType.FP16_COMPRESS:
        return default_hooks.fp16_compress_hook
    return default_hooks.allreduce_hook


def install() -> None:
    """Patch DistributedDataParallel so that every instance routes its all-reduce through Python."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    if getattr(DDP.__init__, "__chakra_original__", None):
        return
    orig_init, orig_register = DDP.__init__, DDP.register_comm_hook
    orig_builtin = DDP._register_builtin_comm_hook
    slots: "weakref.WeakKeyDictionary[Any, HookSlot]" = weakref.WeakKeyDictionary()

    @functools.wraps(orig_init)
    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        if getattr(self, "_use_python_reducer", False) or getattr(self, "reducer", None) is None:
            return
        slot = HookSlot(self.process_group)
        orig_register(self, slot, dispatch)
        slots[self] = slot

    @functools.wraps(orig_register)
    def register_comm_hook(self, state, hook):
        if self not in slots:
            return orig_register(self, state, hook)
        self._check_comm_hook(hook)
        slots[self].retarget(state, hook)
        self.logger._set_comm_hook_name(hook.__qualname__)

    @functools.wraps(orig_builtin)
    def _register_builtin_comm_hook(self, comm_hook_type):
        if self not in slots:
            return orig_builtin(self, comm_hook_type)
        slots[self].retarget(self.process_group, _builtin_as_python(comm_hook_type))
        self.logger._set_comm_hook_name(str(comm_hook_type))

    __init__.__chakra_original__ = orig_init  # type: ignore[attr-defined]
    DDP.__init__ = __init__
    DDP.register_comm_hook = register_comm_hook
    DDP._register_builtin_comm_hook = _register_builtin_comm_hook
