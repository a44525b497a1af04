"""The compiled loops of a conversion (_hotloops.c) against their Python twins.

`host_ops` must make the same HostOps as its Python twin (convert/hotloops.py), and `to_nodes` the same Nodes as
`graphcheck._to_node`, on real traces (captures made by the test session, Chakra's 1.0.2 trace)
and on made-up inputs that send nodes back to Python: odd attribute lists, odd durations.
"""

from __future__ import annotations

import json
import math

import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from chakra_tools.convert import graphcheck, hostet, hotloops
from chakra_tools.convert.build import Builder, Rec
from chakra_tools.convert.comms import find_calls
from chakra_tools.convert.jsonio import decode_typed, read_bytes
from chakra_tools.convert.rank import needs_args, read_host
from chakra_tools.convert.readers import first_readers
from chakra_tools.core.errors import InputError
from chakra_tools.core.model import NodeType

NATIVE = hotloops.COMPILED
pytestmark = pytest.mark.skipif(NATIVE is None, reason="_hotloops.c not built")


def _facts(op):
    raw = op.raw_inputs
    return tuple(getattr(op, k) for k in hostet.HostOp.__slots__ if k != "raw_inputs") + (
        bytes(raw) if raw is not None else None,)


def _both(nodes, needs=needs_args):
    """Each side's ops, or the InputError it raised (a value out of type or range)."""
    return (_outcome(lambda: NATIVE.host_ops(nodes, needs, hostet._typed_op, hostet.HostOp,
                                             hostet._NO_ATTRS, hostet._IO_DECODER.decode)),
            _outcome(lambda: _twin_host_ops(nodes, needs)))


def _twin_host_ops(nodes, needs):
    with hotloops.python_twins():
        return hotloops.host_ops(nodes, needs, hostet._typed_op, hostet.HostOp, hostet._NO_ATTRS,
                                 hostet._IO_DECODER.decode)


def _outcome(make):
    try:
        return [_facts(o) for o in make()]
    except InputError as e:
        return f"InputError: {e}"


def _doc(data: bytes):
    return decode_typed(hostet._TRACE, data)


def test_host_ops_equal_python_on_real_traces(collectives_run, mlp_run, chakra_102):
    paths = [collectives_run / "rank-0.host.json.gz", collectives_run / "rank-1.host.json.gz",
             mlp_run / "rank-0.host.json.gz", chakra_102]
    for path in paths:
        nodes = _doc(read_bytes(path)).nodes
        for needs in (needs_args, *LEVELS):
            compiled, python = _both(nodes, needs)
            assert compiled == python, path


#: every op at one level: attributes only scanned (0, False), inputs decoded too (INPUTS, True),
#: and everything decoded by Python (ALL)
LEVELS = [lambda name: 0, lambda name: False, lambda name: hostet.INPUTS, lambda name: True,
          lambda name: hostet.ALL]


def _node(attrs_json: str, i: int = 1) -> dict:
    return {"id": i, "name": "aten::x", "ctrl_deps": i - 1,
            "inputs": {"values": [[1, 2, 0, 4, 4, "cpu"]], "shapes": [[2, 2]], "types": ["Tensor(float)"]},
            "outputs": {"values": [], "shapes": [], "types": []}, "attrs": json.loads(attrs_json)}


PYTORCH = ('[{"name": "rf_id", "type": "uint64", "value": %s}, {"name": "fw_parent", "value": 0},'
           ' {"name": "seq_id", "value": -1}, {"name": "scope", "value": 0},'
           ' {"name": "tid", "type": "uint64", "value": %s}, {"name": "op_schema", "value": "a\\"b"}]')

