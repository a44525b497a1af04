"""GPU execution semantics, one rule a test, on small hand-made device traces (converted as a
device-only pair: the host ops come from the Kineto trace's own cpu_ops) and on the shared
traces of real GPU runs.

Each hand-made trace is a timeline a real CUDA program produces: host ops on one thread, kernels
on a stream, runtime calls inside the host ops that launched or waited for them.
"""

from __future__ import annotations

import json

import pytest

from chakra_tools.convert.rank import convert_rank
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.measured import Measured
from chakra_tools.replay import AS_CAPTURED, AnalyticalBackend, CaptureModes, Scales, default_network, replay
from chakra_tools.replay.fidelity import compare_with_trace


def cpu(name, ts, dur, tid=1):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def runtime(name, ts, dur, corr):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {"correlation": corr}}


def kernel(name, ts, dur, corr, stream=7):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "stream": stream}}


def convert(tmp_path, events) -> tuple[Graph, dict]:
    """The graph of a device-only trace, written to tmp_path as rank 0, and its nodes by name."""
    path = tmp_path / "kineto.json"
    path.write_text(json.dumps({"traceEvents": events}))
    graph = convert_rank(None, path, 0).graph
    RankSet({0: graph}, {}).write(tmp_path / "et", "trace")
    return graph, {n.name: n for n in graph}


def run(tmp_path, scales: Scales = Scales(), modes=AS_CAPTURED):
    backend = AnalyticalBackend(default_network(1), scales=scales)
    doc = replay(tmp_path / "et", backend, modes=modes).to_dict()
    return doc, {e["name"]: e for e in doc["events"]}


def launch_then_sync(sync_name="cudaStreamSynchronize"):
    """launch (0..10) starts a 1,000 µs kernel at 12; sync_op (20..1020) waits in `sync_name`
    from 25 until the kernel ends at 1012; after (1020..1030) is the next host op."""
    return [cpu("launch", 0, 10), runtime("cudaLaunchKernel", 2, 5, 1), kernel("gemm", 12, 1000, 1),
            cpu("sync_op", 20, 1000), runtime(sync_name, 25, 990, 2), cpu("after", 1020, 10)]


def test_a_launch_does_not_block_its_host_thread(tmp_path):
    events = [cpu("launch", 0, 10), runtime("cudaLaunchKernel", 2, 5, 1), kernel("gemm", 12, 1000, 1),
              cpu("next", 12, 10)]
    graph, n = convert(tmp_path, events)
    assert n["gemm"].id not in n["next"].deps
    _, ev = run(tmp_path)
    assert ev["next"]["start_ns"] < ev["gemm"]["end_ns"]  # the host went on while the kernel ran


def test_a_sync_blocks_and_its_stall_leaves_the_host_op(tmp_path):
    graph, n = convert(tmp_path, launch_then_sync())
    # blocked from the call's start (25) to the kernel's end (1012): 987 µs out of 1,000
    assert n["sync_op"].attr("blocked_ns") == 987_000
    assert n["sync_op"].duration_micros == 13
    assert n["gemm"].id in n["after"].deps  # the wait, re-created as an edge
    doc, ev = run(tmp_path)
    assert ev["after"]["start_ns"] >= ev["gemm"]["end_ns"]
    assert doc["makespan_ns"] == pytest.approx(1_030_000, rel=0.01)


@pytest.mark.parametrize("call", ["cudaDeviceSynchronize", "cudaMemcpyAsync", "cudaEventSynchronize", "cudaFree",
                                  "cuStreamSynchronize", "hipDeviceSynchronize"])
def test_every_blocking_call_kind_waits(tmp_path, call):
    _, n = convert(tmp_path, launch_then_sync(call))
    assert n["gemm"].id in n["after"].deps and n["sync_op"].attr("blocked_ns") == 987_000


def test_halving_the_gpu_shortens_the_step_by_the_critical_path(tmp_path):
    """The stall follows the kernel: half the GPU time, 500 µs less, not half of every host op."""
    convert(tmp_path, launch_then_sync())
    full, _ = run(tmp_path)
    half, _ = run(tmp_path, Scales(compute=0.5))
    assert full["makespan_ns"] - half["makespan_ns"] == pytest.approx(500_000, rel=0.02)


