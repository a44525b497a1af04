"""Every real fixture converts, and the facts the traces record come out right.

Expected values are read from the raw input files by the tests themselves (independently of the
converter's parsing), or are documented facts of the fixtures (PROVENANCE.md).
"""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from chakra_tools.convert.rank import convert_rank
from chakra_tools.convert.run import convert, inputs_from_files
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import CommType, NodeType
from chakra_tools.core.validate import validate_rankset

from convert_helpers import mlc_attr, read_with_mlc


def _load(path):
    with (gzip.open(path) if str(path).endswith(".gz") else open(path, "rb")) as f:
        return json.load(f)


def _colls(graph: Graph, ct: CommType):
    return [n for n in graph if n.type is NodeType.COMM_COLL_NODE and n.comm_type is ct]


@pytest.fixture(scope="module")
def dlrm_out(dlrm, tmp_path_factory):
    out = tmp_path_factory.mktemp("dlrm_out")
    inputs = inputs_from_files([str(h) for h, _ in dlrm], [str(d) for _, d in dlrm], [])
    report = convert(inputs, out, executor="process", jobs=2)
    return out, report


def test_dlrm_rank0_collectives_match_the_raw_trace(dlrm, dlrm_out):
    out, _ = dlrm_out
    raw = _load(dlrm[0][0])["nodes"]
    # 1.0.1: the nccl:* op's first input is the tensor (numel at index 3, itemsize at 4)
    want = {kind: sorted(n["inputs"][0][3] * n["inputs"][0][4] for n in raw if n["name"] == f"nccl:{kind}")
            for kind in ("all_to_all", "all_reduce")}
    assert len(want["all_to_all"]) == 5 and len(want["all_reduce"]) == 3
    g = RankSet.load(out)[0]
    a2a, ar = _colls(g, CommType.ALL_TO_ALL), _colls(g, CommType.ALL_REDUCE)
    assert sorted(n.comm_size for n in a2a) == want["all_to_all"]
    assert sorted(n.comm_size for n in ar) == want["all_reduce"]
    assert sorted(n.comm_size for n in ar) == [112 * 4, 226960 * 4, 394241 * 4]
    assert all(not n.is_cpu_op and n.pg_name == "1" for n in a2a + ar)
    # alltoallv split sizes survive (PROVENANCE: all_to_all(v)); the uneven one of rank 0:
    splits = [n.attr("in_split") for n in a2a]
    assert (96, 224, 288, 1664, 592, 96, 192, 240) in splits
    assert all(n.attr("dtype") in ("float32", "int32", "int64") for n in a2a)


