"""Running a real torch job from a test: the one flake that is not ours, retried once.

Importable from every test (tests/conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Sequence

#: what libstdc++ prints when torch 2.13's gloo aborts a rank in interpreter teardown, after the
#: script and the capture have finished (pytorch/pytorch#179291: gloo's worker threads free
#: tensors once Python is gone). Seen about once in a few hundred DDP runs, never reproduced at
#: will; not this project's code, so a run that dies of it alone is run again, once.
TEARDOWN_ABORT = "terminate called without an active exception"


def run_torch_job(cmd: Sequence[str], *, output: Path | None = None, **kw) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, capture_output=True, text=True, **kw)`, run once more (its `output`
    folder removed first) when it died of `TEARDOWN_ABORT` alone."""
    for attempt in (1, 2):
        proc = subprocess.run(list(cmd), capture_output=True, text=True, **kw)
        if proc.returncode == 0 or TEARDOWN_ABORT not in proc.stderr or attempt == 2:
            return proc
        if output is not None:
            shutil.rmtree(output, ignore_errors=True)
    return proc
