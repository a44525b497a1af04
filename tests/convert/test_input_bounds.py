"""Host and Kineto traces the fuzz harness (tests/fuzz) found hanging the converter or escaping
it with an undocumented exception (issue 32): a loop of callers among costed host ops, and
Kineto `Input Dims` / `Input type` that are no lists. Each is made here by hand, in the layout
PyTorch writes (test_bad_trace_inputs.py's tiny traces), and ends in an InputError naming the
file and the place, within a time limit: a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import copy
import json
import signal

import pytest

from chakra_tools.convert import kineto
from chakra_tools.convert.rank import convert_rank
from chakra_tools.core.errors import InputError

from test_bad_trace_inputs import _device_doc, _host_doc  # noqa: E402  (tests/convert is on the path)

LIMIT_S = 20  # a conversion of three ops takes milliseconds; a hang fails here


@contextlib.contextmanager
def time_limit(seconds: float = LIMIT_S):
    """Raise TimeoutError in the test if the body runs longer than `seconds` (SIGALRM)."""
    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: a hang")
    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _write(tmp_path, name: str, doc) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def _with_callers(callers: dict[int, int], names: dict[int, str] | None = None) -> dict:
    """The test host trace (thread root 1, aten::add 2, aten::mul 3, both costed) with node ->
    caller links (`ctrl_deps`) replaced, names where given, and any further node named there
    added as an op without cost (`aten::empty`)."""
    doc = _host_doc()
    by_id = {n["id"]: n for n in doc["nodes"]}
    for nid in sorted(callers.keys() - by_id.keys()):
        by_id[nid] = dict(copy.deepcopy(by_id[2]), id=nid, name="aten::empty")
        doc["nodes"].append(by_id[nid])
    for nid, caller in callers.items():
        by_id[nid]["ctrl_deps"] = caller
    for nid, name in (names or {}).items():
        by_id[nid]["name"] = name
    return doc


def _flat(doc: dict) -> dict:
    """The same trace in schema 1.0.1's layout: `parent` and flat inputs at the top level."""
    nodes = []
    for n in doc["nodes"]:
        ins, outs = n["inputs"], n["outputs"]
        nodes.append({"id": n["id"], "name": n["name"], "parent": n["ctrl_deps"], "tid": 1,
                      "rf_id": n["id"], "inputs": ins.get("values", []), "input_shapes": ins.get("shapes", []),
                      "input_types": ins.get("types", []), "outputs": outs.get("values", []),
                      "output_shapes": outs.get("shapes", []), "output_types": outs.get("types", [])})
    return {"schema": "1.0.1", "nodes": nodes}


# -- a loop of callers (build.py `_costs` walked it forever) --------------------------------

@pytest.mark.parametrize("callers, loop", [
    ({2: 3, 3: 2}, "nodes 2 -> 3 -> 2"),      # two costed ops, each the other's caller
    ({2: 2}, "nodes 2 -> 2"),                  # an op its own caller
    ({3: 2, 2: 4, 4: 2}, "nodes 2 -> 4 -> 2"),  # a loop above a costed op, through an uncosted one
])
@pytest.mark.parametrize("layout", ["1.1.1", "1.0.1"])
def test_a_loop_of_callers_is_refused_naming_the_file_and_the_nodes(tmp_path, callers, loop, layout):
    doc = _with_callers(callers)
    path = _write(tmp_path, "rank0.host.json", _flat(doc) if layout == "1.0.1" else doc)
    with time_limit(), pytest.raises(InputError) as e:
        convert_rank(path, None, 0)
    assert path in str(e.value) and loop in str(e.value), e.value
    assert "caller" in str(e.value)


def test_a_loop_among_ops_without_cost_changes_nothing(tmp_path):
    """Nothing walks the callers of uncosted ops: such a trace converts as before."""
    doc = _with_callers({2: 3, 3: 2}, {2: "aten::empty", 3: "aten::zeros"})
    with time_limit():
        result = convert_rank(_write(tmp_path, "rank0.host.json", doc), None, 0)
    assert [n.name for n in result.graph] == ["aten::empty", "aten::zeros"]


def test_costs_stay_on_the_innermost_op_of_a_deep_chain(tmp_path):
    """Callers cleared by one walk end the next: a chain of 3,000 costed ops keeps one cost,
    on the innermost, in a time linear in the chain."""
    doc = _host_doc()
    template = doc["nodes"][1]
    doc["nodes"] = doc["nodes"][:1] + [dict(copy.deepcopy(template), id=i, ctrl_deps=i - 1 if i > 2 else 1)
                                       for i in range(2, 3002)]
    with time_limit():
        graph = convert_rank(_write(tmp_path, "rank0.host.json", doc), None, 0).graph
    nodes = list(graph)
    assert len(nodes) == 3000 and [n for n in nodes if "num_ops" in n.attrs] == [nodes[-1]]


