"""Waits on asynchronous collectives become dependencies (tiny inline host traces).

A functional collective (`funcol.all_gather_tensor(...)`) returns at once; `.wait()` records a
`_c10d_functional::wait_tensor` on the tensor the collective writes. Where that wait runs after
the call, it must depend on the collective's node; where it runs inside the call (gloo waits
there), the call blocks its thread like a synchronous one.
"""

from __future__ import annotations

import json

from chakra_tools.convert.rank import convert_rank
from chakra_tools.core.annotations import format_annotation
from chakra_tools.core.model import NodeType

T_IN = [40, 41, 0, 4, 4, "cpu"]
T_OUT = [50, 51, 0, 8, 4, "cpu"]


def _node(id, name, parent, ins=(), outs=()):
    return {"id": id, "name": name, "ctrl_deps": parent,
            "inputs": {"values": list(ins), "shapes": [[]] * len(ins), "types": ["Tensor(float)"] * len(ins)},
            "outputs": {"values": list(outs), "shapes": [[]] * len(outs), "types": ["Tensor(float)"] * len(outs)},
            "attrs": [{"name": "rf_id", "type": "uint64", "value": id}, {"name": "fw_parent", "type": "uint64", "value": 0},
                      {"name": "seq_id", "type": "int64", "value": -1}, {"name": "scope", "type": "uint64", "value": 0},
                      {"name": "tid", "type": "uint64", "value": 1}]}


def _trace(tmp_path, wait_inside: bool):
    """ops 3..5: the annotated funcol all_gather; 6: its wait_tensor, after the call or inside
    it, with gloo's backend op 7 running inside the wait (as gloo records it); 8: a reader of
    the gathered tensor; 9: an op that reads something else."""
    ann = format_annotation({"op": "all_gather", "api": "funcol.all_gather_tensor", "pg": "0", "async": True,
                             "seq": 0, "in_bytes": 16, "out_bytes": 32, "dtype": "float32", "elem_bytes": 4})
    other = [70, 71, 0, 4, 4, "cpu"]
    nodes = [
        _node(1, "[pytorch|profiler|execution_trace|thread]", 0),
        _node(2, "ProfilerStep#1", 1),
        _node(3, ann, 2),
        _node(4, "_c10d_functional::all_gather_into_tensor", 3, [T_IN, 2, "0"], [T_OUT]),
        _node(5, "c10d::allgather_into_tensor_coalesced_", 4, [[T_OUT], [T_IN], "<Object>", True], ["<Object>"]),
        _node(6, "_c10d_functional::wait_tensor", 3 if wait_inside else 2, [T_OUT], [T_OUT]),
        _node(7, "gloo:all_gather", 6, [T_IN]),
        _node(8, "aten::ones", 2, [[4], 6], [other]),
        _node(9, "aten::add", 2, [T_OUT, other], [[60, 61, 0, 8, 4, "cpu"]]),
    ]
    path = tmp_path / "host.json"
    path.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    return convert_rank(path, None, 0).graph


def _by_name(graph, prefix):
    return next(n for n in graph if n.name.startswith(prefix))


def test_a_wait_after_the_call_depends_on_the_collective(tmp_path):
    g = _trace(tmp_path, wait_inside=False)
    coll, wait = _by_name(g, "gloo:all_gather"), _by_name(g, "_c10d_functional::wait_tensor")
    assert coll.type is NodeType.COMM_COLL_NODE and coll.comm_size == 16
    assert coll.id in wait.data_deps
    assert coll.id not in _by_name(g, "aten::ones").data_deps  # asynchronous: the thread went on
    assert wait.id in _by_name(g, "aten::ones").data_deps


def test_a_call_that_waits_inside_blocks_its_thread(tmp_path):
    g = _trace(tmp_path, wait_inside=True)
    coll = _by_name(g, "gloo:all_gather")
    assert not any(n.name.endswith("wait_tensor") for n in g)  # the wait is part of the call
    assert coll.id in _by_name(g, "aten::ones").data_deps  # the next op waits for it
