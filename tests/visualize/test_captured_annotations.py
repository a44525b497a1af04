"""A captured CPU run's communication volume comes from trace-capture's annotations (Kineto
records no sizes for gloo calls)."""

from __future__ import annotations

import json

from chakra_tools.core.annotations import format_annotation
from chakra_tools.visualize.analysis import breakdown, comm_volume, top_operators
from chakra_tools.visualize.captured import from_capture


def test_annotated_collectives_carry_their_bytes_kind_and_group(tmp_path):
    ann = format_annotation({"op": "all_reduce", "pg": "0", "in_bytes": 4096, "out_bytes": 4096, "dtype": "float32"})
    gather = format_annotation({"op": "all_gather", "pg": "1", "pg_ranks": [0, 1], "in_bytes": 64, "out_bytes": 128})
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 50, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": ann, "ts": 60, "dur": 30, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "ts": 61, "dur": 28, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": gather, "ts": 100, "dur": 10, "pid": 1, "tid": 1},
    ]
    path = tmp_path / "rank-0.device.json"
    path.write_text(json.dumps({"traceEvents": events}))
    es = from_capture(path)
    vol = {(v["kind"], v["group"]): (v["count"], v["bytes"]) for v in comm_volume(es)}
    # a group by its ranks where the annotation names them (torch's name and the converted id differ)
    assert vol == {("ALL_REDUCE", "pg 0"): (1, 4096), ("ALL_GATHER", "ranks 0-1"): (1, 128)}
    # a CPU run has no device compute: its top operators are the host ops, the calls by their name
    assert {"aten::mm", "dist.all_reduce", "dist.all_gather"} <= {row["name"] for row in top_operators(es)}
    # ... and its calls are its communication, as the converter makes them, not compute
    assert breakdown(es)[0] == {"start_ns": 0, "finish_ns": 110_000, "compute_ns": 50_000,
                                "exposed_comm_ns": 40_000, "overlap_ns": 0, "idle_ns": 20_000}
