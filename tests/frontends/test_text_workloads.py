"""ASTRA-sim 1.0 text workloads -> ET: node counts, bytes, groups and durations, from the files'
columns and ASTRA-sim 1.0's loop rules, on the five workloads ASTRA-sim ships."""

from __future__ import annotations

from collections import Counter

import pytest

from chakra_tools.core.errors import InputError
from chakra_tools.core.model import CommType, NodeType
from chakra_tools.core.validate import validate_rankset
from chakra_tools.frontends import TextOptions, parse_text_workload, read_text_workload, text_to_rankset
from chakra_tools.frontends.builder import DURATION_NS
from chakra_tools.frontends.textwl import format_text_workload


def convert(path, npus=8, **kw):
    rs, notes = text_to_rankset(read_text_workload(path), TextOptions(npus, **kw))
    errors = [d for d in validate_rankset(rs) if d.severity == "error"]
    assert not errors, [str(e) for e in errors[:5]]
    return rs, notes


def colls(graph):
    return [n for n in graph if n.type is NodeType.COMM_COLL_NODE]


def columns(path):
    """The layer rows as token lists, read here without the parser."""
    lines = [ln.split() for ln in path.read_text().splitlines() if ln.strip()]
    return lines[2:2 + int(lines[1][0])]


def test_micro_all_reduce(text_workloads):
    rs, _ = convert(text_workloads / "microAllReduce.txt", npus=4)
    for g in rs:
        (n,) = list(g)
        assert n.comm_type is CommType.ALL_REDUCE and n.comm_size == 1_048_576
        assert rs.group_ranks(n.pg_name) == (0, 1, 2, 3) and not n.is_cpu_op


def test_model_parallel(text_workloads):
    path = text_workloads / "MLP_ModelParallel.txt"
    rows = columns(path)
    rs, notes = convert(path)
    g = rs[0]
    kinds = Counter(n.type for n in g)
    # 3 computations per layer; forward all-gather per layer; ig all-reduce but not layer 0;
    # MODEL never communicates weight gradients (their NONE columns are no nodes)
    assert kinds[NodeType.COMP_NODE] == 3 * 6
    assert [n.comm_type for n in colls(g)].count(CommType.ALL_GATHER) == 6
    assert [n.comm_type for n in colls(g)].count(CommType.ALL_REDUCE) == 5
    sent = sum(int(r[4]) for r in rows) + sum(int(r[7]) for r in rows[1:])
    assert sum(n.comm_size for n in colls(g)) == sent == 856_832
    assert all(n.comm_size > 0 for n in colls(g))
    assert {rs.group_ranks(n.pg_name) for n in colls(g)} == {tuple(range(8))}
    assert not notes


def test_units_are_cycles_not_microseconds(text_workloads):
    rs, _ = convert(text_workloads / "MLP_ModelParallel.txt")
    first = rs[0][0]
    assert first.name == "layer_64_1_mlp0:fwd"
    assert first.attr(DURATION_NS) == 32291  # cycles at 1 GHz
    assert first.duration_micros == 32  # not 32291 µs
    rs2, _ = convert(text_workloads / "MLP_ModelParallel.txt", frequency_ghz=2.0)
    assert rs2[0][0].attr(DURATION_NS) == 16146  # 32291 / 2, rounded
    total_ns = sum(n.attr(DURATION_NS, 0) for n in rs[0])
    rows = columns(text_workloads / "MLP_ModelParallel.txt")
    assert total_ns == sum(int(r[2]) + int(r[5]) + int(r[8]) for r in rows)


def test_hybrid_data_model_splits_by_dimension(text_workloads):
    path = text_workloads / "MLP_HybridParallel_Data_Model.txt"
    rs, notes = convert(path, dims=(2, 4))
    g = rs[5]
    groups = {(n.comm_type, rs.group_ranks(n.pg_name)) for n in colls(g)}
    # rank 5 = (dim0 1, dim1 2): model group = dim 0 {4,5}; data group = dim 1 {1,3,5,7}
    assert groups == {(CommType.ALL_GATHER, (4, 5)), (CommType.ALL_REDUCE, (4, 5)),
                      (CommType.ALL_REDUCE, (1, 3, 5, 7))}
    assert len(colls(g)) == 6 + 5 + 6
    rows = columns(path)
    assert sum(n.comm_size for n in colls(g)) == sum(
        int(r[4]) + int(r[10]) for r in rows) + sum(int(r[7]) for r in rows[1:]) == 1_304_064
    assert not notes
    # one dimension: the data dimensions do not exist, as in ASTRA-sim; said, not hidden
    rs1, notes1 = convert(path)
    assert len(colls(rs1[0])) == 11 and "6 wg collectives" in str(notes1[0])