ATTR_LISTS = [
    PYTORCH % (8, 1),
    PYTORCH % ("null", "null"),
    PYTORCH % ('"8"', 2),  # a string value: Python reads it
    PYTORCH % (8.5, 2),    # a float
    PYTORCH % (123456789012345678901234567890, -3),  # beyond 64 bits, and negative
    PYTORCH % (0, 0),
    '[]',
    '[{"name": "tid", "value": 4}, {"name": "rf_id", "value": 9}]',  # another order
    '[{"name": "tid", "value": 4}, {"name": "tid", "value": 5}]',  # the last one wins
    '[{"name": "rf_id"}, {"name": "tid"}]',  # no values
    '[{"value": 3, "name": "rf_id"}, {"type": "x"}]',  # keys in any order, no name
    '[{"name": "r\\u0066_id", "value": 3}]',  # an escaped name
    '[{"name": "rf_id", "value": {"a": [1, [2, {"b": null}]]}}, {"name": "tid", "value": true}]',
    '[{"name": "rf_id", "value": 1, "value": 2}]',  # a key twice
    '[' + '{"name": "deep", "value": ' + '[' * 70 + ']' * 70 + '}, {"name": "tid", "value": 2}]',
]


@pytest.mark.parametrize("attrs", ATTR_LISTS)
def test_host_ops_equal_python_on_odd_attribute_lists(attrs):
    doc = {"schema": "1.1.1", "nodes": [_node(attrs, i) for i in (1, 2)]}
    nodes = _doc(json.dumps(doc).encode()).nodes
    for needs in LEVELS:
        compiled, python = _both(nodes, needs)
        assert compiled == python


def test_inputs_python_refuses_raise_the_same_from_c():
    node = _node(PYTORCH % (8, 1))
    node["inputs"] = [1, 2]  # schema 1.0.1's flat list: not {values, shapes, types}
    nodes = _doc(json.dumps({"schema": "1.1.1", "nodes": [node]}).encode()).nodes
    for needs in LEVELS[2:]:
        with pytest.raises(msgspec.ValidationError):
            _twin_host_ops(nodes, needs)
        with pytest.raises(msgspec.ValidationError):
            NATIVE.host_ops(nodes, needs, hostet._typed_op, hostet.HostOp, hostet._NO_ATTRS,
                            hostet._IO_DECODER.decode)


def test_an_attribute_list_python_refuses_raises_the_same_from_c():
    doc = {"schema": "1.1.1", "nodes": [_node('[{"name": 5, "value": 1}]')]}
    nodes = _doc(json.dumps(doc).encode()).nodes
    with pytest.raises(msgspec.ValidationError):
        _twin_host_ops(nodes, lambda name: False)
    with pytest.raises(msgspec.ValidationError):
        NATIVE.host_ops(nodes, lambda name: False, hostet._typed_op, hostet.HostOp, hostet._NO_ATTRS,
                        hostet._IO_DECODER.decode)


def test_host_ops_refuses_another_class():
    nodes = _doc(json.dumps({"nodes": [_node("[]")]}).encode()).nodes

    class Other:
        __slots__ = ("id",)

    with pytest.raises(TypeError, match="not a slot"):
        NATIVE.host_ops(nodes, lambda name: False, hostet._typed_op, Other, hostet._NO_ATTRS,
                        hostet._IO_DECODER.decode)


# -- to_nodes -----------------------------------------------------------------------------------

def _records(host_path, device_path=None):
    from chakra_tools.convert.kineto import parse_device_bytes
    from chakra_tools.convert.link import link

    host = read_host(host_path)
    calls, waits = find_calls(host.ops)
    consumers = first_readers(host, calls)
    dev = parse_device_bytes(read_bytes(device_path), str(device_path)) if device_path else None
    lk = link(host, dev) if dev is not None else None
    recs = Builder(host, dev, lk, 0, calls, waits, consumers).build().recs
    graphcheck.clean_deps(recs)
    return recs


def _copy(recs):
    out = []
    for r in recs:
        c = Rec(r.id, r.name, r.type, r.ts, r.dur_us, r.tid, r.stream)
        c.deps, c.attrs, c.call = list(r.deps), dict(r.attrs), r.call
        out.append(c)
    return out


