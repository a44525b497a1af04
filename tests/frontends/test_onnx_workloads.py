"""ONNX -> ASTRA-sim 1.0 text and ET rank sets for data, tensor, pipeline and hybrid training."""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("onnx")

import onnx_builders as build  # noqa: E402

from chakra_tools.core.graph import Graph, RankSet  # noqa: E402
from chakra_tools.core.model import CommType, Node, NodeType, make_attrs  # noqa: E402
from chakra_tools.core.validate import validate_rankset  # noqa: E402
from chakra_tools.frontends import TextOptions, parse_text_workload, text_to_rankset  # noqa: E402
from chakra_tools.frontends import onnx_workload as ow  # noqa: E402
from chakra_tools.frontends.costs import DEVICES, MeasuredTimes, device  # noqa: E402
from chakra_tools.frontends.onnx_model import summarize_model  # noqa: E402
from chakra_tools.frontends.textwl import format_text_workload  # noqa: E402

from test_onnx_params import resnet50_weight_counts  # noqa: E402


@pytest.fixture(scope="module")
def resnet_layers():
    return ow.fold(summarize_model(build.resnet50(), "resnet50"), device("V100"))


def no_errors(rs: RankSet) -> RankSet:
    errors = [d for d in validate_rankset(rs) if d.severity == "error"]
    assert not errors, [str(e) for e in errors[:5]]
    return rs


def colls(graph, kind=None):
    return [n for n in graph if n.type is NodeType.COMM_COLL_NODE and (kind is None or n.comm_type is kind)]


def test_resnet50_data_parallel_text_is_astrasim_s(resnet_layers):
    """ASTRA-sim's Resnet50_DataParallel.txt all-reduces 4 bytes x every conv and fc weight."""
    wl = ow.to_text_workload(resnet_layers, "DATA", source="resnet50")
    text = format_text_workload(wl)
    lines = text.splitlines()
    assert lines[:2] == ["DATA", "54"]
    rows = [ln.split("\t") for ln in lines[2:]]
    assert all(r[3] == "NONE" and r[6] == "NONE" and r[9] == "ALLREDUCE" for r in rows)
    assert [int(r[10]) for r in rows] == [4 * w for w in resnet50_weight_counts()]
    assert sum(int(r[10]) for r in rows) == 102_011_648
    # and our text converter reads it back: 54 all-reduces of those sizes per NPU
    rs, _ = text_to_rankset(parse_text_workload(text, "resnet50.txt"), TextOptions(4))
    assert sum(n.comm_size for n in colls(rs[0], CommType.ALL_REDUCE)) == 102_011_648


def test_compute_cycles_follow_the_roofline(resnet_layers):
    """conv0 at batch 1: 2 x 118,013,952 MACs (+ BN, ReLU, pool folded in) on a V100."""
    v100 = DEVICES["V100"]
    conv0 = resnet_layers[0]
    assert conv0.name == "conv0" and conv0.flops >= 2 * 112 * 112 * 64 * 147
    assert conv0.fwd_ns >= round(2 * 112 * 112 * 64 * 147 / v100.peak_flops_32 * 1e9)
    wl = ow.to_text_workload(resnet_layers, "DATA", frequency_ghz=1.0)
    assert wl.layers[0].fwd.compute == conv0.fwd_ns  # 1 GHz: cycles = ns
    wl2 = ow.to_text_workload(resnet_layers, "DATA", frequency_ghz=2.0)
    assert wl2.layers[0].fwd.compute == 2 * conv0.fwd_ns


def test_hybrid_text_policies(resnet_layers):
    wl = ow.to_text_workload(resnet_layers, "HYBRID_TRANSFORMER", model_parallel=4)
    assert wl.options == {"model_parallel_NPU_group": 4}
    first = wl.layers[0]
    assert (first.fwd.comm, first.ig.comm, first.wg.comm) == ("ALLGATHER", "ALLREDUCE", "ALLREDUCE")
    assert first.wg.size == 37632 // 4
    assert first.fwd.size == resnet_layers[0].out_bytes // 4  # each NPU's share
    model = ow.to_text_workload(resnet_layers, "MODEL", model_parallel=8)
    assert {ly.wg.comm for ly in model.layers} == {"NONE"}
    for policy in ow.TEXT_POLICIES:
        text = format_text_workload(ow.to_text_workload(resnet_layers, policy, model_parallel=2))
        wl = parse_text_workload(text, policy)
        rs, _ = text_to_rankset(wl, TextOptions(8, dims=(2, 4)))
        no_errors(rs)


def test_data_parallel_ranks(resnet_layers):
    rs = no_errors(ow.onnx_rankset(resnet_layers, ow.strategy_for("data", 8)))
    for g in (rs[0], rs[7]):
        ar = colls(g, CommType.ALL_REDUCE)
        assert len(ar) == 54 and sum(n.comm_size for n in ar) == 102_011_648
        assert {rs.group_ranks(n.pg_name) for n in ar} == {tuple(range(8))}
    kinds = Counter(n.type for n in rs[0])
    assert kinds[NodeType.COMP_NODE] == 3 * 54 + 1  # fwd, ig, wg per layer + optimizer step