def test_a_sync_on_an_idle_device_keeps_its_time(tmp_path):
    """A sync that returned long after the device went idle was busy on the host."""
    events = [cpu("launch", 0, 10), runtime("cudaLaunchKernel", 2, 5, 1), kernel("gemm", 12, 10, 1),
              cpu("sync_op", 100, 500), runtime("cudaDeviceSynchronize", 105, 490, 2), cpu("after", 600, 10)]
    _, n = convert(tmp_path, events)
    assert n["sync_op"].attr("blocked_ns") is None and n["sync_op"].duration_micros == 500
    assert n["gemm"].id not in n["after"].deps


def test_a_launch_into_a_full_queue_waits_for_a_kernel(tmp_path):
    """Launches take 5 µs; one took 800 µs and returned as the running kernel ended: the queue
    was full. That stall is the kernel's, not the host op's."""
    events = [cpu("launch", 0, 10), runtime("cudaLaunchKernel", 2, 5, 1), kernel("long", 12, 1000, 1)]
    t = 20
    for i in range(2, 12):  # ordinary launches of short kernels queued behind it
        events += [cpu(f"op{i}", t, 10), runtime("cudaLaunchKernel", t + 2, 5, i),
                   kernel(f"k{i}", 1012 + 10 * (i - 2), 10, i)]
        t += 12
    events += [cpu("stalled", t, 900), runtime("cudaLaunchKernel", t + 2, 1012 - (t + 2) + 3, 99),
               kernel("k99", 1120, 10, 99), cpu("after", t + 900, 10)]
    _, n = convert(tmp_path, events)
    assert n["stalled"].attr("blocked_ns") == (1012 - (t + 2)) * 1000
    assert n["long"].id in n["after"].deps


def autograd_thread():
    """The main thread (1) waits in `backward` (100..700) while the autograd engine's thread (2)
    runs the backward ops (150..650); then the main thread goes on with `step`."""
    return [cpu("forward", 0, 100), cpu("backward", 100, 600), cpu("grad_a", 150, 200, tid=2),
            cpu("grad_b", 350, 300, tid=2), cpu("step", 710, 50)]


def test_a_thread_waiting_for_another_is_not_charged_the_wait(tmp_path):
    _, n = convert(tmp_path, autograd_thread())
    assert n["backward"].attr("thread_wait_ns") == 500_000  # 150..650, while thread 2 ran
    assert n["backward"].duration_micros == 100
    assert n["backward"].id in n["grad_a"].deps  # the fork
    assert n["grad_b"].id in n["step"].deps  # the join
    assert {n[k].attr("tid") for k in ("forward", "grad_a")} == {1, 2}
    for modes in (CaptureModes(), AS_CAPTURED):  # by the ops' durations, and re-timed
        doc, ev = run(tmp_path, modes=modes)
        assert doc["makespan_ns"] == pytest.approx(760_000, rel=0.02), modes
        assert ev["grad_a"]["start_ns"] >= ev["backward"]["end_ns"]


def handing_over_between_threads():
    """Three host threads of a server, no device work, handing work to each other through queues
    the trace does not show: thread 1 hands a request to thread 2 at 12 (it works to 52); thread 3
    works from 20 to 90, on its own; thread 1 takes thread 3's result at 100."""
    t = 1000  # (a trace's clock never starts at 0)
    return [cpu("a1", t, 10), cpu("b1", t + 12, 40, tid=2), cpu("c1", t + 20, 70, tid=3), cpu("a2", t + 100, 10)]


def test_threads_handing_over_keep_their_own_timelines(tmp_path):
    """Each thread re-timed on its own: a thread's time up to its next op is its own (thread 1's
    90 µs between a1 and a2 are not c1's, which started in between)."""
    _, n = convert(tmp_path, handing_over_between_threads())
    assert n["a1"].id in n["b1"].deps and n["c1"].id in n["a2"].deps  # the hand-overs
    doc, ev = run(tmp_path)
    assert doc["makespan_ns"] == pytest.approx(110_000, rel=0.01)
    assert ev["c1"]["end_ns"] == pytest.approx(90_000, rel=0.01)  # thread 3 ended where it did


