"""chakra_tools.core.chrome_trace: tiny inline traces with the expected JSON beside them."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings, strategies as st

from chakra_tools.core.chrome_trace import ChromeTrace, load, us, write_parts
from chakra_tools.core.errors import InputError


def two_rank_trace() -> ChromeTrace:
    t = ChromeTrace(metadata={"source": "test"})
    for r in (1, 0):  # declared out of order on purpose: output is sorted
        t.process(r, f"rank {r}")
        comp = t.lane(r, "compute")
        comm = t.lane(r, "communication")
        t.complete(r, comp, "gemm", start_ns=1000 * r, dur_ns=1234, cat="COMP", args={"node_id": 1})
        t.complete(r, comm, "all_reduce", start_ns=5000, dur_ns=777, cat="COMM_COLL")
        t.flow((r, comp, 1000 * r), (r, comm, 5000))
    t.flow((0, 2, 5000), (1, 2, 5000), name="collective", cat="comm")
    return t


def test_metadata_names_processes_and_lanes():
    doc = two_rank_trace().to_dict()
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    names = [(e["pid"], e["tid"], e["args"]["name"]) for e in meta if e["name"].endswith("_name")]
    assert names == [(0, 0, "rank 0"), (0, 1, "compute"), (0, 2, "communication"),
                     (1, 0, "rank 1"), (1, 1, "compute"), (1, 2, "communication")]
    assert doc["displayTimeUnit"] == "ns"
    assert doc["otherData"] == {"source": "test"}


def test_complete_events_keep_nanoseconds():
    doc = two_rank_trace().to_dict()
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == 4
    gemm1 = next(e for e in xs if e["pid"] == 1 and e["name"] == "gemm")
    assert (gemm1["ts"], gemm1["dur"]) == (1.0, 1.234)
    assert round(gemm1["dur"] * 1000) == 1234
    assert gemm1["args"] == {"node_id": 1}
    assert [e["ts"] for e in xs] == sorted(e["ts"] for e in xs)


def test_flows_pair_up_and_bind_to_enclosing_slices():
    doc = two_rank_trace().to_dict()
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    assert sorted(starts) == sorted(ends) == [1, 2, 3]
    assert all(e["bp"] == "e" for e in ends.values())
    cross = starts[3], ends[3]
    assert (cross[0]["pid"], cross[1]["pid"]) == (0, 1)


def test_same_input_same_bytes(tmp_path):
    a = two_rank_trace().write(tmp_path / "a.json.gz")
    b = two_rank_trace().write(tmp_path / "b.json.gz")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes()[:2] == b"\x1f\x8b"
    assert json.loads(gzip.decompress(a.read_bytes())) == two_rank_trace().to_dict()
    plain = two_rank_trace().write(tmp_path / "c.json")
    assert load(plain) == load(a)


def test_write_is_atomic_and_leaves_no_temporary(tmp_path):
    two_rank_trace().write(tmp_path / "t.json")
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_lane_ids_are_stable_and_explicit_tids_checked():
    t = ChromeTrace()
    assert t.lane(3, "host") == 1
    assert t.lane(3, "gpu", tid=7) == 7
    assert t.lane(3, "host") == 1
    assert t.lane(3, "comm") == 8
    with pytest.raises(ValueError, match="tid 7"):
        t.lane(3, "other", tid=7)


def test_negative_duration_is_refused():
    with pytest.raises(ValueError, match="negative"):
        ChromeTrace().complete(0, 1, "x", start_ns=5, dur_ns=-1)


def test_origin_rebases_epoch_times_without_losing_nanoseconds():
    epoch_ns = 1_700_000_000_000_000_123
    t = ChromeTrace(origin_ns=epoch_ns - 123)
    t.complete(0, 1, "k", start_ns=epoch_ns, dur_ns=1)
    x = next(e for e in t.to_dict()["traceEvents"] if e["ph"] == "X")
    assert (x["ts"], x["dur"]) == (0.123, 0.001)


def test_window_keeps_overlapping_slices_whole():
    t = two_rank_trace()
    w = t.window(1500, 4000)
    assert [(s.pid, s.name, s.start_ns) for s in w.slices] == [(1, "gemm", 1000)]
    assert w.flows == []
    assert set(w.processes) == {0, 1}


def test_split_puts_each_slice_in_one_part(tmp_path):
    t = ChromeTrace()
    for i in range(10):
        t.complete(0, 1, f"n{i}", start_ns=i * 10, dur_ns=5)
    t.flow((0, 1, 0), (0, 1, 10))     # same part
    t.flow((0, 1, 20), (0, 1, 90))    # crosses parts: dropped
    parts = t.split(max_events=4)
    assert [len(p.slices) for p in parts] == [4, 4, 2]
    assert sum(len(p.flows) for p in parts) == 1
    files = write_parts(t, tmp_path / "big.json.gz", max_events=4)
    assert [f.name for f in files] == [f"big.part-000{i}.json.gz" for i in (1, 2, 3)]
    assert sum(sum(e["ph"] == "X" for e in load(f)["traceEvents"]) for f in files) == 10


def test_load_names_the_file_on_garbage(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="bad.json"):
        load(bad)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**12), st.integers(0, 10**9)), min_size=1, max_size=30))
def test_times_round_trip_to_the_nanosecond(spans):
    t = ChromeTrace()
    for i, (start, dur) in enumerate(spans):
        t.complete(0, 1, f"n{i}", start_ns=start, dur_ns=dur)
    xs = [e for e in json.loads(t.dumps())["traceEvents"] if e["ph"] == "X"]
    got = sorted((round(e["ts"] * 1000), round(e["dur"] * 1000)) for e in xs)
    assert got == sorted(spans)
    assert us(spans[0][0]) * 1000 == pytest.approx(spans[0][0])


def test_split_keeps_equal_starts_together():
    t = ChromeTrace()
    for i, start in enumerate([0, 10, 10, 10, 20]):
        t.complete(0, 1 + i, f"n{i}", start_ns=start, dur_ns=5)
    t.flow((0, 2, 10), (0, 4, 10))
    parts = t.split(max_events=2)
    assert [[s.name for s in p.slices] for p in parts] == [["n0", "n1", "n2", "n3"], ["n4"]]
    assert [len(p.flows) for p in parts] == [1, 0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=40), st.integers(1, 7))
def test_split_partitions_slices_and_flows(starts, n):
    t = ChromeTrace()
    for i, s in enumerate(starts):
        t.complete(0, 1, f"n{i}", start_ns=s, dur_ns=1)
    for a, b in zip(starts, starts[1:]):
        t.flow((0, 1, a), (0, 1, b))
    parts = t.split(max_events=n)
    assert sorted(s.seq for p in parts for s in p.slices) == list(range(len(starts)))
    for p in parts:
        present = {s.start_ns for s in p.slices}
        assert all(f.src[2] in present and f.dst[2] in present for f in p.flows)
    kept = sum(len(p.flows) for p in parts)
    assert kept <= len(starts) - 1
