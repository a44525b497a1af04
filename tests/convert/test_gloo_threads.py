"""gloo's threads in the host trace (tiny inline host + device traces, as torch 2.13 records them).

gloo runs a collective on a worker thread. Its `gloo:<op>` record is opened on the caller's
thread when the work is queued and closed by the worker, so (1) the caller's own ops meanwhile
(DDP copying the reduced bucket into the gradients, the optimizer step) get it as their host-trace
parent; (2) what the worker does besides communicating (copying an all_gather's result out,
dividing the all_reduce a reduce_scatter is run as) is recorded as aten ops of the worker's
thread; (3) a reduce_scatter of a list runs one all_reduce per rank. Before these rules (1) took
the optimizer step out of the graph, (2) replayed the worker's ops as the rank's own host work,
and (3) made the second all_reduce a collective of its own, so the ranks disagreed
([collective-mismatch]) whenever the host trace nested it differently on each rank.
"""

from __future__ import annotations

import json

from chakra_tools.convert.rank import convert_rank
from chakra_tools.core.annotations import format_annotation
from chakra_tools.core.model import CommType, NodeType

BUCKET = [40, 41, 0, 64, 4, "cpu"]
MAIN, WORKER = 1, 2


def _node(id, name, parent, ins=(), tid=MAIN):
    return {"id": id, "name": name, "ctrl_deps": parent,
            "inputs": {"values": list(ins), "shapes": [[]] * len(ins), "types": ["Tensor(float)"] * len(ins)},
            "outputs": {"values": [], "shapes": [], "types": []},
            "attrs": [{"name": "rf_id", "type": "uint64", "value": id}, {"name": "fw_parent", "type": "uint64", "value": 0},
                      {"name": "seq_id", "type": "int64", "value": -1}, {"name": "scope", "type": "uint64", "value": 0},
                      {"name": "tid", "type": "uint64", "value": tid}]}


def _event(id, name, ts, dur, tid=100):
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": tid, "pid": 1,
            "args": {"Record function id": id}}


def _annotation(op, is_async, n=16):
    return format_annotation({"op": op, "api": op, "pg": "0", "pg_ranks": [0, 1], "async": is_async,
                              "seq": 0, "in_bytes": 4 * n, "out_bytes": 4 * n, "dtype": "float32",
                              "elem_bytes": 4, "rank": 0})


def _convert(tmp_path, nodes, events):
    host, dev = tmp_path / "host.json", tmp_path / "device.json"
    host.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    dev.write_text(json.dumps({"traceEvents": events}))
    return convert_rank(host, dev, 0).graph


def _names(graph, kind=NodeType.COMP_NODE):
    return [n.name for n in graph if n.type is kind]


def test_the_callers_ops_under_an_open_gloo_record_stay_host_ops(tmp_path):
    """DDP's bucket all-reduce: async call 3-4, gloo's record 5 left open on the caller's thread,
    then the caller waits (untraced), copies the bucket into the gradient (6-7) and steps (8-9)
    with 5 as their parent; the worker's thread ran the all-reduce itself (5's event)."""
    nodes = [_node(1, "[pytorch|profiler|execution_trace|thread]", 0), _node(2, "ProfilerStep#3", 1),
             _node(3, _annotation("all_reduce", True), 2), _node(4, "c10d::allreduce_", 3, [[BUCKET]]),
             _node(5, "gloo:all_reduce", 1, [BUCKET]),
             _node(6, "torch.distributed.ddp.reducer::copy_bucket_to_grad", 5),
             _node(7, "aten::copy_", 6), _node(8, "Optimizer.step#SGD.step", 5), _node(9, "aten::add_", 8)]
    events = [_event(2, "ProfilerStep#3", 0, 1000), _event(3, nodes[2]["name"], 10, 20),
              _event(4, "c10d::allreduce_", 12, 15), _event(5, "gloo:all_reduce", 30, 700, tid=200),
              _event(6, "torch.distributed.ddp.reducer::copy_bucket_to_grad", 600, 20),
              _event(7, "aten::copy_", 602, 15), _event(8, "Optimizer.step#SGD.step", 650, 100),
              _event(9, "aten::add_", 660, 50)]
    g = _convert(tmp_path, nodes, events)
    assert _names(g, NodeType.COMM_COLL_NODE) == ["gloo:all_reduce"]
    for name in ("torch.distributed.ddp.reducer::copy_bucket_to_grad", "aten::copy_",
                 "Optimizer.step#SGD.step", "aten::add_"):
        assert name in _names(g), name