def test_transformer_groups_and_bytes(text_workloads):
    path = text_workloads / "Transformer_HybridParallel.txt"
    rows = columns(path)
    rs, _ = convert(path)
    assert len(rs) == 8
    g = rs[6]
    # every non-NONE column communicates; ig too on layer 0 (blocking ig)
    want = sum(int(r[c + 1]) for r in rows for c in (3, 6, 9) if r[c] != "NONE")
    assert sum(n.comm_size for n in colls(g)) == want
    assert len(colls(g)) == sum(r[c] != "NONE" for r in rows for c in (3, 6, 9)) == 70
    assert len(g) == 3 * 57 + 70
    model = {rs.group_ranks(n.pg_name) for n in colls(g) if ":wg:" not in n.name}
    data = {rs.group_ranks(n.pg_name) for n in colls(g) if ":wg:" in n.name}
    assert model == {(4, 5, 6, 7)} and data == {(2, 6)}  # model_parallel_NPU_group: 4
    q1 = next(n for n in g if n.name == "Q1:fwd")
    assert q1.duration_micros == 3146 and q1.attr(DURATION_NS) == 3_145_728


def test_transformer_ig_comm_blocks_weight_gradient(text_workloads):
    rs, _ = convert(text_workloads / "Transformer_HybridParallel.txt")
    g = rs[0]
    by_name = {n.name: n for n in g}
    igc = by_name["Q1:ig:ALLREDUCE"]
    assert igc.id in by_name["Q1:wg"].data_deps


def test_dlrm(text_workloads):
    path = text_workloads / "DLRM_HybridParallel.txt"
    rs, notes = convert(path)
    g = rs[3]
    kinds = Counter(n.type for n in g)
    assert kinds[NodeType.COMP_NODE] == 8 + 8 + 7  # fwd, wg, ig (no ig on the embedding)
    a2a = [n for n in colls(g) if n.comm_type is CommType.ALL_TO_ALL]
    ar = [n for n in colls(g) if n.comm_type is CommType.ALL_REDUCE]
    assert [n.name for n in a2a] == ["Embedding:fwd:ALLTOALL", "Embedding:ig:ALLTOALL"]
    assert len(ar) == 7 and sum(n.comm_size for n in ar) == 3_191_808
    by_name = {n.name: n for n in g}
    # the first top layer waits for the embedding all-to-all (last bottom layer = 4)
    assert a2a[0].id in by_name["MLP_Top_0:fwd"].data_deps
    # the backward all-to-all follows the first top layer's input gradient
    assert by_name["MLP_Top_0:ig"].id in a2a[1].data_deps
    assert not notes


def test_customized_layers_pick_their_own_policy():
    wl = parse_text_workload(
        "HYBRID_CUSTOMIZED\n2\n"
        "a -1 10 ALLGATHER 64 10 ALLREDUCE 64 10 ALLREDUCE 128 0 DATA\n"
        "b -1 10 ALLGATHER 64 10 ALLREDUCE 64 10 ALLREDUCE 128 0 HYBRID_DATA_MODEL\n", "c.txt")
    rs, _ = text_to_rankset(wl, TextOptions(8, dims=(2, 4)))
    names = {n.name: rs.group_ranks(n.pg_name) for n in colls(rs[0])}
    assert names == {"a:wg:ALLREDUCE": tuple(range(8)), "b:fwd:ALLGATHER": (0, 1),
                     "b:ig:ALLREDUCE": (0, 1), "b:wg:ALLREDUCE": (0, 2, 4, 6)}


def test_passes_chain_on_weight_gradients(text_workloads):
    rs, _ = convert(text_workloads / "MLP_ModelParallel.txt", passes=2)
    assert len(rs[0]) == 2 * 29
    rs, _ = text_to_rankset(parse_text_workload(
        "DATA\n1\nx -1 1000 NONE 0 1000 NONE 0 1000 ALLREDUCE 4096 2000\n"), TextOptions(2, passes=2))
    g = list(rs[0])
    update = next(n for n in g if n.name == "x:update")
    second_fwd = [n for n in g if n.name == "x:fwd"][1]
    assert update.id in second_fwd.data_deps and update.attr(DURATION_NS) == 2000