def test_a_thread_that_went_on_beside_another_keeps_its_time(tmp_path):
    """Thread 1 resumed (at 300) while thread 2 still ran (to 650): it did not wait."""
    events = [cpu("forward", 0, 100), cpu("long", 100, 600), cpu("other", 150, 500, tid=2),
              cpu("inner", 300, 10)]
    _, n = convert(tmp_path, events)
    assert n["long"].attr("thread_wait_ns") is None and n["long"].duration_micros == 590


def two_streams():
    """Two 1,000 µs kernels launched back to back on streams 7 and 8: they ran side by side."""
    return [cpu("launch_a", 0, 10), runtime("cudaLaunchKernel", 2, 5, 1), kernel("a", 12, 1000, 1),
            cpu("launch_b", 10, 10), runtime("cudaLaunchKernel", 12, 5, 2), kernel("b", 20, 1000, 2, stream=8)]


def test_kernels_on_two_streams_overlap_on_stream_lanes(tmp_path):
    convert(tmp_path, two_streams())
    doc, ev = run(tmp_path)  # as captured: a lane per stream
    assert doc["makespan_ns"] == pytest.approx(1_020_000, rel=0.01)
    one_queue, _ = run(tmp_path, modes=CaptureModes(lanes="kind"))  # ASTRA-sim: one GPU queue
    assert one_queue["makespan_ns"] >= 2_000_000


T0 = 1000  # a recorded timeline starts after 0 (a start of 0 means none was recorded)


def later(events):
    return [{**e, "ts": e["ts"] + T0} for e in events]


def test_host_time_after_a_final_sync_follows_the_device_work(tmp_path):
    """`torch.cuda.synchronize()` at a step's end (no aten op: the runtime call sits in
    ProfilerStep) waits 40..1012 for the kernel, then Python runs until the step closes at 1200.
    No host op follows to carry that wait: the time after the call becomes a host node of its
    own, after the kernel, and the step replays to its measured 1200 µs (was 1012: -16%)."""
    events = [cpu("ProfilerStep#1", 0, 1200), cpu("launch", 0, 10), runtime("cudaLaunchKernel", 2, 5, 1),
              kernel("gemm", 12, 1000, 1), cpu("after", 20, 10), runtime("cudaDeviceSynchronize", 40, 973, 2)]
    graph, n = convert(tmp_path, later(events))
    tail = n["cudaDeviceSynchronize"]
    assert tail.is_cpu_op and n["gemm"].id in tail.deps and n["after"].id in tail.deps
    assert tail.attr("blocked_ns") == 972_000 and tail.duration_micros == 1200 - 40 - 972
    assert Measured.from_metadata(graph.metadata).host_end_ns == (T0 + 1200) * 1000
    doc, ev = run(tmp_path)
    assert ev["cudaDeviceSynchronize"]["start_ns"] >= ev["gemm"]["end_ns"]
    assert doc["makespan_ns"] == pytest.approx(1_200_000, rel=0.01)


def test_the_time_after_a_stall_comes_after_the_device_work(tmp_path):
    """A sync in the step's own code (20..1012, waiting for the kernel), then 488 µs of Python
    before the next op at 1500: re-timed, that Python belongs after the wait (to the op that
    waits for the kernel), not to the op before the sync, so the step ends at 1600, not 1112."""
    events = [cpu("ProfilerStep#1", 0, 1600), cpu("launch", 0, 10), runtime("cudaLaunchKernel", 2, 5, 1),
              kernel("gemm", 12, 1000, 1), runtime("cudaStreamSynchronize", 20, 993, 2), cpu("next", 1500, 10)]
    _, n = convert(tmp_path, later(events))
    assert n["gemm"].id in n["next"].deps
    doc, ev = run(tmp_path)
    assert ev["next"]["start_ns"] >= ev["gemm"]["end_ns"]  # the Python ran after the wait
    assert doc["makespan_ns"] == pytest.approx(1_600_000, rel=0.01)


