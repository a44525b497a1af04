"""The runnable examples in the visualize modules' docstrings (STYLE §10) stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["chakra_tools.core.chrome_trace", "chakra_tools.visualize.timeline", "chakra_tools.visualize.select",
           "chakra_tools.visualize.analysis", "chakra_tools.visualize.svg"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
