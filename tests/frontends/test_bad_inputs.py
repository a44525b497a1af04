"""ONNX models and text workloads no tool could have written: one InputError naming the file and
the place (initializer, line), never a ValueError or KeyError from inside onnx or int()
(reproducers minimized from the fuzz harness, tests/fuzz)."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

import onnx  # noqa: E402

from chakra_tools.core.errors import InputError  # noqa: E402
from chakra_tools.frontends.onnx_model import summarize  # noqa: E402
from chakra_tools.frontends.textwl import parse_text_workload, read_text_workload  # noqa: E402


def _damaged(onnx_fixtures, tmp_path, change) -> str:
    m = onnx.load(str(onnx_fixtures / "light_squeezenet.onnx"))
    name = change(m)
    p = tmp_path / "model.onnx"
    onnx.save(m, str(p))
    with pytest.raises(InputError) as e:
        summarize(p)
    assert str(e.value).startswith(str(p)) and f"initializer {name!r}" in str(e.value), e.value
    return str(e.value)


def _shape_tensor(m):
    return next(t for t in m.graph.initializer if t.name.endswith("__SHAPE"))


def test_initializer_of_an_unknown_data_type(onnx_fixtures, tmp_path):
    def change(m):
        t = m.graph.initializer[0]
        t.data_type = 12345
        return t.name
    assert "unknown data_type 12345" in _damaged(onnx_fixtures, tmp_path, change)


def test_shape_tensor_whose_data_does_not_match_its_type(onnx_fixtures, tmp_path):
    def change(m):  # int64 data read as FP8: ValueError("cannot reshape array") inside onnx
        t = _shape_tensor(m)
        t.data_type = onnx.TensorProto.FLOAT8E4M3FN
        return t.name
    assert "cannot be read" in _damaged(onnx_fixtures, tmp_path, change)


@pytest.mark.parametrize("dim,needle", [(-1, "negative dimension"), (2**62, "more than 2**48 elements")])
def test_initializer_dims_negative_or_huge(onnx_fixtures, tmp_path, dim, needle):
    def change(m):
        t = next(t for t in m.graph.initializer if not t.name.endswith("__SHAPE")) if any(
            not t.name.endswith("__SHAPE") for t in m.graph.initializer) else m.graph.initializer[0]
        t.dims.append(dim)
        return t.name
    assert needle in _damaged(onnx_fixtures, tmp_path, change)


def test_shape_tensor_values_negative(onnx_fixtures, tmp_path):
    import numpy as np
    from onnx import numpy_helper

    def change(m):
        t = _shape_tensor(m)
        t.CopyFrom(numpy_helper.from_array(np.array([64, -3, 1, 1], np.int64), t.name))
        return t.name
    assert "negative dimension" in _damaged(onnx_fixtures, tmp_path, change)


LAYER = "conv1 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1048576 5"


@pytest.mark.parametrize("text,needle", [
    (f"MICRO\n²\n{LAYER}\n", "line 2: expected the number of layers (1 or more), got '²'"),
    (f"MICRO\n0\n{LAYER}\n", "line 2: expected the number of layers (1 or more), got '0'"),
    ("MICRO\n1\nconv1 -1 ³ NONE 0 5 NONE 0 5 ALLREDUCE 1048576 5\n", "line 3: forward compute must be an integer, got '³'"),
    ("MICRO\n1\nconv1 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 99999999999999999999999 5\n",
     "line 3: weight-gradient comm size is 99999999999999999999999, more than 2**53"),
    ("HYBRID_DLRM ٣\n2\n" + LAYER + "\n" + LAYER + "\n", "needs the index of the last bottom layer"),
])
def test_text_workload_counts_and_numbers(tmp_path, text, needle):
    p = tmp_path / "wl.txt"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        read_text_workload(p)
    assert str(e.value) == f"wl.txt: {needle}" or needle in str(e.value), e.value
    assert "wl.txt" in str(e.value)


def test_text_workload_plain_numbers_still_read():
    wl = parse_text_workload(f"HYBRID_TRANSFORMER model_parallel_NPU_group: 4\n1\n{LAYER}\n")
    assert wl.model_parallel_group == 4 and wl.layers[0].wg.size == 1048576


def test_trace_convert_text_with_a_superscript_count(convert_cli, tmp_path):
    p = tmp_path / "micro.txt"
    p.write_text(f"MICRO\n²\n{LAYER}\n")
    code, out, err = convert_cli("text", str(p), "--npus", "4", "-o", str(tmp_path / "out"))
    assert code == 2 and err.strip().startswith("error: micro.txt: line 2:"), err
    assert not (tmp_path / "out").exists()
