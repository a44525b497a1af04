"""The transformer generator: rank sets that validate, with the collectives each strategy needs,
counted here from the model's definition."""

from __future__ import annotations

from collections import Counter

import pytest

from chakra_tools.core.graph import RankSet
from chakra_tools.core.model import CommType, NodeType
from chakra_tools.core.validate import validate_rankset
from chakra_tools.frontends import TransformerConfig, generate

SMALL = dict(layers=2, hidden=256, heads=4, seq=128, batch=16, vocab=1024)


def no_errors(rs: RankSet) -> RankSet:
    errors = [d for d in validate_rankset(rs) if d.severity == "error"]
    assert not errors, [str(e) for e in errors[:5]]
    return rs


def colls(graph, kind=None, label=""):
    return [n for n in graph if n.type is NodeType.COMM_COLL_NODE
            and (kind is None or n.comm_type is kind) and label in n.name]


def test_data_parallel_all_reduces_every_parameter_once():
    cfg = TransformerConfig(**SMALL, dp=4)
    rs = no_errors(generate(cfg))
    h, f, v, L = 256, 1024, 1024, 2
    params = 2 * v * h + L * (4 * h * h + 2 * h * f)  # embedding, lm_head, attention, MLP
    for g in rs:
        ar = colls(g, CommType.ALL_REDUCE, "grad_allreduce")
        assert len(ar) == 2 + 2 * L
        assert sum(n.comm_size for n in ar) == 2 * params  # bf16 gradients
    assert rs.comm_groups["1"] == (0, 1, 2, 3)


def test_tensor_parallel_all_reduces_per_block():
    cfg = TransformerConfig(**SMALL, tp=2, microbatches=2, dp=2)
    rs = no_errors(generate(cfg))
    g = rs[3]
    tp = colls(g, CommType.ALL_REDUCE, "tp_allreduce")
    # per microbatch: embedding fwd, 2 per block fwd, 2 per block bwd, lm_head bwd
    assert len(tp) == 2 * (1 + 2 * 2 + 2 * 2 + 1)
    b = 16 // (2 * 2)
    assert {n.comm_size for n in tp} == {b * 128 * 256 * 2}
    assert {rs.group_ranks(n.pg_name) for n in tp} == {(2, 3)}


