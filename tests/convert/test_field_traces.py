"""Traces from the field (issue 13): device-only metadata, collectives that are not NCCL kernels,
sub-groups. Expected values are read from the raw files by the tests, or written beside the
test-made events."""

from __future__ import annotations

import gzip
import json
from collections import Counter

from chakra_tools.convert.rank import convert_rank
from chakra_tools.convert.run import convert, inputs_from_files
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import CommType, NodeType
from chakra_tools.core.validate import validate_rankset

ELEM = {"Float": 4, "Long": 8, "BFloat16": 2, "Half": 2, "Byte": 1}


def colls(graph: Graph):
    return [n for n in graph if n.type is NodeType.COMM_COLL_NODE]


# --------------------------------------------------------------------------------------------
# device-only traces: record_param_comms metadata
# --------------------------------------------------------------------------------------------

def test_device_only_collectives_take_size_kind_and_group_from_record_param_comms(shared_fixtures, tmp_path):
    path = shared_fixtures / "hta/nccl_metadata_kineto.json.gz"
    raw = [e["args"] for e in json.load(gzip.open(path))["traceEvents"]
           if e.get("name") == "record_param_comms" and e["args"].get("Collective name") != "wait"]
    report = convert(inputs_from_files([], [str(path)], []), tmp_path, executor="serial")
    g = report.rankset[0]
    want = Counter((a["Collective name"], a["In msg nelems"] * ELEM[a["dtype"]]) for a in raw)
    kind = {"allreduce": CommType.ALL_REDUCE, "broadcast": CommType.BROADCAST}
    got = Counter((next(k for k, v in kind.items() if v is n.comm_type), n.comm_size) for n in colls(g))
    assert got == want and sum(want.values()) == 21
    assert all(n.comm_size > 0 for n in colls(g))
    ranks = {tuple(json.loads(a["Process Group Ranks"])) for a in raw}
    assert {report.rankset.group_ranks(n.pg_name) for n in colls(g)} == ranks == {(0, 1)}


