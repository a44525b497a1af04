"""Device work after the host trace is kept (convert/extend.py), so that the replayed span is the
span the device trace measured: PARAM's public resnet pair's host trace stops 4.8 s into 14.5 s
of kernels. Each trace is made here, in the layout PyTorch writes (test_bad_trace_inputs.py's
tiny pair), with the host trace covering the first op and Kineto recording three more after it.
"""

from __future__ import annotations

import json

from chakra_tools.convert.rank import convert_rank
from chakra_tools.core.graph import RankSet
from chakra_tools.core.model import NodeType
from chakra_tools.replay import AS_CAPTURED, SystemSpec, replay

from test_bad_trace_inputs import _host_doc  # noqa: E402  (tests/convert is on the path)


def _op(name, ts, dur, rf, corr, kernel_ts, kernel_dur, tid=1):
    return [
        {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
         "args": {"Record function id": rf}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid,
         "ts": ts + 1, "dur": 2, "args": {"correlation": corr}},
        {"ph": "X", "cat": "kernel", "name": f"{name}_kernel", "pid": 0, "tid": 7, "ts": kernel_ts,
         "dur": kernel_dur, "args": {"correlation": corr, "stream": 7}},
    ]


def _pair(tmp_path, *, after: bool):
    """The host trace holds aten::add and aten::mul (rf 5, 6); Kineto those two and, with
    `after`, three ops the host trace does not (each launching a 1 ms kernel), 10 ms later."""
    host = _host_doc()
    events = _op("aten::add", 100, 10, 5, 7, 110, 20) + _op("aten::mul", 115, 10, 6, 8, 130, 20)
    if after:  # as a GPU-bound loop runs: the host launches ahead, the kernels queue on their stream
        for k in range(3):
            t = 10_000 + 60 * k
            events += _op("aten::relu", t, 50, 100 + k, 20 + k, 10_060 + 1_000 * k, 1_000)
    device = {"schemaVersion": 1, "traceEvents": events}
    h, d = tmp_path / "rank0.host.json", tmp_path / "rank0.kineto.json"
    h.write_text(json.dumps(host))
    d.write_text(json.dumps(device))
    return str(h), str(d)


def test_kernels_after_the_host_trace_are_kept_with_a_warning_naming_them(tmp_path):
    res = convert_rank(*_pair(tmp_path, after=True), 0)
    kernels = [n for n in res.graph if n.type is NodeType.COMP_NODE and n.name.endswith("_kernel")]
    assert [k.name for k in kernels] == ["aten::add_kernel", "aten::mul_kernel"] + ["aten::relu_kernel"] * 3
    relus = [n for n in res.graph if n.name == "aten::relu"]
    assert len(relus) == 3 and all(n.attrs["is_cpu_op"].value for n in relus)
    kept = [d for d in res.diagnostics if d.code == "device-work-kept"]
    assert len(kept) == 1 and "the 3 host events Kineto recorded after it (3 kernels, 3.0 ms)" in kept[0].message
    assert not [d for d in res.diagnostics if d.code == "host-trace-partial"]


def test_the_replay_as_captured_spans_what_the_device_trace_measured(tmp_path):
    from chakra_tools.core.measured import Measured
    from chakra_tools.replay.fidelity import compare_with_trace

    res = convert_rank(*_pair(tmp_path, after=True), 0)
    RankSet({0: res.graph}, {}, "t").write(tmp_path / "out", "t", record_world=True)
    measured = {0: Measured.from_metadata(res.graph.metadata, "t")}
    # from the first op (100 us) to the last kernel's end (13,060 us): the device trace's span
    assert abs(measured[0].duration_ns - 12_960_000) < 50_000, measured
    result = replay(tmp_path / "out", SystemSpec().backend(1), modes=AS_CAPTURED)
    job = compare_with_trace(result.to_dict(events=False), measured)["job"]
    assert abs(job["error"]) < 0.01, job


def test_a_host_trace_that_covers_its_device_trace_gains_nothing(tmp_path):
    res = convert_rank(*_pair(tmp_path, after=False), 0)
    assert not [n for n in res.graph if n.name == "aten::relu"]
    assert not [d for d in res.diagnostics if d.code == "device-work-kept"]
