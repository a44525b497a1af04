"""Workers that a captured script starts itself (`torch.multiprocessing.spawn`, a
`multiprocessing.Process`, PyTorch Lightning's subprocess launcher) capture themselves, as
torchrun's workers do.

Such a worker has no rank in its environment, or not the one capture reads: the script hands it
one and the worker passes it to `init_process_group`. So the startup hook of a process that a
capturing process started does not start a capture session at once; it waits for
`torch.distributed` to be imported and wraps `init_process_group`, and the session starts as the
worker joins its process group, with the rank and world size of that group.
Spawned processes that never join one (DataLoader or compile workers) stay out, and pay for one
import hook. The script's own process, which only started the workers, leaves the rank's record
to the worker (session.Session.finish).

No torch here: the startup hook imports this module in every spawned process.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Callable

C10D = "torch.distributed.distributed_c10d"


def follow(on_join: Callable[[int, int], None]) -> None:
    """Call `on_join(rank, world)` once this spawned (or forked) process joins a process group:
    the caller starts the capture there (`runtime.join`), so this module needs neither torch
    nor the capture runtime until then."""
    c10d = sys.modules.get(C10D)
    if c10d is not None:  # forked: torch.distributed is loaded already
        _wrap_init(c10d, on_join)
    else:
        sys.meta_path.insert(0, _AfterImport(C10D, lambda module: _wrap_init(module, on_join)))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Run `then(module)` right after `name` is executed, before anyone imports from it."""

    def __init__(self, name: str, then: Callable):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once, and so that the search below finds the real module
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, then = spec.loader, self.then
        exec_module = loader.exec_module

        def exec_then(module):
            exec_module(module)
            then(module)

        loader.exec_module = exec_then
        return spec


def _wrap_init(c10d, on_join: Callable[[int, int], None]) -> None:
    original = getattr(c10d.init_process_group, "__wrapped_for_capture__", c10d.init_process_group)

    def init_process_group(*args, **kwargs):
        result = original(*args, **kwargs)
        try:
            on_join(c10d.get_rank(), c10d.get_world_size())
        except Exception as e:  # the worker must still train, uncaptured, and say why
            print(f"trace-capture: capture not started in a spawned worker: {type(e).__name__}: {e}",
                  file=sys.stderr)
        return result

    init_process_group.__wrapped_for_capture__ = original
    c10d.init_process_group = init_process_group
    dist = sys.modules.get("torch.distributed")
    if dist is not None and getattr(dist, "init_process_group", None) is original:
        dist.init_process_group = init_process_group  # the name scripts call