def _events_on(tid=1):
    return lambda name, ts, dur, cat="cpu_op", **args: {
        "ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _launch(ts, corr, kernel_name, kernel_args=None, stream=7):
    ev = _events_on()
    return [ev("cudaLaunchKernel", ts + 1, 1, cat="cuda_runtime", correlation=corr),
            {"ph": "X", "cat": "kernel", "name": kernel_name, "pid": 0, "tid": stream, "ts": ts + 3, "dur": 5,
             "args": {"correlation": corr, "stream": stream, **(kernel_args or {})}}]


def _write(tmp_path, events, name="kineto.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_a_device_only_sub_group_keeps_its_ranks_and_torch_name(tmp_path):
    """A B200 trace's group "3" ("undefined") of ranks [0, 2] in a world of 4: not the world."""
    ev = _events_on()
    meta = {"Collective name": "allreduce", "In msg nelems": 64, "Out msg nelems": 64, "dtype": "BFloat16",
            "Process Group Name": "3", "Process Group Description": "undefined",
            "Process Group Ranks": "[0, 2]", "Group size": 2, "In split size": "[]", "Out split size": "[]"}
    events = [ev("c10d::allreduce_", 0, 20), ev("record_param_comms", 1, 15, **meta),
              ev("nccl:all_reduce", 2, 10), *_launch(2, 1, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)")]
    paths = [str(_write(tmp_path, events, f"k{r}.json")) for r in (0, 2)]
    rs = convert(inputs_from_files([], paths, [0, 2]), None, executor="serial").rankset
    (c,) = colls(rs[0])
    assert (c.comm_type, c.comm_size, c.attr("pg_desc")) == (CommType.ALL_REDUCE, 128, "undefined")
    assert rs.group_ranks(c.pg_name) == (0, 2)



def test_one_rank_file_keeps_the_rank_its_trace_records(tmp_path):
    """Rank 5 of a job, on a tensor-parallel group [4, 5, 6, 7]: given alone with no --rank, it is
    rank 5 (Kineto's `distributedInfo`), so it stays a member of its group and replays with its
    peers assumed; as rank 0 it was no member of the group its collectives run on."""
    from chakra_tools.replay import replay_rankset

    ev = _events_on()
    meta = {"Collective name": "allreduce", "In msg nelems": 64, "Out msg nelems": 64, "dtype": "Float",
            "Process Group Name": "7", "Process Group Ranks": "[4, 5, 6, 7]", "Group size": 4}
    events = [ev("c10d::allreduce_", 10, 20), ev("record_param_comms", 11, 15, **meta),
              ev("nccl:all_reduce", 12, 10), *_launch(12, 1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)")]
    path = tmp_path / "rank5.json"
    path.write_text(json.dumps({"distributedInfo": {"backend": "nccl", "rank": 5, "world_size": 8},
                                "traceEvents": events}))
    report = convert(inputs_from_files([], [str(path)], []), tmp_path / "out", executor="serial")
    assert list(report.rankset.ranks) == [5] and (tmp_path / "out" / "trace.5.et").is_file()
    (c,) = colls(report.rankset[5])
    assert report.rankset.group_ranks(c.pg_name) == (4, 5, 6, 7)
    result = replay_rankset(tmp_path / "out", on_warning=lambda d: None, absent_peers=True)
    assert len(result.collectives) == 1 and result.makespan_ns > 0
    given = convert(inputs_from_files([], [str(path)], [0]), None, executor="serial")  # --rank wins
    assert list(given.rankset.ranks) == [0]


def test_global_rank_start_minus_one_means_not_strided(tmp_path):
    """PyTorch writes `Global rank start` / `stride` -1 on a `wait` and on groups it lists only
    in `Process Group Ranks` (a public HTA ResNet trace, 2024): read, not refused; the listed
    ranks decide the group."""
    ev = _events_on()
    meta = {"Collective name": "allreduce", "In msg nelems": 8, "Out msg nelems": 8, "dtype": "Float",
            "Process Group Name": "0", "Process Group Ranks": "[0]", "Group size": 1,
            "Global rank start": -1, "Global rank stride": -1}
    wait = {"Collective name": "wait", "dtype": "Byte", "In msg nelems": 0, "Out msg nelems": 0,
            "Group size": 1, "Global rank start": -1, "Global rank stride": -1}
    events = [ev("c10d::allreduce_", 0, 20), ev("record_param_comms", 1, 15, **meta),
              ev("nccl:all_reduce", 2, 10), *_launch(2, 1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"),
              ev("record_param_comms", 30, 3, **wait)]
    result = convert_rank(None, _write(tmp_path, events), 0)
    (c,) = colls(result.graph)
    assert (c.comm_type, c.comm_size) == (CommType.ALL_REDUCE, 32)

# --------------------------------------------------------------------------------------------
# collectives that are not NCCL kernels, and NCCL kernels of every generation
# --------------------------------------------------------------------------------------------

def test_collectives_beyond_c10d_become_communication_nodes(tmp_path):
    ev = _events_on()
    events = [
        # PyTorch symmetric memory on group "0": 1024 bf16 = 2,048 bytes
        ev("symm_mem::multimem_all_reduce_", 0, 20, **{"Input Dims": [[1024], [], []],
           "Input type": ["c10::BFloat16", "String", "String"], "Concrete Inputs": ["", "sum", "0"]}),
        *_launch(0, 1, "void c10d::symmetric_memory::(anonymous namespace)::multimem_all_reduce_kernel"
                       "<c10::BFloat16, 16, 4>(c10::BFloat16*, unsigned long, unsigned long)"),
        # vLLM custom all-reduce(int fa, Tensor inp, Tensor out, int buf, int size): inp 2048 bf16
        ev("_C_custom_ar::all_reduce", 30, 20, **{"Input Dims": [[], [2048], [2048], [], []],
           "Input type": ["Int", "c10::BFloat16", "c10::BFloat16", "Int", "Int"]}),
        *_launch(30, 2, "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, int, int)"),
        # NCCL kernels launched outside any recognised call, three generations and RCCL
        ev("aten::old", 60, 10), *_launch(60, 3, "ncclAllGatherRingLLKernel_copy_i8(ncclColl)"),
        ev("aten::mid", 80, 10), *_launch(80, 4, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"),
        ev("aten::rccl", 100, 10), *_launch(100, 5, "ncclDevKernel_Generic(ncclDevComm*, unsigned long, ncclWork*)",
                                            {"Collective name": "reduce_scatter", "In msg nelems": 512, "dtype": "Float"}),
        ev("aten::bare", 120, 10), *_launch(120, 6, "ncclDevKernel_Generic(ncclDevComm*, unsigned long, ncclWork*)"),
        # a kernel whose name says it communicates, that no rule knows
        ev("aten::mine", 140, 10), *_launch(140, 7, "my_lib::ring_allgather_kernel(float*)"),
    ]
    result = convert_rank(None, _write(tmp_path, events), 0)
    got = [(n.name, n.comm_type, n.comm_size) for n in colls(result.graph)]
    assert got == [("symm_mem:all_reduce", CommType.ALL_REDUCE, 2048),
                   ("custom_ar:all_reduce", CommType.ALL_REDUCE, 4096),
                   ("nccl:all_gather", CommType.ALL_GATHER, 0),
                   ("nccl:all_reduce", CommType.ALL_REDUCE, 0),
                   ("nccl:reduce_scatter", CommType.REDUCE_SCATTER, 2048),
                   ("nccl:all_reduce", CommType.ALL_REDUCE, 0)]
    symm = colls(result.graph)[0]
    assert symm.pg_name == "0" and symm.attr("stream") == 7 and symm.duration_micros == 5
    assert not [n for n in result.graph if "multimem" in n.name or "cross_device" in n.name]
    warnings = {d.code: d.message for d in result.diagnostics}
    assert "ring_allgather_kernel" in warnings["unknown-comm-kernel"]
    assert "ncclDevKernel_Generic" in warnings["assumed-kernel-kind"]
    assert [n.name for n in result.graph if n.name.startswith("my_lib")]  # kept, as compute


# --------------------------------------------------------------------------------------------
# a collective on a one-rank sub-group (Megatron, schema 1.0.1)
# --------------------------------------------------------------------------------------------

def _host_101(rank: int) -> dict:
    """Two ranks of a TP-2 job: an all_reduce on the 2-rank group (object 111), then one on the
    rank's own data-parallel group of size 1 (object 222): record_param_comms inputs are
    [tensor, seq, group object, rank, name, in_split, out_split, group size]."""
    def rpc(nid, seq, obj, size):
        t = [100 + nid, 100 + nid, 0, 1, 4, "cuda:0"]
        return {"name": "record_param_comms", "id": nid, "rf_id": nid, "parent": 2, "tid": 1,
                "inputs": [t, seq, obj, rank, "allreduce", [], [], size],
                "input_shapes": [[1], [], [], [], [], [], [], []],
                "input_types": ["Tensor(float)", "Int", "Int", "Int", "String", "GenericList[]", "GenericList[]", "Int"],
                "outputs": [t], "output_shapes": [[1]], "output_types": ["Tensor(float)"]}
    root = {"name": "[pytorch|profiler|execution_graph|thread]", "id": 2, "rf_id": 0, "parent": 1, "tid": 1,
            "inputs": [], "input_shapes": [], "input_types": [], "outputs": [], "output_shapes": [], "output_types": []}
    return {"schema": "1.0.1", "pid": rank, "nodes": [root, rpc(3, 1, 111, 2), rpc(4, 2, 222, 1)]}


def test_a_collective_on_a_one_rank_group_is_on_that_group(tmp_path):
    paths = []
    for r in (0, 1):
        paths.append(str(tmp_path / f"host{r}.json"))
        (tmp_path / f"host{r}.json").write_text(json.dumps(_host_101(r)))
    rs = convert(inputs_from_files(paths, [], []), tmp_path / "out", executor="serial").rankset
    for r in (0, 1):
        tp, dp = colls(rs[r])
        assert rs.group_ranks(tp.pg_name) == (0, 1) and tp.attr("group_size") == 2
        assert rs.group_ranks(dp.pg_name) == (r,) and dp.attr("group_size") == 1
    assert not [d for d in validate_rankset(rs) if d.severity == "error"]


def test_schema_103_inputs_end_with_rank_start_stride_and_group_size(tmp_path):
    """record_param_comms of schema 1.0.3 (param's public ResNet trace) has 10 inputs: [tensors,
    seq, (name, desc), rank, collective, in_split, out_split, global rank start, stride, group
    size]. Its 8th input is the rank start (0), not the size: read as the size, every collective
    was a group-size mismatch and the conversion stopped (exit 3)."""
    t = [[433, 434, 0, 64, 4, "cuda:0"]]
    rpc = {"name": "record_param_comms", "id": 3, "rf_id": 3, "parent": 2, "tid": 1,
           "inputs": {"values": [t, 33, ["0", "default_pg"], 0, "allreduce", [], [], 0, 1, 1],
                      "shapes": [[[64]], [], [[], []], [], [], [], [], [], [], []],
                      "types": ["GenericList[Tensor(float)]", "Int", "Tuple[String,String]", "Int", "String",
                                "GenericList[]", "GenericList[]", "Int", "Int", "Int"]},
           "outputs": {"values": [t], "shapes": [[[64]]], "types": ["GenericList[Tensor(float)]"]}}
    root = {"name": "[pytorch|profiler|execution_trace|thread]", "id": 2, "rf_id": 0, "parent": 1, "tid": 1,
            "inputs": {"values": [], "shapes": [], "types": []}, "outputs": {"values": [], "shapes": [], "types": []}}
    path = tmp_path / "host.json"
    path.write_text(json.dumps({"schema": "1.0.3-chakra.0.0.4", "pid": 1, "nodes": [root, rpc]}))
    rs = convert(inputs_from_files([str(path)], [], []), tmp_path / "out", executor="serial").rankset
    (c,) = colls(rs[0])
    assert c.attr("group_size") == 1 and c.comm_size == 256 and rs.group_ranks(c.pg_name) == (0,)


def test_validation_flags_a_group_size_its_group_disagrees_with(tmp_path):
    """What the converter wrote before: the 1-rank all-reduce on the 2-rank group."""
    from chakra_tools.core.model import Node, make_attrs

    def ar(nid, size):
        return Node(nid, "nccl:all_reduce", NodeType.COMM_COLL_NODE, attrs=make_attrs(
            comm_type=CommType.ALL_REDUCE, comm_size=4, pg_name="1", is_cpu_op=False, group_size=size))

    rs = RankSet({r: Graph([ar(1, 2), ar(2, 1)], rank=r) for r in (0, 1)}, {"1": (0, 1)})
    found = [d for d in validate_rankset(rs) if d.code == "group-size-mismatch"]
    assert [(d.rank, d.node_id) for d in found] == [(0, 2), (1, 2)]
    assert "recorded group size 1, but group 1 has 2 ranks [0, 1]" in found[0].message


def test_a_host_trace_without_groups_takes_them_from_its_device_trace(tmp_path):
    """Schema 1.0.1 records a group object and size only; the Kineto trace's record_param_comms
    event names the group and its ranks: the all-reduce is on [0, 2] of a world of 4."""
    def host_op(nid, name, parent, inputs=(), types=()):
        return {"name": name, "id": nid, "rf_id": nid, "parent": parent, "tid": 1, "inputs": list(inputs),
                "input_shapes": [[] for _ in inputs], "input_types": list(types),
                "outputs": [], "output_shapes": [], "output_types": []}
    t = [9, 9, 0, 256, 4, "cuda:0"]
    host = {"schema": "1.0.1", "pid": 1, "nodes": [
        host_op(2, "[pytorch|profiler|execution_graph|thread]", 1),
        host_op(3, "c10d::allreduce_", 2),
        host_op(4, "record_param_comms", 3, [t, 1, 4242, 0, "allreduce", [], [], 2],
                ["Tensor(float)", "Int", "Int", "Int", "String", "GenericList[]", "GenericList[]", "Int"]),
        host_op(5, "nccl:all_reduce", 4)]}
    ev = _events_on()
    meta = {"Record function id": 4, "Collective name": "allreduce", "In msg nelems": 256,
            "Out msg nelems": 256, "dtype": "Float", "Process Group Name": "3",
            "Process Group Ranks": "[0, 2]", "Group size": 2}
    device = [ev("c10d::allreduce_", 0, 30, **{"Record function id": 3}), ev("record_param_comms", 1, 25, **meta),
              ev("nccl:all_reduce", 2, 20, cat="user_annotation", **{"Record function id": 5}),
              *_launch(3, 1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)")]
    hosts, devs = [], []
    for r in (0, 2):
        hosts.append(str(tmp_path / f"host{r}.json"))
        (tmp_path / f"host{r}.json").write_text(json.dumps(host))
        devs.append(str(_write(tmp_path, device, f"dev{r}.json")))
    rs = convert(inputs_from_files(hosts, devs, [0, 2]), None, executor="serial").rankset
    (c,) = colls(rs[0])
    assert (c.comm_size, c.attr("group_size"), rs.group_ranks(c.pg_name)) == (1024, 2, (0, 2))
