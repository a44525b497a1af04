"""The typed (msgspec) readers of host and device traces against the plain JSON readers.

The two paths share no parsing code: `parse_host_bytes`/`parse_device_bytes` decode typed
structs from the bytes, `parse_host`/`parse_device` normalise the document the json module
built. On real traces (a capture made by the test session, Chakra's 1.0.2 host trace, PyTorch's
1-GPU Kineto fixture) they must agree on every op and event the converter reads.
"""

from __future__ import annotations

import gzip
import json

import pytest

from chakra_tools.convert.comms import find_calls
from chakra_tools.convert.hostet import parse_host, parse_host_bytes
from chakra_tools.convert.jsonio import read_bytes, repair_names
from chakra_tools.convert.kineto import parse_device, parse_device_bytes
from chakra_tools.convert.rank import needs_args
from chakra_tools.convert.readers import first_readers
from chakra_tools.core.errors import InputError


def _plain(path):
    data = read_bytes(path)
    return json.loads(repair_names(data))


def _op_facts(op, with_args: bool):
    facts = (op.id, op.name, op.parent, op.tid, op.rf_id)
    if with_args:
        facts += (op.in_values, op.in_shapes, op.in_types, op.out_values, op.out_shapes)
    return facts


def _host_files(collectives_run, chakra_102):
    """Schema >= 1.0.2 traces (1.0.1's flat layout is the plain path's by design)."""
    return [collectives_run / "rank-0.host.json.gz", collectives_run / "rank-1.host.json.gz", chakra_102]


def _device_files(collectives_run, shared_fixtures):
    return [collectives_run / "rank-0.device.json.gz",
            shared_fixtures / "param" / "linear_1gpu_kineto.json.gz"]


def test_typed_host_reader_agrees_with_the_json_reader(collectives_run, chakra_102):
    for path in _host_files(collectives_run, chakra_102):
        typed = parse_host_bytes(read_bytes(path), str(path), needs_args)
        plain = parse_host(_plain(path), str(path))
        assert typed.ops[0].raw_inputs is not None, f"{path.name}: the typed path was not taken"
        assert len(typed.ops) == len(plain.ops) > 10
        for a, b in zip(typed.ops, plain.ops):
            assert _op_facts(a, needs_args(a.name)) == _op_facts(b, needs_args(b.name))
        assert (typed.roots, typed.pg_init_id, typed.process_groups) == (
            plain.roots, plain.pg_init_id, plain.process_groups)
        # communication calls read from the typed ops are the same calls
        assert [vars(c) for c in find_calls(typed.ops)[0]] == [vars(c) for c in find_calls(plain.ops)[0]]


def test_typed_device_reader_agrees_with_the_json_reader(collectives_run, shared_fixtures):
    keys = ("Record function id", "correlation", "stream", "bytes")
    for path in _device_files(collectives_run, shared_fixtures):
        typed = parse_device_bytes(read_bytes(path), str(path))
        plain = parse_device(_plain(path), str(path))
        assert typed.dist_info == plain.dist_info
        for lane in ("host", "runtime", "gpu"):
            a, b = getattr(typed, lane), getattr(plain, lane)
            assert len(a) == len(b)
            for x, y in zip(a, b):
                assert (x.name, x.cat, x.tid, x.ts, x.dur, x.parent) == (y.name, y.cat, y.tid, y.ts, y.dur, y.parent)
                assert x.child_us == pytest.approx(y.child_us)
                assert {k: x.args[k] for k in keys if k in x.args} == {k: y.args[k] for k in keys if k in y.args}
        assert typed.runtime_parent == plain.runtime_parent
        assert len(typed.host) + len(typed.gpu) > 10


def test_typed_host_reader_takes_any_layout_and_key_order(collectives_run, tmp_path):
    """A scan of PyTorch's exact text layout would miss a re-serialised file; a parser does not."""
    path = collectives_run / "rank-0.host.json.gz"
    doc = _plain(path)
    for n in doc["nodes"]:
        n.update(reversed(list(n.items())))  # keys in another order
    compact = json.dumps(doc, separators=(",", ":")).encode()
    typed = parse_host_bytes(compact, "compact.json", needs_args)
    plain = parse_host(doc, "compact.json")
    assert typed.ops[0].raw_inputs is not None
    assert [_op_facts(o, False) for o in typed.ops] == [_op_facts(o, False) for o in plain.ops]


