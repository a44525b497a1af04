"""The converter's small parts, on tiny inline inputs with the expected result beside them."""

from __future__ import annotations

import json

import pytest

from chakra_tools.convert.build import Rec
from chakra_tools.convert.calls import CommCall, op_kind
from chakra_tools.convert.comms import find_calls
from chakra_tools.convert.cost import op_cost
from chakra_tools.convert.graphcheck import break_cycles, find_cycle, micros
from chakra_tools.convert.hostet import HostOp, parse_host
from chakra_tools.convert.jsonio import repair_names
from chakra_tools.convert.kineto import parse_device
from chakra_tools.convert.link import align
from chakra_tools.core.errors import Diagnostics, InputError
from chakra_tools.core.model import CommType, NodeType


def T(tid, numel, itemsize=4):
    return [tid, tid, 0, numel, itemsize, "cpu"]


def op(id, name, ins=(), shapes=(), types=(), outs=(), out_shapes=(), parent=1, tid=1):
    return HostOp(id, name, parent, tid, id, (list(ins), list(shapes), list(types)),
                  (list(outs), list(out_shapes), ["Tensor(float)"] * len(outs)), {})


@pytest.mark.parametrize("name, kind", [
    ("c10d::allreduce_", "all_reduce"), ("c10d::_allgather_base_", "all_gather"),
    ("c10d::reduce_scatter_tensor_coalesced_", "reduce_scatter"), ("nccl:all_to_allv", "all_to_all"),
    ("gloo:recv", "recv"), ("c10d::recv_any_source_", "recv"), ("c10d::barrier", "barrier"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all_gather"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)", "all_to_all"),
    ("c10d::gather_", "gather"), ("c10d::scatter_", "scatter"), ("c10d::broadcast_", "broadcast"),
    ("aten::mm", None), ("record_param_comms", None),
])
def test_op_kind(name, kind):
    assert op_kind(name) == kind


@pytest.mark.parametrize("kind, in_b, out_b, size", [
    ("all_reduce", 4096, 4096, 4096), ("all_gather", 1024, 4096, 1024),
    ("reduce_scatter", 4096, 1024, 4096), ("all_to_all", 3000, 2000, 3000),
    ("scatter", 4096, 1024, 1024), ("gather", 1024, 4096, 1024), ("barrier", 4, 4, 0),
    ("send", 20, 0, 20), ("recv", 0, 20, 20), ("broadcast", 64, 64, 64),
])
def test_comm_size_convention(kind, in_b, out_b, size):
    assert CommCall(1, kind, kind, "test", in_bytes=in_b, out_bytes=out_b).comm_size == size


def test_c10d_calls_absorb_their_backend_and_record_param_comms():
    ops = [op(2, "c10d::allreduce_", [[T(5, 100)], "<Object>", "<Object>", "<None>", False, -1],
              types=["GenericList[Tensor(float)]"]),
           HostOp(3, "record_param_comms", 2, 1, 3, ([[T(5, 100)], 41, 0, 0, "allreduce", [], [], 2], [], []),
                  ([], [], []), {}),
           op(4, "nccl:all_reduce", [T(5, 100)], [[100]], ["Tensor(float)"], parent=3),
           op(6, "record_param_comms", parent=1)]
    ops[3] = HostOp(6, "record_param_comms", 1, 1, 6, ([41, 0, 0, "wait", [], []], [], []), ([], [], []), {})
    calls, waits = find_calls(ops)
    assert len(calls) == 1 and calls[0].members == {2, 3, 4}
    c = calls[0]
    assert (c.op, c.comm_size, c.seq, c.backend, c.is_async, c.group_size) == ("all_reduce", 400, 41, 4, False, 2)
    assert [(w.op_id, w.seq) for w in waits] == [(6, 41)]


def test_gloo_worker_thread_op_is_claimed_by_its_call():
    ops = [op(2, "c10d::allgather_", [[[T(7, 10), T(8, 10)]], [T(6, 10)], "<Object>", False, -1]),
           op(3, "aten::add", parent=1), op(4, "gloo:all_gather", [T(6, 10)], tid=2)]
    calls, _ = find_calls(ops)
    assert len(calls) == 1 and calls[0].backend == 4 and calls[0].comm_size == 40