def test_tensor_parallel_ranks(resnet_layers):
    rs = no_errors(ow.onnx_rankset(resnet_layers, ow.strategy_for("tensor", 4)))
    g = rs[2]
    assert len(colls(g, CommType.ALL_GATHER)) == 54 and len(colls(g, CommType.ALL_REDUCE)) == 54
    # all-gather: each rank's quarter of the output (112x112x64 fp32 after conv0's pool: 56x56x64)
    ag0 = colls(g, CommType.ALL_GATHER)[0]
    assert ag0.comm_size == 56 * 56 * 64 * 4 // 4
    assert not colls(g, CommType.REDUCE_SCATTER)
    fwd0 = next(n for n in g if n.name.startswith("conv0.") and n.name.endswith(":fwd"))
    assert fwd0.attr("duration_ns") == resnet_layers[0].fwd_ns // 4


def test_pipeline_ranks(resnet_layers):
    rs = no_errors(ow.onnx_rankset(resnet_layers, ow.strategy_for("pipeline", 4, microbatches=4)))
    sends = Counter((r, n.type) for r in rs.ranks for n in rs[r] if n.type in
                    (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE))
    # first and last stage talk to one neighbour, the middle ones to two; 4 microbatches each way
    assert sends[(0, NodeType.COMM_SEND_NODE)] == 4 and sends[(0, NodeType.COMM_RECV_NODE)] == 4
    assert sends[(1, NodeType.COMM_SEND_NODE)] == 8 and sends[(3, NodeType.COMM_RECV_NODE)] == 4
    layers_per_stage = [sum(1 for n in rs[r] if n.name.endswith(".it0.mb0:fwd")) for r in rs.ranks]
    assert sum(layers_per_stage) == 54 and min(layers_per_stage) >= 1


def test_hybrid_ranks(resnet_layers):
    rs = no_errors(ow.onnx_rankset(resnet_layers, ow.strategy_for("hybrid", 8, tp=2, pp=2,
                                                                   microbatches=2, zero=1)))
    g = rs[5]  # tp 1, dp 0, pp 1
    groups = {rs.group_ranks(n.pg_name) for n in colls(g)}
    assert groups == {(4, 5), (5, 7)}  # its tensor group and its data group
    assert colls(g, CommType.REDUCE_SCATTER) and colls(g, CommType.ALL_GATHER)


def test_measured_times_replace_the_roofline(tmp_path):
    """The n-th Conv of the model takes the n-th outermost convolution time of the trace."""
    nodes, t = [], 0
    for i, dur in enumerate([100, 200, 300]):
        nodes.append(Node(2 * i, "aten::conv2d", NodeType.COMP_NODE, start_time_micros=t + 1,
                          duration_micros=dur, attrs=make_attrs(is_cpu_op=True)))
        nodes.append(Node(2 * i + 1, "aten::convolution", NodeType.COMP_NODE, start_time_micros=t + 2,
                          duration_micros=dur - 10))
        t += dur + 5
    nodes.append(Node(99, "ConvolutionBackward0", NodeType.COMP_NODE, start_time_micros=t + 1,
                      duration_micros=1200))
    Graph(nodes, rank=0).write(tmp_path / "trace.0.et")
    measured = MeasuredTimes.from_trace(tmp_path / "trace.0.et")
    assert measured.fwd["Conv"] == [100_000, 200_000, 300_000]
    net = build.Net("stripped")
    x = net.conv("c0", "x", 3, 8, 3)
    x = net.conv("c1", x, 8, 8, 3)
    model = net.model((1, 3, 8, 8), x)
    layers = ow.fold(summarize_model(model), None, measured)
    assert [ly.fwd_ns for ly in layers] == [100_000, 200_000]
    ratio = 1200 / 600  # measured backward / forward
    assert [ly.wg_ns for ly in layers] == [round(100_000 * ratio / 2), round(200_000 * ratio / 2)]


def test_cli_emit(tmp_path, convert_cli):
    import onnx

    path = tmp_path / "r50.onnx"
    onnx.save_model(build.resnet50(), str(path))
    code, out, _ = convert_cli("onnx", path, "--emit", "text", "--policy", "DATA")
    assert code == 0 and out.splitlines()[:2] == ["DATA", "54"]
    code, out, err = convert_cli("onnx", path, "--emit", "et", "--strategy", "hybrid", "--npus", "8",
                                 "--tp", "2", "--pp", "2", "--microbatches", "2", "-o", tmp_path / "et")
    assert code == 0, out + err
    rs = no_errors(RankSet.load(tmp_path / "et"))
    assert len(rs) == 8 and rs.prefix == "r50"


def test_measured_times_from_a_real_trace(unpack):
    """Chakra's own converter output of a 2-GPU CNN run: its convolutions time ResNet-50's."""
    trace = unpack("chakra/feeder_tests_trace.tar.gz") / "tests" / "data" / "chakra.0.et"
    measured = MeasuredTimes.from_trace(trace)
    convs = list(measured.fwd["Conv"])
    assert len(convs) >= 53 and all(t > 0 for t in convs)
    layers = ow.fold(summarize_model(build.resnet50()), device("V100"), measured)
    # layer 1 (stage 1's first 1x1 conv) folds conv, BatchNorm and ReLU: the 2nd of each kind
    assert layers[1].fwd_ns == convs[1] + measured.fwd["BatchNormalization"][1] + measured.fwd["Relu"][1]