def test_the_workers_ops_inside_the_backend_op_are_the_calls(tmp_path):
    """A synchronous all_gather: call 3-4 on the caller's thread, gloo's op 5 on the worker,
    which copies the result out (6-7, recorded on its own thread, host-trace parent anywhere);
    then the caller goes on (8)."""
    nodes = [_node(1, "[pytorch|profiler|execution_trace|thread]", 0), _node(2, "ProfilerStep#3", 1),
             _node(3, _annotation("all_gather", False), 2), _node(4, "c10d::allgather_", 3),
             _node(5, "gloo:all_gather", 3, [BUCKET]),
             _node(10, "[pytorch|profiler|execution_trace|thread]", 0, tid=WORKER),
             _node(6, "aten::select", 10, tid=WORKER), _node(7, "aten::copy_", 10, tid=WORKER),
             _node(8, "aten::relu", 2)]
    events = [_event(2, "ProfilerStep#3", 0, 1000), _event(3, nodes[2]["name"], 10, 500),
              _event(4, "c10d::allgather_", 12, 480), _event(5, "gloo:all_gather", 20, 450, tid=200),
              _event(6, "aten::select", 400, 10, tid=200), _event(7, "aten::copy_", 420, 20, tid=200),
              _event(8, "aten::relu", 520, 30)]
    g = _convert(tmp_path, nodes, events)
    assert _names(g) == ["ProfilerStep#3", "aten::relu"]  # select and copy_ are the gather's
    coll = next(n for n in g if n.type is NodeType.COMM_COLL_NODE)
    relu = next(n for n in g if n.name == "aten::relu")
    assert coll.comm_type is CommType.ALL_GATHER and coll.id in relu.data_deps


def test_a_list_reduce_scatter_is_one_collective_however_its_all_reduces_nest(tmp_path):
    """reduce_scatter of a 2-rank list: gloo runs two all_reduces; the host trace nests the
    first in the call and the second anywhere (here under an unrelated op)."""
    nodes = [_node(1, "[pytorch|profiler|execution_trace|thread]", 0), _node(2, "ProfilerStep#3", 1),
             _node(3, _annotation("reduce_scatter", True), 2), _node(4, "c10d::reduce_scatter_", 3),
             _node(5, "gloo:all_reduce", 3, [BUCKET]), _node(6, "aten::mm", 2),
             _node(7, "gloo:all_reduce", 6, [BUCKET])]
    events = [_event(2, "ProfilerStep#3", 0, 1000), _event(3, nodes[2]["name"], 10, 30),
              _event(4, "c10d::reduce_scatter_", 12, 25), _event(5, "gloo:all_reduce", 20, 400, tid=200),
              _event(6, "aten::mm", 50, 40), _event(7, "gloo:all_reduce", 22, 380, tid=201)]
    g = _convert(tmp_path, nodes, events)
    colls = [n for n in g if n.type is NodeType.COMM_COLL_NODE]
    assert [c.comm_type for c in colls] == [CommType.REDUCE_SCATTER]


def test_a_list_reduce_scatter_lasts_until_its_last_all_reduce_ends(tmp_path):
    """Its two all_reduces run on both workers at once and the one attached first is not the one
    that ends last (a captured 2-rank step: 1.5 and 4.8 ms): the call spans both, or the replay
    as captured let the rank past its wait 3.3 ms early."""
    nodes = [_node(1, "[pytorch|profiler|execution_trace|thread]", 0), _node(2, "ProfilerStep#3", 1),
             _node(3, _annotation("reduce_scatter", True), 2), _node(4, "c10d::reduce_scatter_", 3),
             _node(5, "gloo:all_reduce", 3, [BUCKET]), _node(6, "gloo:all_reduce", 2, [BUCKET])]
    events = [_event(2, "ProfilerStep#3", 0, 2000), _event(3, nodes[2]["name"], 10, 30),
              _event(4, "c10d::reduce_scatter_", 12, 25), _event(5, "gloo:all_reduce", 20, 300, tid=200),
              _event(6, "gloo:all_reduce", 60, 1200, tid=201)]
    g = _convert(tmp_path, nodes, events)
    (coll,) = [n for n in g if n.type is NodeType.COMM_COLL_NODE]
    assert coll.duration_micros == 1240  # from 20, the first's start, to 1260, the second's end