def _nodes_both(recs, with_durations):
    a, b = _copy(recs), _copy(recs)
    compiled = NATIVE.to_nodes(a, with_durations, graphcheck.Node, graphcheck.Attr,
                               graphcheck._KINDS, graphcheck._CPU, graphcheck._to_node)
    python = [graphcheck._to_node(r, with_durations) for r in b]
    assert [r.attrs for r in a] == [r.attrs for r in b]  # the same side effect (duration_ns)
    return compiled, python


def _exact(nodes):
    """Nodes with the types of their fields (True == 1 and 1.0 == 1 must not hide a difference)."""
    return [(n, [type(x) for x in n], {k: (a, type(a.value)) for k, a in n.attrs.items()})
            for n in nodes]


def test_to_nodes_equals_python_on_real_conversions(collectives_run, mlp_run):
    for run in (collectives_run, mlp_run):
        recs = _records(run / "rank-0.host.json.gz", run / "rank-0.device.json.gz")
        assert any(r.call is not None for r in recs) or run == mlp_run
        for with_durations in (True, False):
            compiled, python = _nodes_both(recs, with_durations)
            assert _exact(compiled) == _exact(python)


DURATIONS = st.one_of(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e3, max_value=1e12),
                      st.integers(-10, 1 << 60), st.sampled_from([0.5, 1.5, 2.5, 0.0005, 0.0015, -0.0]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(DURATIONS, DURATIONS, st.booleans(), st.sampled_from([None, 0, 7, 1 << 40]),
                          st.booleans()), min_size=1, max_size=8))
def test_to_nodes_equals_python_on_any_times(specs):
    recs = []
    for i, (ts, dur, cpu, size, odd) in enumerate(specs, 1):
        r = Rec(i, f"op{i}", NodeType.COMP_NODE, ts, dur)
        r.attrs["is_cpu_op"] = cpu
        if size is not None:
            r.attrs["tensor_size"] = size
        if odd:
            r.attrs["note"] = "not a compute attribute: make_attrs builds it"
        r.deps = list(range(1, i))
        recs.append(r)
    for with_durations in (True, False):
        try:
            compiled, python = _nodes_both(recs, with_durations)
        except (ValueError, OverflowError):
            with pytest.raises((ValueError, OverflowError)):
                [graphcheck._to_node(r, with_durations) for r in _copy(recs)]
            continue
        assert _exact(compiled) == _exact(python)


def test_to_nodes_raises_what_python_raises():
    r = Rec(1, "nan", NodeType.COMP_NODE, 0.0, math.nan)
    r.attrs["is_cpu_op"] = True
    with pytest.raises(ValueError):
        graphcheck._to_node(_copy([r])[0], True)
    with pytest.raises(ValueError):
        NATIVE.to_nodes([r], True, graphcheck.Node, graphcheck.Attr, graphcheck._KINDS,
                        graphcheck._CPU, graphcheck._to_node)


def test_to_nodes_refuses_a_type_that_is_not_a_tuple():
    with pytest.raises(TypeError, match="named tuples"):
        NATIVE.to_nodes([], True, dict, graphcheck.Attr, graphcheck._KINDS, graphcheck._CPU,
                        graphcheck._to_node)


# -- mentions -----------------------------------------------------------------------------------

from chakra_tools.convert import readers  # noqa: E402


def _mentioning_both(ops, wanted, windows):
    """ops_mentioning of every window, through the compiled index and through bytes.find."""
    raws = [op.raw_inputs for op in ops]
    compiled = hotloops.inputs_search(raws, wanted)
    assert isinstance(compiled, hotloops._IndexSearch)
    with hotloops.python_twins():
        python = hotloops.inputs_search(raws, wanted)
    hits = 0
    for keys, start, end in windows:
        found = compiled.ops_mentioning(keys, start, end)
        assert found == python.ops_mentioning(keys, start, end)
        hits += len(found)
    return hits


