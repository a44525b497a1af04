"""Host and Kineto traces with values of the wrong type or out of range (issue 14): each is an
InputError naming the file and the event or node, never another exception; and the typed
(msgspec) path and the plain JSON path of each reader make the same records or the same error.

The inputs are tiny traces made here, in the layout PyTorch writes (schema 1.1.1 host traces,
Kineto's Chrome trace JSON); each case is a fault the fuzz harness (tests/fuzz) found.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings, strategies as st

from chakra_tools.convert import hostet, kineto
from chakra_tools.convert.crossrank import MAX_WORLD, world_of
from chakra_tools.convert.rank import convert_rank, needs_args
from chakra_tools.core.errors import InputError


def _host_doc() -> dict:
    attrs = lambda rf, tid: [{"name": "rf_id", "type": "uint64", "value": rf},  # noqa: E731
                             {"name": "fw_parent", "type": "uint64", "value": 0},
                             {"name": "seq_id", "type": "int64", "value": -1},
                             {"name": "scope", "type": "uint64", "value": 0},
                             {"name": "tid", "type": "uint64", "value": tid}]
    io = {"values": [[10, 11, 0, 4, 4, "cpu"]], "shapes": [[2, 2]], "types": ["Tensor(float)"]}
    return {"schema": "1.1.1-chakra.0.0.4", "nodes": [
        {"id": 1, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 0,
         "inputs": {}, "outputs": {}, "attrs": attrs(0, 1)},
        {"id": 2, "name": "aten::add", "ctrl_deps": 1, "inputs": io, "outputs": io, "attrs": attrs(5, 1)},
        {"id": 3, "name": "aten::mul", "ctrl_deps": 1, "inputs": io, "outputs": io, "attrs": attrs(6, 1)}]}


def _device_doc() -> dict:
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 2, "pg_config": [
        {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}]},
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 100, "dur": 10,
             "args": {"Record function id": 5}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": 102, "dur": 3, "args": {"correlation": 7}},
            {"ph": "X", "cat": "kernel", "name": "add_kernel", "pid": 0, "tid": 7, "ts": 110.5,
             "dur": 2.25, "args": {"correlation": 7, "stream": 7}},
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 8,
             "ts": 120, "dur": 4, "args": {"correlation": 9, "stream": 8, "Collective name": "allreduce",
                                           "In msg nelems": 4, "Process Group Ranks": "[0, 1]"}},
            {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}]}


def _write(tmp_path, name: str, doc) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def _convert(tmp_path, host=None, device=None):
    h = _write(tmp_path, "rank0.host.json", host) if host is not None else None
    d = _write(tmp_path, "rank0.kineto.json", device) if device is not None else None
    return convert_rank(h, d, 0)


def _device_with(pos: int, key: str, value) -> dict:
    doc = _device_doc()
    doc["traceEvents"][pos][key] = value
    return doc


# -- each fault the fuzz harness found, now an InputError naming the file and the place ------

@pytest.mark.parametrize("key, value", [
    ("tid", []),              # was TypeError: unhashable 'list' (kineto._nest)
    ("ts", {"x": 0}),         # was TypeError: float() of a dict (Event.__init__)
    ("dur", [1, "x"]),        # was TypeError: float() of a list
    ("name", 0),              # was AttributeError: 'int' has no startswith (rank.py)
    ("ts", 5e24),             # was TraceWriteError naming only the output file
    ("dur", float("inf")),    # json writes Infinity; the plain path read it
])
def test_kineto_event_field_of_wrong_type_or_range_names_the_event(tmp_path, key, value):
    with pytest.raises(InputError) as e:
        _convert(tmp_path, _host_doc(), _device_with(0, key, value))
    assert "rank0.kineto.json: traceEvents[0]" in str(e.value) and repr(key) in str(e.value)


def test_kineto_category_of_another_type_is_no_lane(tmp_path):
    """A `cat` that is not text names no category the converter reads (was TypeError:
    unhashable 'list' in parse_device): the event is left out, as an unknown category is."""
    doc = _device_with(2, "cat", [])
    dt = kineto.parse_device_bytes(json.dumps(doc).encode(), "d.json")
    assert [e.name for e in dt.gpu] == ["ncclDevKernel_AllReduce"]
    assert [e.name for e in dt.host] == ["aten::add"]


def test_kineto_collective_metadata_of_wrong_type_names_the_event():
    doc = _device_doc()
    doc["traceEvents"][3]["args"]["In msg nelems"] = "four"
    with pytest.raises(InputError, match=r"d.json: traceEvents\[3\] \('ncclDevKernel_AllReduce'\): "
                                         r"'In msg nelems' is 'four'"):
        kineto.parse_device_bytes(json.dumps(doc).encode(), "d.json")


def test_kineto_process_group_ranks_must_be_ranks():
    """The converter wrote such ranks into comm_group.json (issue 14)."""
    doc = _device_doc()
    doc["distributedInfo"]["pg_config"][0]["ranks"] = [0, "x"]
    with pytest.raises(InputError, match=r"d.json: distributedInfo.pg_config\[0\]: 'ranks' is 'x'"):
        kineto.parse_device_bytes(json.dumps(doc).encode(), "d.json")


@pytest.mark.parametrize("key, value, where", [
    ("name", ["aten::add", "aten::add"], "node 2"),  # was AttributeError in hostet._collect
    ("id", None, "nodes[1]"),                        # was TypeError comparing None and int
    ("id", 2**64, "nodes[1]"),
    ("ctrl_deps", "1", "node 2 ('aten::add')"),
])
def test_host_node_field_of_wrong_type_names_the_node(tmp_path, key, value, where):
    doc = _host_doc()
    doc["nodes"][1][key] = value
    with pytest.raises(InputError) as e:
        _convert(tmp_path, doc, _device_doc())
    assert f"rank0.host.json: {where}" in str(e.value) and repr(key) in str(e.value)


@pytest.mark.parametrize("value", [[1], "1", 2**63, 1.5])
def test_host_thread_id_must_be_an_int64(tmp_path, value):
    doc = _host_doc()
    doc["nodes"][2]["attrs"][4]["value"] = value
    with pytest.raises(InputError, match=r"rank0.host.json: node 3 \('aten::mul'\): 'tid' is"):
        _convert(tmp_path, doc, _device_doc())


def test_shapes_no_tensor_has_name_the_node_not_the_output(tmp_path):
    """Dims of 2**40 made a cost beyond int64: a TraceWriteError naming only the output."""
    doc = _host_doc()
    big = [[10, 11, 0, 2**62, 4, "cpu"], [12, 13, 0, 2**62, 4, "cpu"]]
    doc["nodes"][1].update(name="aten::mm", inputs={"values": big, "shapes": [[2**40, 2**40]] * 2,
                                                      "types": ["Tensor(float)"] * 2})
    with pytest.raises(InputError, match=r"rank0.host.json: node 2 \('aten::mm'\): its recorded shapes"):
        _convert(tmp_path, doc, _device_doc())


def test_a_tag_beyond_int32_names_the_send(tmp_path):
    """`comm_tag` is int32 on the wire: c10d::send's tag argument of 2**40 was a TraceWriteError."""
    doc = _host_doc()
    doc["nodes"][2].update(name="c10d::send", inputs={
        "values": [[[10, 11, 0, 4, 4, "cpu"]], "<ProcessGroup>", 1, 2**40],
        "shapes": [[[2, 2]], [], [], []], "types": ["GenericList[Tensor(float)]", "ProcessGroup", "Int", "Int"]})
    with pytest.raises(InputError, match=r"rank0.host.json: node 3 \('c10d::send'\): comm_tag 1099511627776"):
        _convert(tmp_path, doc)