def test_annotation_call_keeps_unrelated_nested_ops_and_nested_annotations():
    ann = 'chakra_tools.comm:{"op":"send","peer":1,"tag":7,"in_bytes":20,"pg":"0","pg_ranks":[0,1]}'
    rec = 'chakra_tools.comm:{"op":"recv","peer":1,"tag":7,"out_bytes":20,"pg":"0","pg_ranks":[0,1]}'
    ops = [op(2, ann), op(3, "c10d::send", parent=2), op(4, "gloo:send", parent=3),
           op(5, "aten::zeros", parent=2), op(6, rec, parent=2), op(7, "c10d::recv_", parent=6)]
    calls, _ = find_calls(ops)
    assert [(c.op, sorted(c.members), c.peer, c.tag) for c in calls] == [
        ("send", [2, 3, 4], 1, 7), ("recv", [6, 7], 1, 7)]


def test_align_skips_ops_only_one_side_recorded():
    assert align(["a", "b", "c", "d"], ["a", "x", "b", "d"]) == [(0, 0), (1, 2), (3, 3)]
    assert align([], ["a"]) == []


def test_costs_of_common_ops():
    a, b, c = T(1, 8 * 16), T(2, 16 * 4), T(3, 8 * 4)
    assert op_cost(op(5, "aten::mm", [a, b], [[8, 16], [16, 4]], outs=[c], out_shapes=[[8, 4]])) == (1024, 896)
    bias = T(4, 4)
    assert op_cost(op(5, "aten::addmm", [bias, a, b], [[4], [8, 16], [16, 4]]))[0] == 2 * 8 * 16 * 4 + 8 * 4
    assert op_cost(op(5, "aten::bmm", [], [[2, 8, 16], [2, 16, 4]]))[0] == 2 * 2 * 8 * 16 * 4
    assert op_cost(op(5, "aten::linear", [], [[3, 8, 16], [4, 16], [4]]))[0] == 2 * 24 * 16 * 4 + 24 * 4
    conv = op(5, "aten::convolution", [], [[1, 3, 32, 32], [16, 3, 3, 3]], out_shapes=[[1, 16, 30, 30]])
    assert op_cost(conv)[0] == 2 * 16 * 30 * 30 * 27
    att = op(5, "aten::scaled_dot_product_attention", [], [[2, 4, 128, 64]] * 3)
    assert op_cost(att)[0] == 4 * 2 * 4 * 128 * 128 * 64
    assert op_cost(op(5, "aten::relu", [], [[10, 10]]))[0] == 100
    assert op_cost(op(5, "aten::_softmax", [], [[10, 10]]))[0] == 500
    assert op_cost(op(5, "aten::native_layer_norm", [], [[10, 10]]))[0] == 800
    assert op_cost(op(5, "aten::view", [], [[10, 10]])) == (0, 0)


def test_micros_never_loses_a_short_kernel():
    assert [micros(x) for x in (0, 0.2, 0.5, 1.49, 2.5, 1000.4)] == [0, 1, 1, 1, 3, 1000]


def test_cycles_are_broken_with_a_warning_naming_the_nodes():
    recs = [Rec(i, f"n{i}", NodeType.COMP_NODE) for i in (1, 2, 3)]
    recs[1].deps, recs[2].deps, recs[0].deps = [1], [2], [3]
    diags = Diagnostics()
    assert break_cycles(recs, diags) == 1
    assert find_cycle(recs) is None
    (d,) = list(diags)
    assert d.code == "cycle-broken" and "%1 ('n1')" in d.message and "%3 ('n3')" in d.message
    assert recs[0].deps == []  # the backward edge 3 -> 1 went


def test_repair_names_escapes_unescaped_annotation_json():
    raw = b'{"nodes": [{"id": 3, "name": "chakra_tools.comm:{"op":"send","peer":1}", "x": 1}]}'
    import json
    assert json.loads(repair_names(raw))["nodes"][0]["name"] == 'chakra_tools.comm:{"op":"send","peer":1}'