def test_mentions_equal_python_on_real_traces(collectives_run, ddp_run):
    for run in (collectives_run, ddp_run):
        host = read_host(run / "rank-0.host.json.gz")
        calls, _ = find_calls(host.ops)
        by_id = host.by_id_cache()
        written = [readers.written_tensors(c, by_id) for c in calls]
        wanted = set().union(*written)
        assert wanted
        n = len(host.ops)
        assert _mentioning_both(host.ops, wanted, [(k, s, min(n, s + w)) for k in written
                                                   for s in (0, n // 3) for w in (50, n)]) > 0


class _Op:
    def __init__(self, text: str):
        self.raw_inputs = text.encode()


RAWS = ['{"values": [[5,6,0,4,4,"cpu"]]}', '{"values": [[5, 6, 0]]}', '{"values": [[05,6,0]]}',
        '{"values": [[15,6,0], [5,66,0], [5,6]]}', '{"values": ["[5,6,", [-5,6,1], [-0,6,1]]}',
        '[5,  6,', '[5,6,[5,6,[5,6,', '', '[', '[5', '[5,', '[5,6', '[0,6,', '[5,6,]',
        '[123456789012345678901,6,', '[7,8, "x"]']


@pytest.mark.parametrize("wanted", [{(5, 6)}, {(5, 6), (-5, 6), (0, 6), (7, 8), (15, 6)},
                                    {(5, 66), (123456789012345678901, 6)}])
def test_mentions_equal_python_on_odd_texts(wanted):
    ops = [_Op(t) for t in RAWS]
    n = len(ops)
    _mentioning_both_or_python(ops, wanted, [(wanted, s, e) for s in range(n) for e in (s + 1, n)])


def _mentioning_both_or_python(ops, wanted, windows):
    if any(abs(a) >= 1 << 59 for a, _ in wanted):  # the compiled index declines: Python searches
        assert isinstance(hotloops.inputs_search([op.raw_inputs for op in ops], wanted), hotloops._TextSearch)
        return
    assert _mentioning_both(ops, wanted, windows) > 0


# -- device_events, nest ------------------------------------------------------------------------

from chakra_tools.convert import kineto  # noqa: E402

EVENT_FIELDS = ("idx", "name", "cat", "tid", "ts", "dur", "args", "parent", "child_us")


def _device_facts(dt):
    lanes = [[tuple((getattr(e, k), type(getattr(e, k))) for k in EVENT_FIELDS) for e in lane]
             for lane in (dt.host, dt.runtime, dt.gpu)]
    return lanes, list(dt.runtime_parent.items())


def _device_both(data: bytes, full_args: bool):
    compiled = kineto.parse_device_bytes(data, "x", full_args=full_args)
    with hotloops.python_twins():
        python = kineto.parse_device_bytes(data, "x", full_args=full_args)
    return _device_facts(compiled), _device_facts(python)


def test_device_events_and_nesting_equal_python_on_real_traces(collectives_run, shared_fixtures):
    paths = [collectives_run / "rank-0.device.json.gz",
             shared_fixtures / "param" / "linear_1gpu_kineto.json.gz",
             shared_fixtures / "hta" / "simple_add_kineto.json.gz",
             shared_fixtures / "hta" / "sampled_rank0_kineto.json.gz"]
    kinds = set()
    for path in paths:
        data = read_bytes(path)
        for full_args in (False, True):
            compiled, python = _device_both(data, full_args)
            assert compiled == python, path
            kinds.update(i for i, lane in enumerate(compiled[0]) if lane)
    assert kinds == {0, 1, 2}  # host, runtime and GPU events were all compared


def _trace(events) -> bytes:
    return json.dumps({"traceEvents": events}).encode()


def test_nesting_equals_python_on_made_up_timelines():
    ev = lambda name, ts, dur, tid=1, cat="cpu_op", **a: {  # noqa: E731
        "ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid, "args": a}
    events = [ev("outer", 0, 10), ev("inner", 1, 3), ev("inner2", 4, 6), ev("same", 4, 6),
              ev("zero", 5, 0), ev("late", 10.0005, 1), ev("other", 0, 100, tid="t2"),
              ev("cudaLaunchKernel", 2, 1, cat="cuda_runtime", correlation=7),
              ev("k", 3, 1, cat="kernel", correlation=7, stream=7), ev("nccl:x", 1, 1),
              {"ph": "i", "cat": "cpu_op", "name": "instant", "ts": 1},
              ev("nodur", 3, None), ev("neg", 2, -1),
              ev("step", 20, 10, tid=3), ev("optimizer", 27, 5, tid=3), ev("opt.step", 28, 1, tid=3),
              ev("step2", 30.5, 10, tid=3)]
    compiled, python = _device_both(_trace(events), False)
    assert compiled == python
    assert any(f[7][0] != -1 for f in compiled[0][0])  # some host event has a parent


def test_nesting_declines_what_it_cannot_order():
    bad = kineto.Event(0, "a", "", 0, 0.0, 1.0, {})
    bad.ts = "0"  # not a float: the compiled nesting leaves it to Python, changing nothing
    assert NATIVE.nest([bad], [], {}, kineto.Event, kineto.EPS) is False
    assert (bad.parent, bad.child_us) == (-1, 0.0)


# -- end to end: the same files with and without the compiled loops -----------------------------

import subprocess  # noqa: E402
import sys  # noqa: E402


def _convert_in_process(run, out, pure: bool):
    env = {**__import__("os").environ}
    env.pop("CHAKRA_TOOLS_PURE_PYTHON", None)
    if pure:
        env["CHAKRA_TOOLS_PURE_PYTHON"] = "1"
    code = ("import sys; from chakra_tools.convert import hotloops;"
            "from chakra_tools.convert.run import convert_run;"
            "assert (hotloops.COMPILED is None) == bool(sys.argv[3]);"
            "convert_run(sys.argv[1], sys.argv[2], executor='serial')")
    proc = subprocess.run([sys.executable, "-c", code, str(run), str(out), "1" if pure else ""],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_conversions_write_the_same_bytes_with_and_without_the_compiled_loops(
        collectives_run, ddp_run, tmp_path):
    for run in (collectives_run, ddp_run):
        compiled = _convert_in_process(run, tmp_path / f"{run.parent.name}-c", pure=False)
        python = _convert_in_process(run, tmp_path / f"{run.parent.name}-py", pure=True)
        assert compiled.keys() == python.keys() and len(compiled) >= 3
        assert compiled == python


# -- tensor_bytes -------------------------------------------------------------------------------

TENSOR = st.tuples(st.integers(0, 1 << 20), st.integers(0, 1 << 20), st.integers(0, 9),
                   st.integers(-5, 1 << 62), st.one_of(st.integers(-2, 1 << 40), st.floats(0, 8), st.none()),
                   st.sampled_from(["cpu", "cuda:0"])).map(list)
VALUES = st.recursive(st.one_of(TENSOR, st.integers(), st.text(max_size=3), st.none()),
                      lambda inner: st.lists(inner, max_size=5), max_leaves=30)


@settings(max_examples=500, deadline=None)
@given(VALUES)
def test_tensor_bytes_equals_python(v):
    compiled = NATIVE.tensor_bytes(v)
    python = hotloops._tensor_bytes(v)
    assert compiled is None or (compiled == python and type(compiled) is int)
    assert hotloops.tensor_bytes(v) == python


def test_tensor_bytes_in_c_on_real_values(collectives_run):
    host = read_host(collectives_run / "rank-0.host.json.gz")
    values = [op.in_values for op in host.ops if op.in_values] + [op.out_values for op in host.ops]
    assert sum(NATIVE.tensor_bytes(v) is not None for v in values) == len(values)
    assert [NATIVE.tensor_bytes(v) for v in values] == [hotloops._tensor_bytes(v) for v in values]