# -- Kineto `Input Dims` / `Input type` (device-only conversion reads them as shapes and types) --

def _device_with_args(name: str, **args) -> dict:
    doc = _device_doc()
    event = doc["traceEvents"][0]
    event["name"] = name
    event["args"].update({"Input Dims": [[2, 2], [2, 2]], "Input type": ["float", "float"]})
    event["args"].update({k.replace("_", " "): v for k, v in args.items()})
    return doc


@pytest.mark.parametrize("key, value", [
    ("Input_type", {"a": 1}),  # was KeyError 0 (comms.py, an object indexed as a list)
    ("Input_Dims", 0),         # was TypeError: object of type 'int' has no len() (tensors.py)
    ("Input_Dims", "[2, 2]"),
    ("Input_type", "float"),
])
@pytest.mark.parametrize("name", ["aten::mm", "c10d::allreduce_", "record_param_comms"])
def test_input_dims_and_types_that_are_no_lists_are_refused_naming_the_event(tmp_path, key, value, name):
    doc = _device_with_args(name, **{key: value})
    path = _write(tmp_path, "rank0.kineto.json", doc)
    field = key.replace("_", " ")
    with time_limit(), pytest.raises(InputError) as e:
        convert_rank(None, path, 0)
    assert str(e.value).endswith(f"{path}: traceEvents[0] ({name!r}): {field!r} is {value!r}, "
                                 "not a list (one item per input)"), e.value
    # the typed (msgspec) path and the plain JSON path read the same
    for read in (lambda: kineto.parse_device(json.loads(json.dumps(doc)), path, full_args=True),
                 lambda: kineto.parse_device_bytes(json.dumps(doc).encode(), path, full_args=True)):
        with pytest.raises(InputError, match=f"{field!r} is"):
            read()


def test_null_input_dims_and_types_read_as_absent(tmp_path):
    """Both are optional (no `record_shapes`): null is no value, as elsewhere in Kineto's args."""
    doc = _device_with_args("aten::mm", Input_Dims=None, Input_type=None)
    with time_limit():
        graph = convert_rank(None, _write(tmp_path, "rank0.kineto.json", doc), 0).graph
    assert "aten::mm" in [n.name for n in graph]


def test_items_of_no_shape_or_type_have_no_size(tmp_path):
    """The items stay loose, as in host traces: a shape that is no list of integers, a type that
    is no text, gives no size (0), not an error."""
    doc = _device_with_args("aten::mm", Input_Dims=[0, ["x"], [1e300]], Input_type=[1, None, {}])
    with time_limit():
        graph = convert_rank(None, _write(tmp_path, "rank0.kineto.json", doc), 0).graph
    (mm,) = [n for n in graph if n.name == "aten::mm"]
    assert "num_ops" not in mm.attrs


# -- numbers of more than 4,300 digits (json.loads raises a plain ValueError on them) ---------

def test_a_process_group_list_with_a_5000_digit_rank_names_the_node(tmp_path):
    """The group list of `## process_group:init ##` is JSON text inside the trace: a number too
    long for int() was a ValueError (no JSONDecodeError) out of `hostet._pg_list`."""
    doc = _host_doc()
    groups = '[{"pg_name": "0", "ranks": [' + "1" * 5000 + "]}]"
    doc["nodes"].append(dict(copy.deepcopy(doc["nodes"][1]), id=4, name="## process_group:init ##",
                             inputs={"values": [groups], "shapes": [[]], "types": ["String"]}))
    path = _write(tmp_path, "rank0.host.json", doc)
    with time_limit(), pytest.raises(InputError) as e:
        convert_rank(path, None, 0)
    assert str(e.value).endswith(f"{path}: node 4 ('## process_group:init ##'): unreadable group list"), e.value


def test_a_trace_with_a_5000_digit_number_is_refused_naming_the_file(tmp_path):
    """json.loads raises a plain ValueError past 4,300 digits: the reader names the file."""
    path = tmp_path / "rank0.kineto.json"
    text = json.dumps(_device_doc())
    path.write_text(text.replace('"ts": ', '"ts": ' + "1" * 5000 + ", \"x\": ", 1))
    with time_limit(), pytest.raises(InputError) as e:
        convert_rank(None, str(path), 0)
    assert f"{path}: cannot read a number in it" in str(e.value), e.value


def test_process_group_ranks_as_text_with_a_5000_digit_rank_is_refused(tmp_path):
    """Kineto writes a group's ranks as text ("[0, 1]"); its numbers are bounded when read."""
    doc = _device_with_args("record_param_comms", Process_Group_Ranks="[0, " + "1" * 5000 + "]")
    path = _write(tmp_path, "rank0.kineto.json", doc)
    with time_limit(), pytest.raises(InputError) as e:
        convert_rank(None, path, 0)
    assert "'Process Group Ranks' is" in str(e.value) and str(path) in str(e.value), e.value
