"""Runs we trace ourselves: plain torch.profiler (raw c10d/gloo ops, no annotations) and
trace-capture runs of the examples (annotated). Expected sizes come from the scripts' own
parameters (convert_workload.FACTS, examples/*.py), not from our output."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from chakra_tools.convert.run import convert, inputs_from_files, inputs_from_run
from chakra_tools.core.graph import RankSet
from chakra_tools.core.model import CommType, NodeType
from chakra_tools.core.validate import validate_rankset

from convert_helpers import mlc_attr, read_with_mlc
from convert_workload import FACTS

F32 = 4


def _raw_inputs(run, with_device=True):
    hosts = [str(run / f"host-{r}.json") for r in (0, 1)]
    devs = [str(run / f"device-{r}.json") for r in (0, 1)] if with_device else []
    return inputs_from_files(hosts, devs, [])


def _comms(g):
    return [n for n in g if n.type.is_comm]


@pytest.fixture(scope="module")
def raw_out(raw_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("raw_out")
    convert(_raw_inputs(raw_run), out, executor="serial", adapt=None)  # every recorded kind
    return RankSet.load(out)


def test_raw_gloo_collectives_sizes(raw_out):
    want = {CommType.ALL_REDUCE: FACTS["all_reduce"] * F32, CommType.ALL_GATHER: FACTS["all_gather"] * F32,
            CommType.BROADCAST: FACTS["broadcast"] * F32, CommType.REDUCE: FACTS["reduce"] * F32,
            CommType.ALL_TO_ALL: FACTS["all_to_all"] * F32, CommType.BARRIER: 0}
    for g in raw_out:
        colls = [n for n in _comms(g) if n.type is NodeType.COMM_COLL_NODE]
        assert {n.comm_type: n.comm_size for n in colls} == want
        assert all(n.duration_micros > 0 and not n.is_cpu_op for n in colls)
        assert all(n.name.startswith("gloo:") for n in colls)


def test_raw_send_recv_pair(raw_out):
    (send,) = [n for n in raw_out[0] if n.type is NodeType.COMM_SEND_NODE]
    (recv,) = [n for n in raw_out[1] if n.type is NodeType.COMM_RECV_NODE]
    assert (send.comm_src, send.comm_dst, send.comm_tag, send.comm_size) == (0, 1, FACTS["tag"], FACTS["send"] * F32)
    assert (recv.comm_src, recv.comm_dst, recv.comm_tag, recv.comm_size) == (0, 1, FACTS["tag"], FACTS["send"] * F32)


def test_raw_mlp_flops_and_exclusive_durations(raw_out):
    b, i, o = FACTS["mlp"]
    g = raw_out[0]
    (addmm,) = [n for n in g if n.name == "aten::addmm"]
    assert addmm.num_ops == 2 * b * i * o + b * o
    assert addmm.tensor_size == (o + b * i + i * o + b * o) * F32
    (linear,) = [n for n in g if n.name == "aten::linear"]
    assert linear.num_ops == 0  # counted once, on addmm
    mms = [n for n in g if n.name == "aten::mm"]
    assert [n.num_ops for n in mms] == [2 * o * b * i]  # grad of the weight only (x needs none)
    assert linear.duration_micros < linear.duration_micros + addmm.duration_micros
    assert all(n.start_time_micros > 0 for n in g if n.type is not NodeType.METADATA_NODE)


def test_raw_dependencies(raw_out):
    g = raw_out[0]
    (ar,) = [n for n in g if n.comm_type is CommType.ALL_REDUCE and n.type.is_comm]
    # a blocking gloo call sits in the thread's chain: the next host op waits for it
    nxt = min((n for n in g if n.id > ar.id and n.is_cpu_op), key=lambda n: n.id)
    assert ar.id in nxt.data_deps
    # the op that reads the all-reduced tensor depends on the collective
    (mul,) = [n for n in g if n.name == "aten::mul"]
    assert ar.id in mul.data_deps
    assert g.find_cycle() is None and all(not n.ctrl_deps for n in g)


def test_raw_host_only_conversion(raw_run, tmp_path):
    report = convert(_raw_inputs(raw_run, with_device=False), tmp_path, executor="serial", adapt=None)
    assert report.diagnostics.counts.get("durations-missing") == 2
    rs = RankSet.load(tmp_path)
    assert all(n.duration_micros == 0 for g in rs for n in g)
    assert Counter(n.comm_type for n in _comms(rs[0]) if n.type is NodeType.COMM_COLL_NODE)[CommType.ALL_REDUCE] == 1


# --- trace-capture runs of the examples ---------------------------------------------------------

@pytest.fixture(scope="module")
def collectives_out(collectives_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("coll_out")
    convert(inputs_from_run(collectives_run), out, adapt=None)  # every recorded kind
    return RankSet.load(out)


def test_every_collective_kind_of_the_enum(collectives_out):
    kinds = {n.comm_type for n in _comms(collectives_out[0]) if n.type is NodeType.COMM_COLL_NODE}
    assert kinds == set(CommType) - {CommType.REDUCE_SCATTER_BLOCK}


def test_collective_sizes_from_the_example(collectives_out):
    """examples/collectives.py, first call of each kind on 2 ranks (float32 unless noted)."""
    for rank, a2av in ((0, (1 + 2) * 4), (1, (2 + 3) * 4)):
        g = collectives_out[rank]
        first = {}
        for n in _comms(g):
            if n.type is NodeType.COMM_COLL_NODE:
                first.setdefault(n.comm_type, n)
        assert first[CommType.ALL_REDUCE].comm_size == 16 * F32
        assert first[CommType.REDUCE].comm_size == 24 * F32
        assert first[CommType.BROADCAST].comm_size == 32 * F32
        assert first[CommType.ALL_GATHER].comm_size == 8 * F32
        assert first[CommType.GATHER].comm_size == 12 * F32
        assert first[CommType.SCATTER].comm_size == 14 * F32
        assert first[CommType.REDUCE_SCATTER].comm_size == 2 * 6 * F32
        a2a = [n for n in g if n.comm_type is CommType.ALL_TO_ALL and n.type.is_comm]
        assert a2a[0].comm_size == 2 * 3 * F32
        assert a2a[1].comm_size == a2av * F32
        assert a2a[1].attr("in_split") == tuple((rank + 1 + p) * 4 for p in (0, 1))  # elements


def test_process_groups_are_global_integers(collectives_out, collectives_run):
    manifest = json.loads((collectives_run / "manifest.json").read_text())
    groups = collectives_out.comm_groups
    assert len(groups) == len(manifest["process_groups"])
    assert groups["1"] == (0, 1)  # the world group, always id 1
    sub = [n for n in _comms(collectives_out[0]) if n.attr("dtype") == "float64" and n.comm_type is CommType.ALL_REDUCE]
    assert sub and {n.pg_name for n in sub} == {"2"} and {n.comm_size for n in sub} == {20 * 8}
    for r in (0, 1):  # the same pg_name sequence on both ranks
        assert [n.pg_name for n in _comms(collectives_out[r]) if n.type is NodeType.COMM_COLL_NODE] == \
               [n.pg_name for n in _comms(collectives_out[0]) if n.type is NodeType.COMM_COLL_NODE]


def test_sends_and_receives_pair_across_ranks(collectives_out):
    sends, recvs = defaultdict(list), defaultdict(list)
    for g in collectives_out:
        for n in g:
            if n.type is NodeType.COMM_SEND_NODE:
                sends[(n.comm_src, n.comm_dst)].append((n.comm_tag, n.comm_size))
                assert n.comm_src == g.rank
            elif n.type is NodeType.COMM_RECV_NODE:
                recvs[(n.comm_src, n.comm_dst)].append((n.comm_tag, n.comm_size))
                assert n.comm_dst == g.rank
    assert sends and sends == recvs
    sizes = {s for v in sends.values() for _, s in v}
    assert {40 * F32, 44 * F32, 48 * 2} <= sizes  # blocking, isend tag 7, batched bf16 tag 3
    tags = {t for v in sends.values() for t, _ in v}
    assert {7, 3} <= tags
    assert [d for d in validate_rankset(collectives_out) if d.severity == "error"] == []


def test_collectives_output_reads_in_mlc(collectives_out, tmp_path):
    collectives_out.write(tmp_path)
    _, nodes = read_with_mlc(tmp_path / "trace.1.et")
    sends = [n for n in nodes if n.type == 5]
    assert sends and all(isinstance(mlc_attr(n, "comm_dst"), int) and mlc_attr(n, "comm_tag") is not None
                         for n in sends)
    assert all(mlc_attr(n, "pg_name").isdecimal() for n in nodes if n.type in (5, 6, 7))


def test_ddp_all_reduce_is_the_gradient_bucket(ddp_run, tmp_path):
    convert(inputs_from_run(ddp_run), tmp_path)
    rs = RankSet.load(tmp_path)
    width = 256  # examples/ddp.py default: Linear(64, width) -> ReLU -> Linear(width, 1)
    param_bytes = (64 * width + width + width * 1 + 1) * F32
    steps = json.loads((ddp_run / "manifest.json").read_text())["captured_steps"]
    for g in rs:
        ar = [n for n in g if n.type.is_comm and n.comm_type is CommType.ALL_REDUCE]
        assert [n.comm_size for n in ar] == [param_bytes] * len(steps)
    assert [d for d in validate_rankset(rs) if d.severity == "error"] == []


def test_single_process_mlp_capture(mlp_run):
    from chakra_tools.convert import convert_run

    report = convert_run(mlp_run)
    rs = RankSet.load(mlp_run / "chakra")
    assert rs.ranks == [0] and rs.comm_groups == {"1": (0,)}
    assert report.files and not report.errors
    g = rs[0]
    steps = len(json.loads((mlp_run / "manifest.json").read_text())["captured_steps"])
    batch, width = 64, 256  # examples/mlp.py defaults: 64 -> 256 -> 256 -> 1
    addmm = sorted({n.num_ops for n in g if n.name == "aten::addmm"})
    assert addmm == sorted({2 * batch * 64 * width + batch * width,
                            2 * batch * width * width + batch * width,
                            2 * batch * width * 1 + batch * 1})
    assert sum(n.name == "aten::addmm" for n in g) == 3 * steps
    assert not [n for n in g if n.type.is_comm]
    host = [n for n in g if n.is_cpu_op and n.type is NodeType.COMP_NODE]
    assert all(n.start_time_micros > 0 for n in host) and sum(n.duration_micros for n in host) > 0


def test_pipeline_sends_and_receives_pair(pipeline_run, tmp_path):
    """examples/pipeline.py on 2 ranks: per step 4 microbatches of 16 x 128 float32 go forward
    (tags 0..3) and their gradients come back (tags 103..100)."""
    convert(inputs_from_run(pipeline_run), tmp_path)
    rs = RankSet.load(tmp_path)
    steps = len(json.loads((pipeline_run / "manifest.json").read_text())["captured_steps"])
    msg = 16 * 128 * F32

    def p2p(rank, kind):
        return [(n.comm_src, n.comm_dst, n.comm_tag, n.comm_size) for n in rs[rank] if n.type is kind]

    fwd = [(0, 1, m, msg) for m in range(4)] * steps
    bwd = [(1, 0, 100 + m, msg) for m in reversed(range(4))] * steps
    assert p2p(0, NodeType.COMM_SEND_NODE) == fwd and p2p(1, NodeType.COMM_RECV_NODE) == fwd
    assert p2p(1, NodeType.COMM_SEND_NODE) == bwd and p2p(0, NodeType.COMM_RECV_NODE) == bwd
    assert [d for d in validate_rankset(rs) if d.severity == "error"] == []