def _async_all_gather(tmp_path, next_op_at: float, gloo_tid: int = 200):
    """all_gather(async_op=True) (3-5, the worker runs it 20..3500 µs), `work.wait()` (untraced),
    then the thread's next op 6 at `next_op_at`; gloo's record on thread `gloo_tid` of the
    device trace (the caller's is 100)."""
    nodes = [_node(1, "[pytorch|profiler|execution_trace|thread]", 0), _node(2, "ProfilerStep#3", 1),
             _node(3, _annotation("all_gather", True), 2), _node(4, "c10d::allgather_", 3),
             _node(5, "gloo:all_gather", 3, [BUCKET]), _node(6, "Optimizer.zero_grad#SGD.zero_grad", 2)]
    events = [_event(2, "ProfilerStep#3", 0, 5000), _event(3, nodes[2]["name"], 10, 20),
              _event(4, "c10d::allgather_", 12, 15), _event(5, "gloo:all_gather", 20, 3480, tid=gloo_tid),
              _event(6, "Optimizer.zero_grad#SGD.zero_grad", next_op_at, 30)]
    g = _convert(tmp_path, nodes, events)
    coll = next(n for n in g if n.type is NodeType.COMM_COLL_NODE)
    return g, coll, next(n for n in g if n.name.startswith("Optimizer.zero_grad"))


def test_an_untraced_wait_on_an_async_call_becomes_an_edge(tmp_path):
    """The thread did nothing traced from the call's return (30 µs) until the gather ended
    (3500 µs): it waited, so its next op depends on the gather."""
    _, coll, nxt = _async_all_gather(tmp_path, next_op_at=3520)
    assert coll.id in nxt.data_deps


def test_a_thread_that_went_on_during_an_async_call_does_not_wait_for_it(tmp_path):
    _, coll, nxt = _async_all_gather(tmp_path, next_op_at=40)
    assert coll.id not in nxt.data_deps


def test_an_untraced_wait_leaves_the_op_it_was_recorded_in(tmp_path):
    """The untraced wait (the call's return at 30 µs to the next op at 3520) lay in the step
    node's exclusive time (5000 less its children's 20 + 30); the replay re-creates it from the
    edge and charges the gather itself, so it leaves the step node, kept as `collective_wait_ns`.
    A thread that went on keeps its time: nothing was waited for."""
    for next_op_at, waited in ((3520, 3490), (40, 0)):
        g, _, _ = _async_all_gather(tmp_path, next_op_at=next_op_at)
        step = next(n for n in g if n.name == "ProfilerStep#3")
        assert step.duration_micros == 4950 - waited
        assert (step.attr("collective_wait_ns") or 0) == waited * 1000
        assert g.metadata.attrs["collective_waits_out"].value is True  # trace-convert scale estimates none
    # gloo's record on the caller's own thread: it is the step's child there, the wait inside it is
    # not the step's time (its exclusive time, 5000 less 20 + 3480 + 30, stays whole)
    g, _, _ = _async_all_gather(tmp_path, next_op_at=3520, gloo_tid=100)
    step = next(n for n in g if n.name == "ProfilerStep#3")
    assert step.duration_micros == 1470 and step.attr("collective_wait_ns") is None


def test_an_untraced_wait_leaves_the_step_it_lay_in_whatever_the_host_trace_nests(tmp_path):
    """DDP's last bucket: the async all-reduce 3-5 is called at the end of step 3 and runs until
    3950 µs; step 4 begins (relu 8), then its thread waits in untraced code until the bucket's
    copy 7 (which reads the bucket) at 4000. gloo's record 5, open on the caller's thread, is
    7's host-trace parent, and through it step 3: the wait (1200..4000) is step 4's time."""
    nodes = [_node(1, "[pytorch|profiler|execution_trace|thread]", 0), _node(2, "ProfilerStep#3", 1),
             _node(3, _annotation("all_reduce", True), 2), _node(4, "c10d::allreduce_", 3, [[BUCKET]]),
             _node(5, "gloo:all_reduce", 2, [BUCKET]), _node(6, "ProfilerStep#4", 1),
             _node(8, "aten::relu", 6), _node(7, "aten::copy_", 5, [BUCKET])]
    events = [_event(2, "ProfilerStep#3", 0, 1000), _event(3, nodes[2]["name"], 900, 30),
              _event(4, "c10d::allreduce_", 905, 20), _event(5, "gloo:all_reduce", 950, 3000, tid=200),
              _event(6, "ProfilerStep#4", 1000, 5000), _event(8, "aten::relu", 1100, 100),
              _event(7, "aten::copy_", 4000, 20)]
    g = _convert(tmp_path, nodes, events)
    coll = next(n for n in g if n.type is NodeType.COMM_COLL_NODE)
    copy = next(n for n in g if n.name == "aten::copy_")
    assert coll.id in copy.data_deps
    step3, step4 = (next(n for n in g if n.name == f"ProfilerStep#{i}") for i in (3, 4))
    assert step3.attr("collective_wait_ns") is None
    assert step4.attr("collective_wait_ns") == 2_800_000 and step4.duration_micros == 5000 - 100 - 20 - 2800


