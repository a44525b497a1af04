"""Timelines: one complete event per node at the node's own time, one flow per drawn dependency,
from rank sets, replay results and captured runs (Kineto traces)."""

from __future__ import annotations

import json

import pytest

from chakra_tools.core.chrome_trace import load
from chakra_tools.core.graph import RankSet
from chakra_tools.visualize.drawing import graph_edges
from chakra_tools.visualize.select import Selection, select
from chakra_tools.visualize.captured import from_capture
from chakra_tools.visualize.sources import detect, from_rankset, from_replay, load_events
from chakra_tools.visualize.timeline import build_timeline

from .conftest import replay_result, tiny_rankset


def _xs(doc):
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def _flows(doc):
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    assert sorted(starts) == sorted(ends), "every flow has both ends"
    return [(starts[i], ends[i]) for i in sorted(starts)]


def _lane_names(doc):
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def test_rankset_one_event_per_node_at_its_time(tiny, tmp_path):
    rs = RankSet.load(tiny)
    tl = build_timeline(load_events(tiny))
    doc = load(tl.trace.write(tmp_path / "t.json"))
    xs = _xs(doc)
    assert len(xs) == sum(len(g) for g in rs) == 10
    origin_us = min(n.start_time_micros for g in rs for n in g)
    for e in xs:
        node = rs[e["pid"]][e["args"]["node_id"]]
        assert e["name"] == node.name
        assert e["ts"] == node.start_time_micros - origin_us
        assert e["dur"] == node.duration_micros


def test_rankset_lanes_and_flows(tiny, tmp_path):
    doc = load(build_timeline(load_events(tiny)).trace.write(tmp_path / "t.json"))
    lanes = _lane_names(doc)
    assert sorted(set(lanes.values())) == ["communication", "compute", "host thread 7"]
    assert [lanes[(0, t)] for t in (1, 2, 3)] == ["host thread 7", "compute", "communication"]
    flows = _flows(doc)
    # per rank 1->2, 2->3, 4->5 cross lanes (3->4 and 2->5 stay on one lane): 6;
    # plus the send/recv pair and the all-reduce instance link across ranks: 8
    assert len(flows) == 8
    cross = sorted(((s["pid"], s["ts"]), (f["pid"], f["ts"])) for s, f in flows if s["pid"] != f["pid"])
    assert cross == [((0, 41.0), (1, 41.0)), ((0, 61.0), (1, 61.0))]
    assert all(f["bp"] == "e" for _, f in flows)


def test_flows_start_and_end_inside_the_events_they_link(tiny, tmp_path):
    doc = load(build_timeline(load_events(tiny)).trace.write(tmp_path / "t.json"))
    starts = {(e["pid"], e["tid"], e["ts"]) for e in _xs(doc)}
    for s, f in _flows(doc):
        assert (s["pid"], s["tid"], s["ts"]) in starts
        assert (f["pid"], f["tid"], f["ts"]) in starts
        assert (s["pid"], s["tid"]) != (f["pid"], f["tid"])


@pytest.mark.parametrize("first", [1200, pytest.param(None, marks=pytest.mark.slow)])
def test_real_trace_one_flow_per_cross_lane_dependency(shared_fixtures, unpack, tmp_path, first):
    """Chakra's feeder test trace (3,664 nodes; by default the 1,200 lowest ids): no
    start times (laid out), data and ctrl deps, host ops and kernels."""
    path = unpack("chakra/feeder_tests_trace.tar.gz") / "tests" / "data" / "chakra.0.et"
    rs = RankSet.load(path)
    if first is not None:
        ids = sorted(rs[0].nodes)
        rs = RankSet(select(rs, Selection(id_range=(ids[0], ids[first - 1]))))
    doc = load(build_timeline(from_rankset(rs)).trace.write(tmp_path / "t.json.gz"))
    xs = _xs(doc)
    assert len(xs) == len(rs[0]) == (first or 3664)
    where = {e["args"]["node_id"]: (e["tid"], e["ts"]) for e in xs}
    assert len(where) == len(rs[0])
    for e in xs:
        assert e["dur"] == rs[0][e["args"]["node_id"]].duration_micros
    expected = sorted((where[s], where[d]) for s, d, _ in graph_edges(rs[0]) if where[s][0] != where[d][0])
    got = sorted(((s["tid"], s["ts"]), (f["tid"], f["ts"])) for s, f in _flows(doc))
    assert got == expected


def test_laid_out_rank_respects_dependencies(shared_fixtures):
    path = shared_fixtures / "astra-sim" / "custom_ring_allreduce_8npus_1MB"
    es = load_events(path)
    assert len(es.ranks) == 8 and any("laid out" in n for n in es.notes)
    ev = es.by_node()
    rs = RankSet.load(path)
    for g in rs:
        for s, d, _ in g.edges():
            assert ev[(g.rank, s)].end_ns <= ev[(g.rank, d)].start_ns


def test_replay_result_times_and_flows(replay_json, tmp_path):
    assert detect(replay_json) == "replay"
    es = from_replay(replay_json)
    doc = load(build_timeline(es).trace.write(tmp_path / "r.json"))
    src = replay_result()
    xs = _xs(doc)
    assert len(xs) == len(src["events"])
    got = sorted((e["pid"], e["args"]["node_id"], round(e["ts"] * 1000), round(e["dur"] * 1000)) for e in xs)
    want = sorted((e["rank"], e["node_id"], e["start_ns"], e["end_ns"] - e["start_ns"]) for e in src["events"])
    assert got == want
    assert len(_flows(doc)) == len(src["deps"])  # every replay dep crosses a lane or a rank here
    assert es.breakdown[1]["compute_ns"] == 45_001