def test_pipeline_sends_one_activation_per_microbatch():
    cfg = TransformerConfig(**SMALL, pp=2, microbatches=4)
    rs = no_errors(generate(cfg))
    k0 = Counter(n.type for n in rs[0])
    k1 = Counter(n.type for n in rs[1])
    assert k0[NodeType.COMM_SEND_NODE] == k1[NodeType.COMM_RECV_NODE] == 4 + 0
    assert k0[NodeType.COMM_RECV_NODE] == k1[NodeType.COMM_SEND_NODE] == 4
    send = next(n for n in rs[0] if n.type is NodeType.COMM_SEND_NODE)
    assert send.comm_size == (16 // 4) * 128 * 256 * 2 and send.comm_dst == 1


def test_moe_all_to_alls_and_expert_groups():
    cfg = TransformerConfig(**SMALL, dp=4, ep=2, experts=4, top_k=2)
    rs = no_errors(generate(cfg))
    g = rs[1]
    a2a = colls(g, CommType.ALL_TO_ALL)
    assert len(a2a) == 2 * 4  # per block: dispatch and combine, forward and backward
    assert {rs.group_ranks(n.pg_name) for n in a2a} == {(0, 1)}
    expert_grads = [n for n in colls(g, label="grad_allreduce") if ".moe." in n.name]
    assert {rs.group_ranks(n.pg_name) for n in expert_grads} == {(1, 3)}


@pytest.mark.parametrize("zero, rs_count, ag_count", [(1, 6, 6), (2, 6, 6), (3, 6, 2 * 6 * 2)])
def test_zero_stages(zero, rs_count, ag_count):
    rs = no_errors(generate(TransformerConfig(**SMALL, dp=2, zero=zero, microbatches=2)))
    g = rs[0]
    assert len(colls(g, CommType.REDUCE_SCATTER)) == rs_count
    assert len(colls(g, CommType.ALL_GATHER)) == ag_count
    assert not colls(g, CommType.ALL_REDUCE, "grad_allreduce")


def test_8_ranks_hybrid_validate_and_write(tmp_path):
    cfg = TransformerConfig(**SMALL, tp=2, dp=2, pp=2, microbatches=2, zero=1, iterations=2)
    rs = no_errors(generate(cfg))
    rs.write(tmp_path, "gpt")
    again = no_errors(RankSet.load(tmp_path))
    assert len(again) == 8 and again.comm_groups == rs.comm_groups


def test_64_ranks_validate():
    cfg = TransformerConfig(layers=4, hidden=512, heads=8, seq=256, batch=64, vocab=4096,
                            tp=2, dp=8, pp=4, ep=4, experts=8, microbatches=2, zero=1)
    rs = no_errors(generate(cfg))
    assert len(rs) == 64


def test_1024_ranks(tmp_path):
    cfg = TransformerConfig(layers=8, hidden=4096, heads=32, seq=2048, batch=1024, tp=8, dp=32,
                            pp=4, microbatches=4, zero=1)
    rs = generate(cfg)
    assert len(rs) == 1024
    files = rs.write(tmp_path, "gpt")
    assert len(files) == 1025
    no_errors(rs)


@pytest.mark.parametrize("bad, message", [
    (dict(batch=10, dp=4), "batch 10 must split evenly"),
    (dict(tp=3), "divisible by tp 3"),
    (dict(dp=4, ep=2), "needs a mixture-of-experts"),
    (dict(zero=4, dp=2), "ZeRO stage"),
])
def test_bad_configs_are_explained(bad, message):
    from chakra_tools.core.errors import InputError

    with pytest.raises(InputError, match=message):
        generate(TransformerConfig(**{**SMALL, **bad}))


def test_cli_generate_with_config(tmp_path, convert_cli):
    cfg = tmp_path / "gpt.yml"
    cfg.write_text("layers: 2\nhidden: 256\nheads: 4\nseq: 128\nbatch: 16\nvocab: 1024\ntp: 2\n")
    code, out, err = convert_cli("generate", "--config", cfg, "--dp", "2", "-o", tmp_path / "out")
    assert code == 0, out + err
    assert len(no_errors(RankSet.load(tmp_path / "out"))) == 4
    cfg.write_text("layerz: 2\n")
    code, out, err = convert_cli("generate", "--config", cfg, "-o", tmp_path / "out2")
    assert code == 2 and "unknown keys layerz" in err


@pytest.mark.parametrize("name, ranks", [("gpt_8rank", 8), ("moe_64rank", 64)])
def test_example_configs(name, ranks):
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "workloads" / f"{name}.yml"
    rs = no_errors(generate(TransformerConfig.from_file(path)))
    assert len(rs) == ranks


def test_zero1_traffic_equals_an_all_reduce():
    """Reduce-scatter of every gradient, then each rank all-gathers its 1/dp of the parameters."""
    rs = no_errors(generate(TransformerConfig(**SMALL, dp=4, zero=1)))
    h, f, v, L = 256, 1024, 1024, 2
    grad_bytes = 2 * (2 * v * h + L * (4 * h * h + 2 * h * f))
    g = rs[2]
    assert sum(n.comm_size for n in colls(g, CommType.REDUCE_SCATTER)) == grad_bytes
    assert sum(n.comm_size for n in colls(g, CommType.ALL_GATHER)) == grad_bytes // 4


def test_chakra_reads_generated_traces(tmp_path):
    """mlc-chakra's own reader decodes what we generate, contract kinds included."""
    ref = pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    protolib = pytest.importorskip("chakra.src.third_party.utils.protolib")
    rs = generate(TransformerConfig(**SMALL, tp=2, pp=2, microbatches=2))
    rs.write(tmp_path, "w")
    with open(tmp_path / "w.0.et", "rb") as f:
        protolib.decodeMessage(f, ref.GlobalMetadata())
        nodes = []
        while True:
            m = ref.Node()
            if not protolib.decodeMessage(f, m):
                break
            nodes.append(m)
    assert len(nodes) == len(rs[0])
    send = next(m for m in nodes if m.type == ref.COMM_SEND_NODE)
    kinds = {a.name: a.WhichOneof("value") for a in send.attr}
    assert kinds["comm_dst"] == kinds["comm_tag"] == kinds["comm_src"] == "int32_val"
    coll = next(m for m in nodes if m.type == ref.COMM_COLL_NODE)
    kinds = {a.name: a.WhichOneof("value") for a in coll.attr}
    assert kinds["comm_size"] == kinds["comm_type"] == "int64_val" and kinds["pg_name"] == "string_val"


def test_generate_says_what_it_needs_instead_of_a_default_workload(tmp_path, convert_cli):
    code, out, err = convert_cli("generate", "-o", tmp_path / "nothing")
    assert code == 2 and "nothing says what to generate" in err and not (tmp_path / "nothing").exists()
    code, out, err = convert_cli("generate", "--layers", "2")
    assert code == 2 and "--out" in err