def test_a_send_starts_at_its_call_not_at_its_backend_op(tmp_path):
    """gloo hands the message over inside c10d::send (4 here); its backend op 5 is the wait, and
    began 4 ms later (the sender lost its core): the send node spans the call from its start."""
    ann = format_annotation({"op": "send", "api": "send", "pg": "0", "pg_ranks": [0, 1], "async": False,
                             "seq": 0, "in_bytes": 64, "out_bytes": 64, "dtype": "float32",
                             "elem_bytes": 4, "rank": 0, "peer": 1, "tag": 0})
    nodes = [_node(1, "[pytorch|profiler|execution_trace|thread]", 0), _node(2, "ProfilerStep#3", 1),
             _node(3, ann, 2), _node(4, "c10d::send", 3, [[BUCKET]]), _node(5, "gloo:send", 3, [BUCKET]),
             _node(6, "aten::relu", 2)]
    events = [_event(2, "ProfilerStep#3", 0, 5000), _event(3, ann, 1000, 4300),
              _event(4, "c10d::send", 1010, 4200), _event(5, "gloo:send", 5220, 50),
              _event(6, "aten::relu", 5320, 30)]
    g = _convert(tmp_path, nodes, events)
    send = next(n for n in g if n.type is NodeType.COMM_SEND_NODE)
    relu = next(n for n in g if n.name == "aten::relu")
    assert send.start_time_micros == 1000 and send.duration_micros == 4270
    assert relu.start_time_micros - (send.start_time_micros + send.duration_micros) == 50


def test_a_c10d_op_recorded_beside_its_annotation_is_the_calls(tmp_path):
    """The annotation 3 wraps c10d::allreduce_ 4, whose host-trace parent is an unrelated op
    (gloo's async work left the links pointing there), and gloo's op 5 under it: one call."""
    nodes = [_node(1, "[pytorch|profiler|execution_trace|thread]", 0), _node(2, "ProfilerStep#3", 1),
             _node(6, "aten::mul", 2), _node(3, _annotation("all_reduce", True), 6),
             _node(4, "c10d::allreduce_", 6, [[BUCKET]]), _node(5, "gloo:all_reduce", 4, [BUCKET])]
    events = [_event(2, "ProfilerStep#3", 0, 1000), _event(6, "aten::mul", 5, 4),
              _event(3, nodes[3]["name"], 10, 20), _event(4, "c10d::allreduce_", 12, 15),
              _event(5, "gloo:all_reduce", 20, 400, tid=200)]
    g = _convert(tmp_path, nodes, events)
    colls = [n for n in g if n.type is NodeType.COMM_COLL_NODE]
    assert [(c.name, c.comm_type, c.comm_size) for c in colls] == [("gloo:all_reduce", CommType.ALL_REDUCE, 64)]


def test_an_async_call_that_returned_after_its_work_blocked_its_thread(tmp_path):
    """all_gather(async_op=True) whose call (3-4) returned only after the worker's op (5) ended:
    the thread was blocked in the call, so its next op waits for the gather."""
    nodes = [_node(1, "[pytorch|profiler|execution_trace|thread]", 0), _node(2, "ProfilerStep#3", 1),
             _node(3, _annotation("all_gather", True), 2), _node(4, "c10d::allgather_", 3),
             _node(5, "gloo:all_gather", 3, [BUCKET]), _node(6, "Optimizer.zero_grad#SGD.zero_grad", 2)]
    events = [_event(2, "ProfilerStep#3", 0, 6000), _event(3, nodes[2]["name"], 10, 4500),
              _event(4, "c10d::allgather_", 12, 4480), _event(5, "gloo:all_gather", 1100, 3300, tid=200),
              _event(6, "Optimizer.zero_grad#SGD.zero_grad", 4700, 30)]
    g = _convert(tmp_path, nodes, events)
    coll = next(n for n in g if n.type is NodeType.COMM_COLL_NODE)
    nxt = next(n for n in g if n.name.startswith("Optimizer.zero_grad"))
    assert coll.id in nxt.data_deps


