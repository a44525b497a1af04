"""The examples in the converter's docstrings run."""

import doctest
import importlib

import pytest

MODULES = ["calls", "cost", "graphcheck", "jsonio", "link", "run"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"chakra_tools.convert.{name}")
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