def test_captured_run_reemits_measured_events(dlrm_kineto, tmp_path):
    assert detect(dlrm_kineto) == "capture"
    es = from_capture(dlrm_kineto)
    assert es.ranks == list(range(8))
    doc = load(build_timeline(es).trace.write(tmp_path / "m.json.gz"))
    src = load(next(dlrm_kineto.glob("worker3_*")))
    kept = [e for e in src["traceEvents"] if e.get("ph") == "X" and e.get("cat") not in ("Trace", "python_function")]
    mine = [e for e in _xs(doc) if e["pid"] == 3]
    assert len(mine) == len(kept)
    origin = es.shift_ns + es.origin_ns  # the run's first event is at 0 in the timeline
    assert doc["otherData"]["source_shift_ns"] == es.shift_ns
    want = sorted((e["name"], int(e["ts"]) * 1000 - origin, int(e["dur"]) * 1000) for e in kept)
    got = sorted((e["name"], round(e["ts"] * 1000), round(e["dur"] * 1000)) for e in mine)
    assert got == want
    lanes = set(_lane_names(doc).values())
    assert any(n.startswith("host thread") for n in lanes)
    assert any(n.startswith("compute (stream") for n in lanes)
    assert any(n.startswith("communication (stream") for n in lanes)
    assert len(_flows(doc)) > 0  # launch -> kernel (ac2g) flows re-emitted


def test_same_input_same_bytes(tiny, tmp_path):
    a = build_timeline(load_events(tiny)).trace.write(tmp_path / "a.json.gz")
    b = build_timeline(load_events(tiny)).trace.write(tmp_path / "b.json.gz")
    assert a.read_bytes() == b.read_bytes()


def test_overlapping_events_get_their_own_lane():
    from chakra_tools.visualize.events import Event, EventSet

    es = EventSet("inline", "measured", [Event(0, "a", "compute", "compute", 0, 100),
                                         Event(0, "b", "compute", "compute", 50, 150),   # overlaps a
                                         Event(0, "c", "compute", "compute", 10, 20)])   # nested in a
    doc = build_timeline(es).trace.to_dict()
    tid = {e["name"]: e["tid"] for e in _xs(doc)}
    assert tid["a"] == tid["c"] != tid["b"]
    assert set(_lane_names(doc).values()) == {"compute", "compute #2"}


def test_json_is_valid_for_viewers(tiny, tmp_path):
    """What Perfetto's JSON importer needs: an object with traceEvents, numeric ts/dur, ph set."""
    raw = build_timeline(load_events(tiny)).trace.dumps()
    doc = json.loads(raw)
    for e in doc["traceEvents"]:
        assert e["ph"] in "XMsf" and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert isinstance(e["ts"], float)


@pytest.mark.parametrize("max_events", [3, 4])
def test_split_keeps_every_event_once(tiny, tmp_path, max_events):
    from chakra_tools.core.chrome_trace import write_parts

    trace = build_timeline(load_events(tiny)).trace
    files = write_parts(trace, tmp_path / "t.json", max_events=max_events)
    assert len(files) >= 2
    # both ranks start their nodes at the same times: equal starts stay in one part
    starts = [sorted({e["ts"] for e in _xs(load(f))}) for f in files]
    assert all(a[-1] < b[0] for a, b in zip(starts, starts[1:]))
    names = sorted((e["pid"], e["args"]["node_id"]) for f in files for e in _xs(load(f)))
    assert names == sorted((g.rank, n.id) for g in tiny_rankset() for n in g)


def test_capture_manifest_names_each_rank_trace(shared_fixtures, tmp_path):
    """A trace-capture folder: manifest.json lists rank -> device trace (here HTA's two ranks)."""
    import shutil

    ranks = []
    for r in (0, 1):
        shutil.copy(shared_fixtures / "hta" / f"sampled_rank{r}_kineto.json.gz", tmp_path / f"rank-{r}.device.json.gz")
        ranks.append({"rank": r, "host_trace": f"rank-{r}.host.json.gz", "device_trace": f"rank-{r}.device.json.gz"})
    (tmp_path / "manifest.json").write_text(json.dumps({"ranks": ranks, "captured_steps": [0]}))
    assert detect(tmp_path) == "capture"
    es = from_capture(tmp_path)
    assert es.ranks == [0, 1]
    for r in (0, 1):
        raw = load(tmp_path / f"rank-{r}.device.json.gz")["traceEvents"]
        want = sum(1 for e in raw if e.get("ph") == "X" and e.get("cat") not in ("Trace", "python_function"))
        assert sum(1 for e in es.events if e.rank == r) == want
    kinds = {c.kind for c in es.comms}
    assert {"ALL_REDUCE", "ALL_TO_ALL"} <= kinds


def test_a_host_trace_is_not_taken_for_a_device_trace(shared_fixtures):
    from chakra_tools.core.errors import InputError

    with pytest.raises(InputError, match="simple_add_host_et.json.gz: rank 0: not a Kineto device trace"):
        from_capture(shared_fixtures / "hta" / "simple_add_host_et.json.gz")