def test_device_work_that_waited_for_what_the_trace_does_not_show_keeps_that_wait(tmp_path):
    """The kernel was launched at 2 on an idle stream but began at 500 (behind a CUDA graph's
    kernels that Kineto did not record, or another stream's event): 490 µs after its launching
    op ended. As captured, that wait comes back before it; the model leaves it out. The sync
    that waited for it is re-created from the edge, so the step ends at about 610, as measured,
    instead of 130 (a public HTA trace: -72.9% -> -1.7%)."""
    events = [cpu("launch", 0, 10), runtime("cudaLaunchKernel", 2, 5, 1), kernel("gemm", 500, 100, 1),
              cpu("sync_op", 20, 580), runtime("cudaStreamSynchronize", 25, 575, 2), cpu("after", 600, 10)]
    _, n = convert(tmp_path, later(events))
    assert n["gemm"].attr("queued_ns") == 490_000 and n["sync_op"].attr("blocked_ns") == 575_000
    doc, ev = run(tmp_path)  # 620: re-timed, the launching op runs to the next op's start (20)
    assert doc["makespan_ns"] == pytest.approx(610_000, rel=0.02)
    assert ev["after"]["start_ns"] >= ev["gemm"]["end_ns"]
    modelled, _ = run(tmp_path, modes=CaptureModes())
    assert modelled["makespan_ns"] < 200_000  # the model runs it as soon as it is launched


def test_device_work_queued_behind_its_own_stream_has_no_hidden_wait(tmp_path):
    """Ten kernels launched together run one after another on their stream: each waited for the
    one before, which the replay re-creates, so none carries `queued_ns`."""
    events = [cpu("launch", 0, 50)]
    for i in range(10):
        events += [runtime("cudaLaunchKernel", 1 + 4 * i, 3, i + 1), kernel(f"k{i}", 5 + 200 * i, 200, i + 1)]
    _, n = convert(tmp_path, later(events))
    assert not [k for k in n.values() if k.attr("queued_ns") is not None]


def stream_wait_event(ts, corr, stream, waits_on, record_corr):
    """cudaStreamWaitEvent and CUPTI's record of it (Kineto, PyTorch 2.4+): which streams."""
    return [runtime("cudaStreamWaitEvent", ts, 1, corr),
            {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": stream, "ts": ts,
             "dur": 1, "args": {"cuda_sync_kind": "Stream Wait Event", "stream": stream, "wait_on_stream": waits_on,
                                "wait_on_cuda_event_record_corr_id": record_corr, "correlation": corr}}]


def test_a_stream_waiting_for_another_streams_event_waits_for_its_work(tmp_path):
    """`a` (1,000 µs) on stream 7, an event recorded after it, stream 8 made to wait for that
    event, then `b` launched on stream 8: it began when `a` ended. It depends on `a`, so the
    model also runs it after `a` (it ran beside it before: 1,010 µs, not 2,000)."""
    events = [cpu("launch_a", 0, 10), runtime("cudaLaunchKernel", 2, 3, 1), kernel("a", 12, 1000, 1),
              cpu("record_and_wait", 10, 10), runtime("cudaEventRecord", 11, 1, 2),
              *stream_wait_event(13, 3, stream=8, waits_on=7, record_corr=2),
              cpu("launch_b", 20, 10), runtime("cudaLaunchKernel", 22, 3, 4), kernel("b", 1012, 1000, 4, stream=8)]
    _, n = convert(tmp_path, later(events))
    assert n["a"].id in n["b"].deps and n["b"].attr("queued_ns") is None
    modelled, ev = run(tmp_path, modes=CaptureModes(lanes="stream"))
    assert ev["b"]["start_ns"] >= ev["a"]["end_ns"] and modelled["makespan_ns"] >= 2_000_000
    captured, _ = run(tmp_path)
    assert captured["makespan_ns"] == pytest.approx(2_012_000, rel=0.01)


def test_device_only_conversion_records_the_measured_window(tmp_path):
    graph, _ = convert(tmp_path, launch_then_sync())
    m = Measured.from_metadata(graph.metadata)
    assert m.window_ns == (0, 1_030_000) and m.steps_ns == ()
    doc, _ = run(tmp_path)
    cmp = compare_with_trace(doc, {0: m})
    assert abs(cmp["job"]["error"]) < 0.01


def test_trace_replay_prints_measured_against_predicted_without_a_manifest(tmp_path):
    from typer.testing import CliRunner

    from chakra_tools.cli.replay import app

    convert(tmp_path, launch_then_sync())
    res = CliRunner().invoke(app, [str(tmp_path / "et"), "--as-captured"])
    assert res.exit_code == 0, res.output
    assert "measured window" in res.output
    head = next(line for line in res.output.splitlines() if line.startswith("error "))
    assert "measured 1.030 ms" in head and "(the traced window across ranks against the makespan)" in head
    doc = json.loads(CliRunner().invoke(app, [str(tmp_path / "et"), "--as-captured", "--json"]).output)
    assert doc["fidelity"]["source"] == "trace" and doc["fidelity"]["ranks"][0]["measured_ns"] == 1_030_000


