"""The ModTrans per-layer parameter table, checked against arithmetic done here from each
architecture's definition and against published parameter counts."""

from __future__ import annotations

import json
import sys

import pytest

onnx = pytest.importorskip("onnx")

import onnx_builders as build  # noqa: E402

from chakra_tools.core.errors import InputError  # noqa: E402
from chakra_tools.frontends.onnx_model import summarize, summarize_model  # noqa: E402

#: REFERENCE §5 / the ModTrans paper: VGG16 and VGG19 conv0..conv5.
VGG_FIRST_SIX = [1728, 36864, 73728, 147456, 294912, 589824]


def conv_weights(cin_cout_k):
    return [cin * cout * k * k for cin, cout, k in cin_cout_k]


def resnet50_weight_counts() -> list[int]:
    """Every conv and fc weight of ResNet-50, from its definition (bottleneck blocks 3-4-6-3)."""
    counts = [3 * 64 * 7 * 7]
    cin = 64
    for blocks, width in zip([3, 4, 6, 3], [64, 128, 256, 512]):
        for blk in range(blocks):
            counts += conv_weights([(cin, width, 1), (width, width, 3), (width, 4 * width, 1)])
            if blk == 0:
                counts.append(cin * 4 * width)
            cin = 4 * width
    return counts + [2048 * 1000]


@pytest.mark.parametrize("weights", ["stripped", "external"])
def test_vgg16_first_six_convs_match_the_paper(weights):
    s = summarize_model(build.vgg(16, weights))
    assert [ly.params for ly in s.layers[:6]] == VGG_FIRST_SIX
    assert [ly.bytes for ly in s.layers[:6]] == [4 * p for p in VGG_FIRST_SIX]
    assert {ly.dtype for ly in s.layers} == {"FP32"}
    assert [ly.name for ly in s.layers[:6]] == [f"conv{i}" for i in range(6)]


def test_vgg19_first_six_convs_and_total():
    s = summarize_model(build.vgg(19))
    assert [ly.params for ly in s.layers[:6]] == VGG_FIRST_SIX
    # 16 convs + 3 fc; published VGG19 size 143,667,240 parameters with biases
    assert len(s.layers) == 19
    assert s.total_params + sum(ly.bias_params for ly in s.layers) == 143_667_240


def test_vgg16_total_is_the_published_count():
    s = summarize_model(build.vgg(16, "external"))
    assert len(s.layers) == 16
    assert s.total_params + sum(ly.bias_params for ly in s.layers) == 138_357_544


@pytest.mark.parametrize("weights", ["stripped", "external"])
def test_resnet50_layers_match_reference(weights):
    s = summarize_model(build.resnet50(weights))
    assert len(s.layers) == 54  # 53 convolutions + fc
    assert s.layers[0].params == 9408 and s.layers[0].bytes == 37632
    assert [ly.bytes for ly in s.layers[1:4]] == [16384, 147456, 65536]
    assert [ly.params for ly in s.layers] == resnet50_weight_counts()
    assert s.total_bytes == 4 * sum(resnet50_weight_counts()) == 102_011_648
    # with fc bias and BatchNorm scale+shift: torchvision's published 25,557,032
    assert s.total_params + s.layers[-1].bias_params + s.other_params == 25_557_032


def test_resnet50_flops_from_shapes():
    """Forward multiply-adds from the definition: HxW x Cout x Cin x k x k per conv."""
    s = summarize_model(build.resnet50())
    macs = 112 * 112 * 64 * 3 * 49
    cin, hw = 64, 56
    for stage, (blocks, width) in enumerate(zip([3, 4, 6, 3], [64, 128, 256, 512])):
        for blk in range(blocks):
            out_hw = hw // 2 if stage > 0 and blk == 0 else hw
            macs += hw * hw * width * cin + out_hw * out_hw * width * width * 9 \
                + out_hw * out_hw * 4 * width * width
            if blk == 0:
                macs += out_hw * out_hw * 4 * width * cin
            cin, hw = 4 * width, out_hw
    macs += 2048 * 1000
    assert sum(op.flops for op in s.ops if op.op in ("Conv", "Gemm")) == 2 * macs == 8_178_368_512


def test_external_data_files_are_read_and_may_be_absent(tmp_path):
    model = build.mlp("inline", (64, 128, 32))
    path = tmp_path / "mlp.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="mlp.onnx.data", size_threshold=0)
    assert (tmp_path / "mlp.onnx.data").stat().st_size == 4 * (64 * 128 + 128 + 128 * 32 + 32)
    want = [64 * 128, 128 * 32]
    assert [ly.params for ly in summarize(path).layers] == want
    (tmp_path / "mlp.onnx.data").unlink()  # only shapes are needed
    s = summarize(path)
    assert [ly.params for ly in s.layers] == want
    assert [ly.bias_params for ly in s.layers] == [128, 32]


def test_shipped_light_models(onnx_fixtures):
    """Weight-stripped models: counts from the architectures and their published totals."""
    alex = summarize(onnx_fixtures / "light_bvlc_alexnet.onnx")
    want = [96 * 3 * 11 * 11, 256 * 48 * 5 * 5, 384 * 256 * 9, 384 * 192 * 9, 256 * 192 * 9,
            4096 * 9216, 4096 * 4096, 1000 * 4096]
    assert [ly.params for ly in alex.layers] == want
    assert alex.total_params + sum(ly.bias_params for ly in alex.layers) == 60_965_224
    # fc6: one multiply-add per weight at batch 1
    assert next(op.flops for op in alex.ops if op.name == alex.layers[5].name) == 2 * 4096 * 9216
    squeeze = summarize(onnx_fixtures / "light_squeezenet.onnx")
    assert squeeze.layers[0].params == 64 * 3 * 3 * 3  # SqueezeNet 1.1
    assert squeeze.total_params + sum(ly.bias_params for ly in squeeze.layers) == 1_235_496
    inception = summarize(onnx_fixtures / "light_inception_v1.onnx")
    assert inception.layers[0].params == 64 * 3 * 7 * 7
    assert len(inception.layers) == 58  # 57 convolutions + the classifier
    assert inception.total_params + sum(ly.bias_params for ly in inception.layers) == 6_998_552
    assert not inception.notes  # every tensor has a static shape


def test_onnx_is_optional(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(InputError, match=r"pip install 'chakra-tools\[onnx\]'"):
        summarize(tmp_path / "x.onnx")


def test_not_a_model_names_the_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\x00 not protobuf")
    with pytest.raises(InputError, match="bad.onnx"):
        summarize(bad)
    with pytest.raises(InputError, match="no such file"):
        summarize(tmp_path / "missing.onnx")


def test_cli_table_and_json(tmp_path, convert_cli):
    path = tmp_path / "vgg16.onnx"
    onnx.save_model(build.vgg(16), str(path))
    code, out, _ = convert_cli("onnx", path, "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert [ly["params"] for ly in doc["layers"][:6]] == VGG_FIRST_SIX
    assert set(doc["layers"][0]) >= {"name", "params", "dtype", "bytes"}
    assert doc["total_params"] == sum(ly["params"] for ly in doc["layers"])
    code, out, _ = convert_cli("onnx", path)
    assert code == 0 and "conv0" in out and "1,728" in out and "6,912" in out