def test_device_only_type_names_that_are_not_text_are_no_type(tmp_path):
    """A device-only conversion reads shapes and types from `Input Dims` / `Input type`; a type
    recorded as a number was an AttributeError (tensors.type_inner). It is no type: the node is
    the one an empty type name makes."""
    def mm_node(types):
        doc = _device_doc()
        doc["traceEvents"][0]["name"] = "aten::mm"
        doc["traceEvents"][0]["args"].update({"Input Dims": [[2, 2], [2, 2]], "Input type": types})
        graph = _convert(tmp_path, device=doc).graph
        return next(n for n in graph.nodes.values() if n.name == "aten::mm")

    assert mm_node([5, 6]) == mm_node(["", ""])


def test_a_world_too_large_to_list_names_its_source():
    """manifest `world_size` 2**31 was a MemoryError in crossrank.world_of."""
    with pytest.raises(InputError, match=r"run/manifest.json: world_size 2147483648 is more ranks"):
        world_of([], 2**31, "run/manifest.json")
    assert world_of([], MAX_WORLD, "m") == tuple(range(MAX_WORLD))


# -- the typed path and the plain path agree ---------------------------------------------------

_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=4) |
                     st.floats(allow_nan=False, allow_infinity=False),
                     lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner,
                                                                                  max_size=2), max_leaves=4)


def _outcome(make):
    try:
        return make()
    except InputError as e:
        return f"InputError: {e}"


def _device_facts(dt):
    lanes = [[(e.idx, e.name, e.cat, e.tid, e.ts, e.dur, e.args, e.parent, e.child_us) for e in lane]
             for lane in (dt.host, dt.runtime, dt.gpu)]
    return lanes, dt.dist_info, dt.runtime_parent


@settings(max_examples=150, deadline=None)
@given(pos=st.integers(0, 4), key=st.sampled_from(["ph", "cat", "name", "tid", "ts", "dur", "args"]),
       value=_JSON, full_args=st.booleans())
def test_kineto_typed_and_plain_paths_agree(pos, key, value, full_args):
    doc = _device_with(pos, key, value)
    data = json.dumps(doc).encode()
    both = _outcome(lambda: _device_facts(kineto.parse_device_bytes(data, "d.json", full_args=full_args)))
    plain = _outcome(lambda: _device_facts(kineto.parse_device(json.loads(data), "d.json",
                                                               full_args=full_args)))
    assert both == plain


def _host_facts(trace):
    return [(op.id, op.name, op.parent, op.tid, op.rf_id, op.attrs,
             (op.in_values, op.in_shapes, op.in_types) if needs_args(op.name) else None)
            for op in trace.ops], trace.schema, sorted(trace.roots)


@settings(max_examples=150, deadline=None)
@given(pos=st.integers(1, 2), key=st.sampled_from(["id", "name", "ctrl_deps", "inputs", "attrs", "tid"]),
       value=_JSON)
def test_host_typed_and_plain_paths_agree(pos, key, value):
    doc = copy.deepcopy(_host_doc())
    if key == "tid":
        doc["nodes"][pos]["attrs"][4]["value"] = value
    else:
        doc["nodes"][pos][key] = value
    data = json.dumps(doc).encode()
    both = _outcome(lambda: _host_facts(hostet.parse_host_bytes(data, "h.json", needs_args)))
    plain = _outcome(lambda: _host_facts(hostet.parse_host(json.loads(data), "h.json", needs_args)))
    assert both == plain