# -- the shared traces of real GPU runs ----------------------------------------------------------

def _pair_files(shared_fixtures, unpack, name):
    if name == "dlrm":
        hosts, devs = unpack("param/dlrm_8rank_host_et.tar.gz"), unpack("param/dlrm_8rank_kineto.tar.gz")
        return ([next(hosts.rglob(f"dlrm_eg_{r}.json")) for r in range(8)],
                [next(devs.rglob(f"worker{r}_*.json")) for r in range(8)])
    host, dev = GPU_PAIRS[name]
    return [shared_fixtures / host], [shared_fixtures / dev]


GPU_PAIRS = {  # name -> (host, device) under ../shared/fixtures/external/ (dlrm: two archives)
    "linear": ("param/linear_1gpu_host_et.json.gz", "param/linear_1gpu_kineto.json.gz"),
    "resnet": ("param/resnet_1gpu_host_et.json.gz", "param/resnet_1gpu_kineto.json.gz"),
    "simple_add": ("hta/simple_add_host_et.json.gz", "hta/simple_add_kineto.json.gz"),
}


@pytest.fixture(scope="module")
def gpu_errors(shared_fixtures, unpack, tmp_path_factory):
    """name -> job error of the as-captured replay against the window the traces measured."""
    from chakra_tools.convert.run import convert as convert_pairs, inputs_from_files
    from chakra_tools.replay.fidelity import measured_of
    from chakra_tools.replay.api import open_rankset, run_replay

    errors = {}
    for name in ("dlrm", *GPU_PAIRS):
        hosts, devs = _pair_files(shared_fixtures, unpack, name)
        out = tmp_path_factory.mktemp(name)
        report = convert_pairs(inputs_from_files([str(h) for h in hosts], [str(d) for d in devs], []),
                               out, executor="serial")
        assert not report.errors, (name, report.errors[:3])
        feeders, groups = open_rankset(out)
        backend = AnalyticalBackend(default_network(len(feeders)))
        doc = run_replay(out, feeders, backend, groups=groups, modes=AS_CAPTURED).to_dict()
        errors[name] = compare_with_trace(doc, measured_of(feeders))["job"]["error"]
    return errors


def test_every_shared_gpu_pair_replays_as_captured_within_5_percent(gpu_errors):
    assert all(abs(e) <= 0.05 for e in gpu_errors.values()), gpu_errors
    assert sum(abs(e) for e in gpu_errors.values()) / len(gpu_errors) <= 0.03, gpu_errors


def test_nccl_waits_order_the_stream_not_the_host(shared_fixtures, unpack, tmp_path):
    """DLRM's `work.wait()` (record_param_comms 'wait') on an NCCL all_to_all returned in
    microseconds while the collective ran for milliseconds: no wait may depend on an NCCL
    collective, and the device work after each wait does."""
    hosts, devs = _pair_files(shared_fixtures, unpack, "dlrm")
    graph = convert_rank(hosts[0], devs[0], 0).graph
    colls = {n.id for n in graph if n.type.name == "COMM_COLL_NODE" and n.attr("stream") is not None}
    assert colls
    waits = [n for n in graph if n.is_cpu_op and ("wait" in n.name.lower() or n.name == "record_param_comms")]
    assert len(waits) >= len(colls)
    assert [n for n in waits if colls & set(n.deps)] == []
    device_waits = [n for n in graph if not n.is_cpu_op and n.id not in colls and colls & set(n.deps)]
    assert len(device_waits) >= len(colls) // 2


def test_profiler_steps_are_kept_as_the_measured_reference(shared_fixtures, unpack):
    hosts, devs = _pair_files(shared_fixtures, unpack, "dlrm")
    m = Measured.from_metadata(convert_rank(hosts[5], devs[5], 5).graph.metadata)
    (start, end), = m.steps_ns  # ProfilerStep#10 of worker 5: 17,797 µs
    assert end - start == pytest.approx(17_797_000, abs=1000) and m.window_ns[0] >= start - 1000
