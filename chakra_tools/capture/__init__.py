"""Capture: run a user's training script with host (execution trace) and device (Kineto) tracing.

The command is `trace-capture` (`chakra_tools.cli.capture`); this package is what runs inside the
captured processes. Scripts without an optimizer mark their steps with the explicit API, which
does nothing when the script runs without `trace-capture`:

    from chakra_tools import capture

    for batch in data:
        with capture.step_scope():      # or: ...; capture.step() at the end of each step
            train_step(batch)

This module imports no torch. The annotation format the converter reads is in `core.annotations`.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator


def _session():
    runtime = sys.modules.get("chakra_tools.capture.runtime")
    return getattr(runtime, "SESSION", None) if runtime else None


def is_capturing() -> bool:
    """True inside a process that trace-capture is capturing."""
    return _session() is not None


def step() -> None:
    """End the current training step (a no-op when not capturing).

    Needed only by scripts that step no torch.optim optimizer; from the first call on, only these
    calls end steps.
    """
    session = _session()
    if session is not None:
        session.on_explicit_step()


@contextlib.contextmanager
def step_scope() -> Iterator[None]:
    """One training step: timed from entry, ended when the block completes (a step that raises
    is not a finished step)."""
    session = _session()
    if session is not None:
        session.explicit = True
        session.begin_step()
    yield
    if session is not None:
        session.end_step()