def test_every_fixture_validates_and_round_trips(text_workloads):
    for path in sorted(text_workloads.glob("*.txt")):
        wl = read_text_workload(path)
        again = parse_text_workload(format_text_workload(wl), path.name)
        assert again.layers == tuple(ly.__class__(**{**ly.__dict__, "line": again.layers[i].line})
                                     for i, ly in enumerate(wl.layers))
        convert(path, dims=(2, 4) if "Data_Model" in path.name else None)


@pytest.mark.parametrize("text, message", [
    ("DATA\n1\na -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8\n", "x.txt: line 3: expected 12 columns, got 11"),
    ("DATA\n2\na -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 0\n", "x.txt: line 2 promises 2 layers, the file has 1"),
    ("DATA\n1\na -1 1 NONE 0 1 NONE 0 1 ALLRED 8 0\n", "x.txt: line 3: unknown communication 'ALLRED'"),
    ("DATA\n1\na -1 1 NONE 0 x NONE 0 1 ALLREDUCE 8 0\n", "x.txt: line 3: input-gradient compute must be an integer"),
    ("PIPE\n1\n", "x.txt: line 1: unknown parallelism 'PIPE'"),
    ("HYBRID_TRANSFORMER\n1\na -1 1 NONE 0 1 NONE 0 1 NONE 0 0\n", "model_parallel_NPU_group"),
    ("DATA\n\n", "the number of layers is missing"),
])
def test_errors_name_file_and_line(text, message):
    with pytest.raises(InputError) as e:
        parse_text_workload(text, "x.txt")
    assert message in str(e.value)


def test_differs_from_chakra_text_converter_on_purpose(text_workloads, tmp_path):
    """Chakra's converter stores cycles as µs and turns NONE into zero-byte all-reduces."""
    converter = pytest.importorskip("chakra.src.converter.text_converter")
    from chakra_tools.core.graph import RankSet

    path = text_workloads / "MLP_ModelParallel.txt"
    converter.TextConverter(str(path), str(tmp_path / "chakra"), 2, 1).convert()
    theirs = RankSet.load(tmp_path / "chakra")[0]
    ours, _ = convert(path, npus=2)
    fwd = lambda g: next(n for n in g if n.type is NodeType.COMP_NODE)  # noqa: E731
    assert fwd(theirs).duration_micros == 32291  # 32 ms for 32,291 cycles
    assert fwd(ours[0]).duration_micros == 32
    data = tmp_path / "data.txt"  # a layer without weights: NONE in its weight-gradient column
    data.write_text("DATA\n2\nfc -1 10 NONE 0 10 NONE 0 10 ALLREDUCE 4096 0\n"
                    "relu -1 10 NONE 0 10 NONE 0 10 NONE 0 0\n")
    converter.TextConverter(str(data), str(tmp_path / "data"), 2, 1).convert()
    theirs = RankSet.load(tmp_path / "data")[0]
    zero = [n for n in theirs if n.type is NodeType.COMM_COLL_NODE and n.comm_size == 0]
    assert len(zero) == 1 and zero[0].comm_type is CommType.ALL_REDUCE
    ours, _ = convert(data, npus=2)
    assert [(n.comm_type, n.comm_size) for n in colls(ours[0])] == [(CommType.ALL_REDUCE, 4096)]


def test_cli_text(text_workloads, tmp_path, convert_cli):
    code, out, _ = convert_cli("text", text_workloads / "DLRM_HybridParallel.txt", "--npus", "4",
                               "-o", tmp_path, "--json")
    assert code == 0, out
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "DLRM_HybridParallel.0.et", "DLRM_HybridParallel.1.et", "DLRM_HybridParallel.2.et",
        "DLRM_HybridParallel.3.et", "comm_group.json"]
    code, out, err = convert_cli("text", tmp_path / "nope.txt", "--npus", "4", "-o", tmp_path)
    assert code == 2 and "nope.txt: cannot read" in err


def test_inference_is_forward_only():
    wl = parse_text_workload("DISTRIBUTED_INFERENCE\n2\na -1 1000 ALLREDUCE 64 1000 NONE 0 1000 NONE 0 0\n"
                             "b -1 1000 ALLREDUCE 64 1000 NONE 0 1000 NONE 0 0\n")
    rs, _ = text_to_rankset(wl, TextOptions(2))
    assert [n.name for n in rs[0]] == ["a:fwd", "a:fwd:ALLREDUCE", "b:fwd", "b:fwd:ALLREDUCE"]
