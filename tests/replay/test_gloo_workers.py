"""A CPU trace with gloo's worker threads and nothing of the calls' callers (a device trace alone,
as HTA's `cpu_only/rank-34` of a 300-rank gloo job): each worker's `gloo:all_reduce` ranges are
the only record of the job's collectives.

The converter took the workers for host threads handing over to each other: every all-reduce went
on the rank's one communication lane (they ran two at a time, one per worker), the first one
after the step that was running when it began, and the main thread's untraced time was charged
around them (+151% on HTA's trace). Here each worker is a lane of its own, no edge joins a worker
to the main thread or the other worker, and the main thread keeps its recorded time: nothing in
the trace says it waited for a call. The trace is made here in that layout: a step on the main
thread, two workers running three all-reduces each with gaps between, and the main thread's next
op long after the step."""

from __future__ import annotations

import json

import pytest

from chakra_tools.convert.rank import convert_rank
from chakra_tools.core.graph import RankSet
from chakra_tools.replay import AS_CAPTURED, replay_rankset

from _util import kineto_event, kineto_trace

MAIN, WORKERS = 1074, (3553, 3554)


def _trace(calls_ms: list[tuple[float, float]], resume_ms: float) -> dict:
    """The step (0..210 ms) and, on each worker, all-reduces at (start, duration) ms, the second
    worker 8 ms behind the first; the main thread's next op at `resume_ms`."""
    def x(cat, tid, ts_ms, dur_ms, name, **args):
        return kineto_event(1_212_075_500_000_000, cat, tid, ts_ms * 1000, dur_ms * 1000, name, pid=MAIN, **args)

    events = [x("user_annotation", MAIN, 0, 210, "ProfilerStep#551")]
    for k, worker in enumerate(WORKERS):
        for start, dur in calls_ms:
            events.append(x("user_annotation", worker, start + 8 * k, dur, "gloo:all_reduce",
                            **{"Input type": ["float"], "Input Dims": [[262144]]}))
    events.append(x("cpu_op", MAIN, resume_ms, 0.003, "aten::empty"))
    return kineto_trace(events, "gloo", world=4)


CALLS = [(20.0, 170.0), (230.0, 180.0), (450.0, 380.0)]


@pytest.fixture()
def converted(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(_trace(CALLS, resume_ms=850.0)))
    return convert_rank(None, str(path), 0).graph


def test_each_worker_is_a_lane_of_its_own_and_no_host_thread(converted):
    calls = sorted((n for n in converted if n.type.is_comm), key=lambda n: n.start_time_micros)
    host = [n for n in converted if n.is_cpu_op]
    assert len(calls) == 6 and len(host) == 2
    ids = {n.id for n in calls}
    by_worker: dict[int, list] = {}
    for n in calls:
        assert n.attrs["worker_only"].value is True and "launch_only" not in n.attrs
        by_worker.setdefault(n.attrs["stream"].value, []).append(n)
    assert len(by_worker) == 2 and all(len(v) == 3 for v in by_worker.values())
    for chain in by_worker.values():  # each worker runs its calls one after the other, and only that
        assert list(chain[0].deps) == []
        assert [list(n.deps) for n in chain[1:]] == [[a.id] for a in chain[:-1]]
    for n in host:  # the main thread neither hands over to a worker nor waits for one
        assert ids.isdisjoint(n.deps)
        assert "thread_wait_ns" not in n.attrs
    step = next(n for n in host if n.name.startswith("ProfilerStep"))
    assert step.duration_micros == 210_000


def test_replayed_as_captured_it_takes_the_window_it_measured(converted, tmp_path):
    out = tmp_path / "out"
    RankSet({0: converted}, {}, "t").write(out, "t", record_world=True)
    result = replay_rankset(out, modes=AS_CAPTURED, absent_peers=True)
    doc, job = result.to_dict(), result.fidelity["job"]
    assert job["measured_ns"] == pytest.approx(850.003e6, rel=1e-6)
    assert abs(job["error"]) < 0.001, job
    # the two workers' first calls overlap, as they ran, instead of one after the other on one lane
    first, second = sorted((e for e in doc["events"] if e["name"] == "gloo:all_reduce"),
                           key=lambda e: e["start_ns"])[:2]
    assert second["start_ns"] < first["end_ns"]


def test_the_public_trace_of_rank_34(shared_fixtures, tmp_path):
    graph = convert_rank(None, str(shared_fixtures / "hta" / "cpu_only_rank34_kineto.json.gz"), 34).graph
    RankSet({34: graph}, {}, "t").write(tmp_path / "out", "t", record_world=True)
    job = replay_rankset(tmp_path / "out", modes=AS_CAPTURED, absent_peers=True).fidelity["job"]
    assert abs(job["error"]) < 0.01, job  # +151% before
    assert len({n.attrs["stream"].value for n in graph if n.type.is_comm}) == 2