def test_record_param_comms_attributes_reach_the_typed_ops():
    """Schema >= 1.1.0 names the collective in `attrs`: the typed path keeps them for comm ops."""
    node = {"id": 5, "name": "record_param_comms", "ctrl_deps": 4,
            "inputs": {"values": [[[7, 7, 0, 1024, 2, "cuda:0"]], 3, 0, 0, "", [], [], 4],
                       "shapes": [[[1024]], [], [], [], [], [], [], []], "types": ["GenericList[Tensor(c10::BFloat16)]"]},
            "outputs": {"values": [[[8, 8, 0, 4096, 2, "cuda:0"]]], "shapes": [[[4096]]], "types": []},
            "attrs": [{"name": "rf_id", "type": "uint64", "value": 9}, {"name": "fw_parent", "type": "uint64", "value": 0},
                      {"name": "seq_id", "type": "int64", "value": -1}, {"name": "scope", "type": "uint64", "value": 0},
                      {"name": "tid", "type": "uint64", "value": 2},
                      {"name": "collective_name", "type": "string", "value": "_allgather_base"},
                      {"name": "dtype", "type": "string", "value": "BFloat16"},
                      {"name": "pg_name", "type": "string", "value": "3"}]}
    root = {"id": 1, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 0, "attrs": []}
    data = json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": [root, node]}).encode()
    (op,) = parse_host_bytes(data, "t.json", needs_args).ops
    assert (op.rf_id, op.tid, op.attrs["collective_name"], op.attrs["pg_name"]) == (9, 2, "_allgather_base", "3")
    (call,), _ = find_calls([op])
    assert (call.op, call.pg, call.dtype, call.out_bytes) == ("all_gather", "3", "BFloat16", 4096 * 2)


def test_unescaped_annotation_names_are_repaired_on_the_typed_path():
    name = 'chakra_tools.comm:{"op":"all_reduce","pg":"0","in_bytes":64}'
    text = ('{"schema": "1.1.1-chakra.0.0.4", "nodes": [{"id": 2, "name": "' + name + '", "ctrl_deps": 1, '
            '"inputs": {"values": [], "shapes": [], "types": []}, "outputs": {"values": [], "shapes": [], "types": []}, '
            '"attrs": [{"name": "rf_id", "value": 3}, {"name": "tid", "value": 1}]}]}')
    (op,) = parse_host_bytes(text.encode(), "t.json", needs_args).ops
    assert op.name == name and op.raw_inputs is not None


def test_a_cut_host_trace_falls_back_and_names_the_line(collectives_run):
    data = read_bytes(collectives_run / "rank-0.host.json.gz")
    cut = data[: len(data) // 2]
    with pytest.raises(InputError, match=r"cut\.json: line \d+: not valid JSON"):
        parse_host_bytes(cut, "cut.json", needs_args)
    with pytest.raises(InputError, match=r"cut\.json: line \d+: not valid JSON"):
        parse_device_bytes(read_bytes(collectives_run / "rank-0.device.json.gz")[:5000], "cut.json")


def _host_doc(*nodes):
    root = {"id": 1, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 0,
            "attrs": [{"name": "tid", "value": 1}]}
    return json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": [root, *nodes]}).encode()


def _n(id, name, values, shapes=()):
    return {"id": id, "name": name, "ctrl_deps": 1,
            "inputs": {"values": values, "shapes": list(shapes) or [[]] * len(values), "types": ["Tensor(float)"] * len(values)},
            "outputs": {"values": [], "shapes": [], "types": []},
            "attrs": [{"name": "rf_id", "type": "uint64", "value": id}, {"name": "fw_parent", "type": "uint64", "value": 0},
                      {"name": "seq_id", "type": "int64", "value": -1}, {"name": "scope", "type": "uint64", "value": 0},
                      {"name": "tid", "type": "uint64", "value": 1}]}


def test_the_consumer_is_the_first_later_op_reading_the_written_tensor():
    """A shape that reads like the tensor's ids is not a use of it; the first true reader wins."""
    grad = [40, 41, 0, 16, 4, "cpu"]
    data = _host_doc(
        _n(2, "c10d::allreduce_", [[grad], "<None>"]),
        _n(3, "aten::view", [[9, 9, 0, 4, 4, "cpu"], [40, 41, 3]], shapes=[[4], [40, 41, 3]]),  # looks alike
        _n(4, "aten::mul", [[1, 1, 0, 16, 4, "cpu"]]),
        _n(5, "aten::add_", [[2, 2, 0, 16, 4, "cpu"], grad]),
        _n(6, "aten::add_", [grad]))
    host = parse_host_bytes(data, "t.json", needs_args)
    calls, _ = find_calls(host.ops)
    assert [c.root for c in calls] == [2]
    assert first_readers(host, calls) == {2: 5}
    plain = parse_host(json.loads(data), "t.json")  # the decoded-values path agrees
    assert first_readers(plain, find_calls(plain.ops)[0]) == {2: 5}


def test_device_dist_info_spread_over_lines_is_read(tmp_path):
    doc = {"distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8},
           "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2,
                            "args": {"Record function id": 4, "Input Dims": [[2, 2]]}}]}
    d = parse_device_bytes(json.dumps(doc, indent=4).encode(), "d.json")
    assert d.dist_info["world_size"] == 8
    (e,) = d.host
    assert (e.name, e.ts, e.dur, e.args) == ("aten::mm", 1.5, 2.0, {"Record function id": 4})


def test_gzip_and_plain_files_read_alike(collectives_run, tmp_path):
    src = collectives_run / "rank-0.host.json.gz"
    plain = tmp_path / "h.json"
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    a = parse_host_bytes(read_bytes(src), "a", needs_args)
    b = parse_host_bytes(read_bytes(plain), "b", needs_args)
    assert [_op_facts(o, False) for o in a.ops] == [_op_facts(o, False) for o in b.ops]