def test_a_collective_on_a_worker_thread_runs_on_that_workers_lane(tmp_path):
    """Two bucket all-reduces (async) that gloo ran on its two worker threads at once, and a
    synchronous send whose backend op is the caller's: the collectives carry their worker as
    `stream` (trace-replay --lanes stream gives each its lane), the send none."""
    send = format_annotation({"op": "send", "api": "send", "pg": "0", "pg_ranks": [0, 1], "async": False,
                              "seq": 2, "in_bytes": 64, "out_bytes": 64, "dtype": "float32",
                              "elem_bytes": 4, "rank": 0, "peer": 1, "tag": 0})
    nodes = [_node(1, "[pytorch|profiler|execution_trace|thread]", 0), _node(2, "ProfilerStep#3", 1),
             _node(3, _annotation("all_reduce", True), 2), _node(4, "c10d::allreduce_", 3, [[BUCKET]]),
             _node(5, "gloo:all_reduce", 4, [BUCKET]),
             _node(6, _annotation("all_reduce", True), 2), _node(7, "c10d::allreduce_", 6, [[BUCKET]]),
             _node(8, "gloo:all_reduce", 7, [BUCKET]),
             _node(9, send, 2), _node(10, "c10d::send", 9, [[BUCKET]]), _node(11, "gloo:send", 9, [BUCKET])]
    events = [_event(2, "ProfilerStep#3", 0, 2000), _event(3, nodes[2]["name"], 10, 20),
              _event(4, "c10d::allreduce_", 12, 15), _event(5, "gloo:all_reduce", 25, 900, tid=201),
              _event(6, nodes[5]["name"], 40, 20), _event(7, "c10d::allreduce_", 42, 15),
              _event(8, "gloo:all_reduce", 50, 800, tid=202), _event(9, send, 1000, 100),
              _event(10, "c10d::send", 1005, 40), _event(11, "gloo:send", 1050, 40)]
    g = _convert(tmp_path, nodes, events)
    streams = [(n.type, n.attrs["stream"].value if "stream" in n.attrs else None)
               for n in g if n.type in (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE)]
    assert streams == [(NodeType.COMM_COLL_NODE, 201), (NodeType.COMM_COLL_NODE, 202),
                       (NodeType.COMM_SEND_NODE, None)]


def test_wrapping_a_functional_collectives_result_does_not_wait_for_it(tmp_path):
    """funcol.all_reduce: the call (3-5) writes tensor OUT; `_wrap_tensor_autograd` (6, under
    gloo's open record) takes OUT at once without reading it; aten::add (7) reads it later."""
    out = [56, 57, 0, 16, 4, "cpu"]
    ann = format_annotation({"op": "all_reduce", "api": "funcol.all_reduce", "pg": "0", "pg_ranks": [0, 1],
                             "async": True, "seq": 0, "in_bytes": 64, "out_bytes": 64, "dtype": "float32",
                             "elem_bytes": 4, "rank": 0})
    nodes = [_node(1, "[pytorch|profiler|execution_trace|thread]", 0), _node(2, "ProfilerStep#3", 1),
             _node(3, ann, 2), _node(4, "_c10d_functional::all_reduce", 3, [BUCKET]),
             _node(5, "gloo:all_reduce", 3, [out]), _node(6, "_c10d_functional::_wrap_tensor_autograd", 5, [out]),
             _node(7, "aten::add", 2, [out, out])]
    nodes[3]["outputs"] = {"values": [out], "shapes": [[]], "types": ["Tensor(float)"]}
    events = [_event(2, "ProfilerStep#3", 0, 5000), _event(3, ann, 10, 30),
              _event(4, "_c10d_functional::all_reduce", 12, 20), _event(5, "gloo:all_reduce", 20, 3000, tid=200),
              _event(6, "_c10d_functional::_wrap_tensor_autograd", 45, 10), _event(7, "aten::add", 3100, 20)]
    g = _convert(tmp_path, nodes, events)
    coll = next(n for n in g if n.type is NodeType.COMM_COLL_NODE)
    wrap = next(n for n in g if n.name.endswith("_wrap_tensor_autograd"))
    add = next(n for n in g if n.name == "aten::add")
    assert coll.id not in wrap.data_deps and coll.id in add.data_deps



