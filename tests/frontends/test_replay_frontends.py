"""Generated and converted rank sets replay to the end (no deadlock) at 8 and 64 ranks."""

from __future__ import annotations

import pytest

from chakra_tools.frontends import TextOptions, TransformerConfig, generate, read_text_workload, text_to_rankset

replay_mod = pytest.importorskip("chakra_tools.replay")


def replayed(rs, tmp_path):
    """Write, replay with the default analytical network, and return the makespan in ns."""
    rs.write(tmp_path, "w")
    result = replay_mod.replay(tmp_path, replay_mod.AnalyticalBackend(replay_mod.default_network(len(rs))))
    return result.makespan_ns


def critical_compute_ns(graph) -> int:
    """A lower bound on a rank's time: its compute nodes run one at a time."""
    return sum(max(1, n.duration_micros * 1000) for n in graph if n.type.name == "COMP_NODE")


@pytest.mark.parametrize("cfg", [
    dict(tp=2, dp=2, pp=2, microbatches=2, zero=1, iterations=2),
    dict(tp=1, dp=8, zero=3, microbatches=2, batch=32),
    dict(tp=1, dp=4, pp=2, ep=2, experts=4, microbatches=2),
], ids=["tp2-dp2-pp2-zero1", "fsdp8", "moe-ep2-pp2"])
def test_generated_8_ranks_replay(cfg, tmp_path):
    rs = generate(TransformerConfig(**{**dict(layers=2, hidden=256, heads=4, seq=128, batch=16,
                                              vocab=1024), **cfg}))
    assert len(rs) == 8
    makespan = replayed(rs, tmp_path)
    assert makespan >= max(critical_compute_ns(g) for g in rs)


def test_generated_64_ranks_replay(tmp_path):
    rs = generate(TransformerConfig(layers=4, hidden=512, heads=8, seq=256, batch=64, vocab=4096,
                                    tp=2, dp=8, pp=4, ep=4, experts=8, microbatches=2, zero=1))
    assert len(rs) == 64
    assert replayed(rs, tmp_path) >= max(critical_compute_ns(g) for g in rs)


@pytest.mark.parametrize("name, dims", [
    ("Transformer_HybridParallel", None), ("DLRM_HybridParallel", None),
    ("MLP_HybridParallel_Data_Model", (2, 4)), ("MLP_ModelParallel", None),
    ("microAllReduce", None)])
def test_text_workloads_replay(name, dims, text_workloads, tmp_path):
    wl = read_text_workload(text_workloads / f"{name}.txt")
    rs, _ = text_to_rankset(wl, TextOptions(8, dims=dims, passes=2))
    assert replayed(rs, tmp_path) >= max(critical_compute_ns(g) for g in rs)


def test_text_workload_64_ranks_replay(text_workloads, tmp_path):
    wl = read_text_workload(text_workloads / "Transformer_HybridParallel.txt")
    rs, _ = text_to_rankset(wl, TextOptions(64))
    assert replayed(rs, tmp_path) > 0


def test_onnx_strategies_replay(tmp_path):
    pytest.importorskip("onnx")
    import onnx_builders as build

    from chakra_tools.frontends import onnx_workload as ow
    from chakra_tools.frontends.costs import device
    from chakra_tools.frontends.onnx_model import summarize_model

    layers = ow.fold(summarize_model(build.resnet50()), device("A100"))
    for i, (name, kw) in enumerate([("data", {}), ("tensor", {}), ("pipeline", dict(microbatches=4)),
                                    ("hybrid", dict(tp=2, pp=2, microbatches=2))]):
        rs = ow.onnx_rankset(layers, ow.strategy_for(name, 8, **kw))
        assert replayed(rs, tmp_path / name) > 0
