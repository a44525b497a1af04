"""The docstring examples of the front ends run (they are the smallest worked examples)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["builder", "costs", "groups", "text_et", "textwl", "training"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"chakra_tools.frontends.{name}")
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0


def test_same_inputs_write_the_same_bytes(tmp_path):
    from chakra_tools.frontends import TransformerConfig, generate

    cfg = TransformerConfig(layers=2, hidden=256, heads=4, seq=128, batch=16, vocab=1024, tp=2, pp=2,
                            microbatches=2)
    generate(cfg).write(tmp_path / "a", "w")
    generate(cfg).write(tmp_path / "b", "w")
    for f in sorted((tmp_path / "a").iterdir()):
        assert f.read_bytes() == (tmp_path / "b" / f.name).read_bytes()


def test_frontends_import_neither_torch_nor_typer_nor_onnx():
    import subprocess
    import sys

    code = ("import sys, chakra_tools.frontends, chakra_tools.frontends.onnx_workload; "
            "print(sorted(m for m in ('torch', 'typer', 'onnx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