def test_dlrm_collective_durations_are_the_nccl_kernels(dlrm, dlrm_out):
    out, _ = dlrm_out
    events = _load(dlrm[0][1])["traceEvents"]
    kernels = sorted((e["ts"], e["dur"]) for e in events
                     if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_AllReduce"))
    g = RankSet.load(out)[0]
    ar = sorted(_colls(g, CommType.ALL_REDUCE), key=lambda n: n.start_time_micros)
    assert [(n.start_time_micros, n.duration_micros) for n in ar] == kernels


def test_dlrm_every_rank_converts_validates_and_reads_in_mlc(dlrm_out):
    out, report = dlrm_out
    rs = RankSet.load(out)
    assert rs.ranks == list(range(8))
    assert rs.comm_groups == {"1": tuple(range(8))}
    assert [d for d in validate_rankset(rs) if d.severity == "error"] == []
    for g in rs:
        assert g.find_cycle() is None
        assert all(not n.ctrl_deps for n in g)
        assert Counter(n.comm_type for n in g if n.type.is_comm) == {
            CommType.ALL_TO_ALL: 5, CommType.ALL_REDUCE: 3}
    meta, nodes = read_with_mlc(out / "trace.0.et")
    assert len(nodes) == len(rs[0])
    comm = [n for n in nodes if n.type == 7]
    assert sorted(mlc_attr(n, "comm_size") for n in comm) == sorted(n.comm_size for n in rs[0] if n.type.is_comm)
    a = next(x for x in comm[0].attr if x.name == "comm_size")
    assert a.WhichOneof("value") == "int64_val"


def test_dlrm_gpu_kernels_follow_their_stream_and_launch(dlrm_out):
    out, _ = dlrm_out
    g = RankSet.load(out)[0]
    gpu = [n for n in g if not n.is_cpu_op and n.type is NodeType.COMP_NODE]
    assert len(gpu) > 200
    by_stream = {}
    for n in sorted(gpu + [n for n in g if n.type.is_comm], key=lambda n: n.start_time_micros):
        s = n.attr("stream")
        if s is not None:
            if s in by_stream:
                assert by_stream[s] in n.data_deps, f"{n} does not follow {by_stream[s]} on stream {s}"
            by_stream[s] = n.id
    for n in gpu:  # launched by a host op
        assert any(g[d].is_cpu_op for d in n.data_deps) or any(
            g[d].attr("stream") == n.attr("stream") for d in n.data_deps)


def test_dlrm_host_sync_waits_for_the_gpu(dlrm_out):
    """aten::item / copies to the host call cudaStreamSynchronize or cudaMemcpy: they depend on GPU work."""
    out, _ = dlrm_out
    g = RankSet.load(out)[0]
    waiting = [n for n in g if n.is_cpu_op and any(not g[d].is_cpu_op for d in n.data_deps)]
    assert waiting, "no host op depends on a kernel"
    assert {n.name for n in waiting} & {"aten::copy_", "aten::_local_scalar_dense", "aten::item",
                                         "aten::to", "aten::_to_copy", "aten::nonzero"}


def test_chakra_102_host_only_all_gather(chakra_102):
    res = convert_rank(chakra_102, None, 0)
    g = res.graph
    ag = _colls(g, CommType.ALL_GATHER)
    raw = _load(chakra_102)["nodes"]
    assert len(ag) == sum(n["name"] == "nccl:all_gather" for n in raw) == 10
    assert {n.comm_size for n in ag} == {4}  # each rank contributes one float32
    assert {n.attr("group_size") for n in ag} == {2}
    assert not [n for n in g if n.type is NodeType.METADATA_NODE]  # ASTRA-sim aborts on one
    (init,) = [n for n in g if n.name == "process_group:init"]
    assert init.type is NodeType.COMP_NODE and init.is_cpu_op
    assert {d.code for d in res.diagnostics} == {"durations-missing"}
    assert all(n.duration_micros == 0 for n in g)
    assert g.metadata.attrs["durations"].value == "missing"


def test_linear_gpu_gemms_carry_flops(shared_fixtures):
    host = shared_fixtures / "param/linear_1gpu_host_et.json.gz"
    dev = shared_fixtures / "param/linear_1gpu_kineto.json.gz"
    g = convert_rank(host, dev, 0).graph
    kernels = [n for n in g if not n.is_cpu_op and n.type is NodeType.COMP_NODE]
    assert kernels and all(n.duration_micros >= 1 for n in kernels)
    costed = [n for n in kernels if n.num_ops]
    assert costed, "no GEMM kernel got num_ops"
    assert all(n.tensor_size > 0 for n in costed)
    # on GPU the cost sits on the kernel, not on the host op that launched it
    assert not any(n.num_ops for n in g if n.is_cpu_op and any(
        not g[s].is_cpu_op for s in g.successors(n.id)))


def test_hta_simple_add_pair(shared_fixtures):
    g = convert_rank(shared_fixtures / "hta/simple_add_host_et.json.gz",
                     shared_fixtures / "hta/simple_add_kineto.json.gz", 0).graph
    raw = _load(shared_fixtures / "hta/simple_add_kineto.json.gz")["traceEvents"]
    n_kernels = sum(e.get("cat") == "kernel" for e in raw)
    assert sum(1 for n in g if not n.is_cpu_op) == n_kernels == 4
    assert g.find_cycle() is None


@pytest.mark.parametrize("name", ["hta/sampled_rank0_kineto.json.gz", "hta/sampled_rank1_kineto.json.gz"])
def test_device_only_nccl_traces(shared_fixtures, name):
    raw = _load(shared_fixtures / name)["traceEvents"]
    want = Counter(e["name"].split(":")[1].lstrip("_").replace("_base", "").replace("all_gather", "all_gather")
                   for e in raw if e.get("cat") == "user_annotation" and e["name"].startswith("nccl:"))
    g = convert_rank(None, shared_fixtures / name, 0).graph
    got = Counter(n.comm_type.name.lower() for n in g if n.type.is_comm)
    assert got == want
    assert all(n.comm_size > 0 for n in g if n.type.is_comm)


def test_cpu_only_gloo_trace_of_rank_34(shared_fixtures):
    name = shared_fixtures / "hta/cpu_only_rank34_kineto.json.gz"
    raw = _load(name)["traceEvents"]
    sizes = sorted(e["args"]["Input Dims"][0][0] * 4 for e in raw if e["name"] == "gloo:all_reduce")
    g = convert_rank(None, name, 34).graph
    ar = _colls(g, CommType.ALL_REDUCE)
    assert len(ar) == 10 and sorted(n.comm_size for n in ar) == sizes
    assert {n.comm_size for n in ar} == {321271 * 4, 2082411 * 4}
