"""The compiled hot loops (C extensions built by setup.py), each optional.

Every compiled function has a Python twin that is the reference: the same results, which the
tests check, and what runs where the extension was not built (no C compiler) or when
CHAKRA_TOOLS_PURE_PYTHON is set (to check or debug the Python code). A stage loads its module
here once, in the one place that picks C or the twin for it (the core's: `core.hotloops`).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def load(module: str) -> ModuleType | None:
    """`module` (e.g. "chakra_tools.core._hotloops"), or None if it is not built or not wanted."""
    if os.environ.get("CHAKRA_TOOLS_PURE_PYTHON"):
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None
