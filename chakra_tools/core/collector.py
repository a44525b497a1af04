"""The cyclic garbage collector paused, or made lazier, around work that makes millions of objects.

Converting a trace (its JSON events), validating a 100k-rank set (a scan per rank): the objects
made are mostly kept, so the collector's passes over them find nothing, and each full pass walks
everything made so far: quadratic in the work (half of validating 131,072 rank files went there).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic collector for the block (restoring its previous state afterwards).

    What the block made is mostly kept (traces, graphs: a million objects). Re-enabled as it is,
    the collector's first pass would walk all of it as new objects (~80 ms here); so it is moved
    to the oldest generation at once (freeze + unfreeze, unless the program froze objects of its
    own), where it is collected as usual, only less often.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


@contextmanager
def gc_relaxed(young: int = 20_000) -> Iterator[None]:
    """The collector's first threshold raised to `young` for the block (700 by default), restored
    after: a replay makes and drops a few objects per event (heap entries, a policy's callbacks),
    and at the default every 700th allocation starts a pass, a tenth of a congestion-aware
    replay's time. Unlike `gc_paused`, cycles made in the block are still collected."""
    before = gc.get_threshold()
    gc.set_threshold(max(young, before[0]), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
