"""The docstring examples of the feed and replay modules run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["chakra_tools.feed.feeder", "chakra_tools.replay.collectives", "chakra_tools.replay.steps",
           "chakra_tools.replay.message", "chakra_tools.replay.result",
           "chakra_tools.replay.fidelity", "chakra_tools.replay.calibrate", "chakra_tools.replay.recorded",
           "chakra_tools.replay.sharefit"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    res = doctest.testmod(importlib.import_module(name))
    assert res.attempted > 0 and res.failed == 0
