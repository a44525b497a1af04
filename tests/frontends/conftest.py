"""Fixtures of the front-end tests: the shipped text workloads and ONNX models, and a CLI runner."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # onnx_builders


@pytest.fixture(scope="session")
def text_workloads(shared_fixtures) -> Path:
    return shared_fixtures / "astra-sim" / "text_workloads"


@pytest.fixture(scope="session")
def onnx_fixtures(shared_fixtures) -> Path:
    return shared_fixtures / "onnx"


@pytest.fixture
def convert_cli():
    """convert_cli(*args) -> (exit code, stdout, stderr) of `trace-convert ARGS`."""
    from typer.testing import CliRunner

    from chakra_tools.cli import convert

    def run(*args: str):
        res = CliRunner().invoke(convert.app, list(map(str, args)))
        return res.exit_code, res.stdout, getattr(res, "stderr", "")

    return run