def test_host_schemas_101_and_102_read_the_same():
    old = {"schema": "1.0.1", "nodes": [
        {"id": 1, "name": "[pytorch|profiler|execution_graph|process]", "parent": 1},
        {"id": 2, "name": "[pytorch|profiler|execution_graph|thread]", "parent": 1, "tid": 1},
        {"id": 4, "name": "aten::relu", "parent": 3, "tid": 1, "rf_id": 9,
         "inputs": [T(1, 10)], "input_shapes": [[10]], "input_types": ["Tensor(float)"]},
        {"id": 3, "name": "aten::linear", "parent": 2, "tid": 1, "rf_id": 8}]}
    new = {"schema": "1.1.1-chakra.0.0.4", "nodes": [
        {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "ctrl_deps": 1},
        {"id": 2, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 1, "attrs": [{"name": "tid", "value": 1}]},
        {"id": 4, "name": "aten::relu", "ctrl_deps": 3,
         "inputs": {"values": [T(1, 10)], "shapes": [[10]], "types": ["Tensor(float)"]},
         "attrs": [{"name": "rf_id", "type": "uint64", "value": 9}, {"name": "tid", "value": 1}]},
        {"id": 3, "name": "aten::linear", "ctrl_deps": 2, "attrs": [{"name": "rf_id", "value": 8}, {"name": "tid", "value": 1}]}]}
    for doc in (old, new):
        h = parse_host(doc, "x.json")
        assert [(o.id, o.name, o.parent, o.rf_id, o.tid) for o in h.ops] == [
            (3, "aten::linear", 2, 8, 1), (4, "aten::relu", 3, 9, 1)]
        assert h.roots == {1, 2} and h.ops[1].in_shapes == [[10]]
    with pytest.raises(InputError, match="x.json"):
        parse_host({"traceEvents": []}, "x.json")


def test_kineto_nesting_with_float_and_int_timestamps():
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "outer", "tid": 1, "ts": 100, "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "inner", "tid": 1, "ts": 110.5, "dur": 9.25},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 1, "ts": 112.0, "dur": 2,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "k", "tid": 7, "ts": 120, "dur": 0.4, "args": {"correlation": 7, "stream": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "next", "tid": 1, "ts": 150, "dur": 1}]}
    d = parse_device(doc, "d.json")
    outer, inner, nxt = d.host
    assert inner.parent == outer.idx and nxt.parent == -1
    assert outer.exclusive_us == pytest.approx(50 - 9.25)
    assert d.runtime_parent == {0: inner.idx}


def test_a_range_the_step_closed_inside_is_not_the_steps_own_time():
    # the profiler's step ends from a hook inside the user's `optimizer` range: that range is no
    # child of the step (it ends after it), but its part inside the step is not the step's own
    doc = {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "user_annotation", "name": "layer", "tid": 1, "ts": 1, "dur": 70},
        {"ph": "X", "cat": "user_annotation", "name": "optimizer", "tid": 1, "ts": 75, "dur": 27},
        {"ph": "X", "cat": "cpu_op", "name": "Optimizer.step", "tid": 1, "ts": 90, "dur": 5},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "tid": 1, "ts": 100.5, "dur": 100}]}
    step, layer, opt, inner, nxt = parse_device(doc, "d.json").host
    assert layer.parent == step.idx and opt.parent == -1 and inner.parent == opt.idx
    assert step.exclusive_us == pytest.approx(100 - 70 - 25)  # the 4 us between layer and optimizer
    assert opt.exclusive_us == pytest.approx(27 - 5 - 1.5)  # nor its part the next step began in


def test_record_param_comms_schema_110_attributes():
    """PyTorch >= 2.3 (schema 1.1.0) names the collective, group and sizes in attributes."""
    attrs = {"collective_name": "_reduce_scatter_base", "dtype": "BFloat16", "in_msg_nelems": 4096,
             "out_msg_nelems": 1024, "in_split_size": "[]", "out_split_size": "[]",
             "global_rank_start": 4, "global_rank_stride": 2, "pg_name": "3", "pg_desc": "tp", "pg_size": 4}
    rpc = HostOp(2, "record_param_comms", 1, 1, 2,
                 ([[T(5, 4096, 2)], 17, 0, 0, "", [], [], 4], [], ["GenericList[Tensor(c10::BFloat16)]"]),
                 ([[T(6, 1024, 2)]], [], []), attrs)
    (c,), _ = find_calls([rpc])
    assert (c.op, c.comm_type, c.comm_size, c.pg, c.pg_ranks, c.group_size, c.pg_desc) == (
        "reduce_scatter", CommType.REDUCE_SCATTER, 4096 * 2, "3", (4, 6, 8, 10), 4, "tp")
    assert (c.in_nelems, c.out_nelems, c.seq) == (4096, 1024, 17)