def test_a_collective_whose_worker_took_it_up_late_keeps_when_its_rank_called_it(tmp_path):
    """A barrier whose c10d op (4) began at 1,010 µs while gloo's worker began its backend op (5)
    only at 7,400 (a loaded host: 6.4 ms of wake-up): the node keeps the backend op's span and
    says the rank arrived at 1,010 (`call_start_us`), which the replay charges to the call."""
    nodes = [_node(1, "[pytorch|profiler|execution_trace|thread]", 0), _node(2, "ProfilerStep#3", 1),
             _node(3, _annotation("barrier", False, 1), 2), _node(4, "c10d::barrier", 3),
             _node(5, "gloo:barrier", 4, [BUCKET])]
    events = [_event(2, "ProfilerStep#3", 0, 9000), _event(3, nodes[2]["name"], 1000, 7000),
              _event(4, "c10d::barrier", 1010, 6500), _event(5, "gloo:barrier", 7400, 580, tid=200)]
    g = _convert(tmp_path, nodes, events)
    coll = next(n for n in g if n.type is NodeType.COMM_COLL_NODE)
    assert (coll.start_time_micros, coll.attrs["call_start_us"].value) == (7400, 1010)
    at_once = [{**e, "ts": 1010} if e["name"] == "gloo:barrier" else e for e in events]
    coll = next(n for n in _convert(tmp_path, nodes, at_once) if n.type is NodeType.COMM_COLL_NODE)
    assert "call_start_us" not in coll.attrs  # taken up as it was called: nothing to add


def test_an_async_call_whose_backend_op_is_not_in_the_trace_says_it_is_its_launch_alone(tmp_path):
    """DDP's last bucket in the last captured step (fidelity_fuzz seed 218): the call (3-4) is
    recorded, gloo's backend op is not; the node's span is the launch, so it says so."""
    nodes = [_node(1, "[pytorch|profiler|execution_trace|thread]", 0), _node(2, "ProfilerStep#3", 1),
             _node(3, _annotation("all_reduce", True), 2), _node(4, "c10d::allreduce_", 3, [[BUCKET]])]
    events = [_event(2, "ProfilerStep#3", 0, 1000), _event(3, nodes[2]["name"], 10, 80),
              _event(4, "c10d::allreduce_", 12, 70)]
    coll = next(n for n in _convert(tmp_path, nodes, events) if n.type is NodeType.COMM_COLL_NODE)
    assert coll.attrs["launch_only"].value is True and coll.duration_micros == 80
    nodes.append(_node(5, "gloo:all_reduce", 4, [BUCKET]))
    events.append(_event(5, "gloo:all_reduce", 40, 500, tid=200))
    coll = next(n for n in _convert(tmp_path, nodes, events) if n.type is NodeType.COMM_COLL_NODE)
    assert "launch_only" not in coll.attrs


def test_a_call_says_when_it_returned_when_that_was_after_its_backend_op_began(tmp_path):
    """funcol.all_gather_tensor: its annotation (3) returns at 230 after wrapping the result
    (`_wrap_tensor_autograd`, 6, chained after the call), the worker's op (5) began at 40: the
    node says the call returned at 230 (`call_end_us`), so the wrapper is not what waited."""
    ann = format_annotation({"op": "all_gather", "api": "funcol.all_gather_tensor", "pg": "0",
                             "pg_ranks": [0, 1], "async": True, "seq": 0, "in_bytes": 64, "out_bytes": 128,
                             "dtype": "float32", "elem_bytes": 4, "rank": 0})
    nodes = [_node(1, "[pytorch|profiler|execution_trace|thread]", 0), _node(2, "ProfilerStep#3", 1),
             _node(3, ann, 2), _node(4, "c10d::allgather_into_tensor_coalesced_", 3, [[BUCKET]]),
             _node(5, "gloo:all_gather", 4, [BUCKET]), _node(6, "_c10d_functional::_wrap_tensor_autograd", 3)]
    events = [_event(2, "ProfilerStep#3", 0, 5000), _event(3, ann, 10, 220),
              _event(4, "c10d::allgather_into_tensor_coalesced_", 15, 100),
              _event(5, "gloo:all_gather", 40, 3000, tid=200),
              _event(6, "_c10d_functional::_wrap_tensor_autograd", 150, 60)]
    coll = next(n for n in _convert(tmp_path, nodes, events) if n.type is NodeType.COMM_COLL_NODE)
    assert (coll.start_time_micros, coll.attrs["call_end_us"].value, coll.attrs["call_start_us"].value) == (40, 230, 15)