def test_p2p_peer_is_mapped_to_a_global_rank():
    from chakra_tools.convert.rank import GroupInfo, comm_attrs

    call = CommCall(2, "send", "c10d::send", "c10d", in_bytes=20, peer=1, tag=5, pg="2")
    a = comm_attrs(call, 4, {"2": GroupInfo(ranks=(4, 6))})
    assert (a["comm_src"], a["comm_dst"], a["comm_tag"], a["pg_name"]) == (4, 6, 5, "2")


def test_nccl_kernel_without_a_host_call_becomes_a_collective(tmp_path):
    from chakra_tools.convert.rank import convert_rank

    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "my_op", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "args": {}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 1,
         "args": {"correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL(ncclDevComm*)", "pid": 0,
         "tid": 20, "ts": 5, "dur": 3.5, "args": {"correlation": 5, "stream": 20, "In msg nelems": 256,
                                                 "Out msg nelems": 512, "dtype": "Float"}}]}
    path = tmp_path / "d.json"
    path.write_text(json.dumps(doc, indent=2))
    g = convert_rank(None, path, 0).graph
    host, coll = list(g)
    assert (host.name, host.is_cpu_op) == ("my_op", True)
    assert coll.type is NodeType.COMM_COLL_NODE and coll.comm_type is CommType.ALL_GATHER
    assert (coll.comm_size, coll.is_cpu_op, coll.data_deps, coll.attr("stream")) == (1024, False, (host.id,), 20)
    assert (coll.duration_micros, coll.attr("duration_ns")) == (4, 3500)


def test_a_trace_nested_too_deeply_or_with_corrupt_deflate_data_is_named(tmp_path):
    import gzip as gz

    from chakra_tools.convert.jsonio import load_json
    from chakra_tools.core.errors import InputError

    deep = tmp_path / "deep.json"
    deep.write_text('{"nodes": ' + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(InputError, match="deep.json: JSON nested too deeply"):
        load_json(deep)
    data = bytearray(gz.compress(b'{"traceEvents": [' + b'{"ph": "X"},' * 2000 + b'{}]}'))
    data[len(data) // 2] ^= 0xFF  # one byte of the deflate stream
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(bytes(data))
    with pytest.raises(InputError, match="bad.json.gz: corrupt gzip file"):
        load_json(bad)


def test_a_second_collective_under_one_annotation_is_a_call_of_its_own():
    """gloo's asynchronous work leaves parent links pointing at the last annotation: HF Trainer's
    logging all-reduce (a c10d op with no annotation of its own) recorded under the gradient
    all-reduce's annotation was taken into it on one rank ([collective-count] at conversion)."""
    from chakra_tools.convert.comms import find_calls
    from chakra_tools.convert.hostet import HostOp
    from chakra_tools.core.annotations import format_annotation

    ann = format_annotation({"op": "all_reduce", "api": "all_reduce", "in_bytes": 482304, "pg": "0", "seq": 3})
    empty = ([], [], [])
    ops = [HostOp(10, ann, 1, 1, None, empty, empty, {}),
           HostOp(11, "c10d::allreduce_", 10, 1, None, empty, empty, {}),
           HostOp(12, "gloo:all_reduce", 11, 1, None, empty, empty, {}),
           HostOp(16, "c10d::allreduce_", 10, 1, None, empty, empty, {}),  # the logging all-reduce
           HostOp(17, "gloo:all_reduce", 16, 1, None, empty, empty, {})]
    calls, _ = find_calls(ops)
    assert [(c.root, c.source, sorted(c.members)) for c in calls] == [
        (10, "annotation", [10, 11, 12]), (16, "c10d", [16, 17])]
