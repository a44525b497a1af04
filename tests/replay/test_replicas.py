"""Replica classes: a job replayed one rank per class gives every rank's row exactly as the full
replay does, and refuses, or falls back with the reason, where that would not be exact."""

from __future__ import annotations

import glob

import pytest
from typer.testing import CliRunner

from _util import network_file, random_gpt_case

from chakra_tools.cli.replay import app
from chakra_tools.core import hotloops
from chakra_tools.core.etio import TraceReader
from chakra_tools.core.etwrite import write_trace
from chakra_tools.core.framing import decode_varint
from chakra_tools.core.graph import find_rank_files
from chakra_tools.replay import SystemSpec, api, replay_rankset, replicas
from chakra_tools.replay.api import comm_groups_of
from chakra_tools.core.shapes import read_shape
from chakra_tools.replay.replicas import ClassesRefused, find_classes

# tp 2 x dp 4 x pp 2: ranks t + 2d + 8p
JOB = dict(layers=2, hidden=256, heads=4, seq=128, batch=32, vocab=1024, tp=2, dp=4, pp=2, microbatches=4, zero=1)


@pytest.fixture(scope="module")
def job(generated_job):
    return generated_job(**JOB)


def both(path, spec=None, **kw):
    full = replay_rankset(path, spec, replicas="off", record_events=False, **kw)
    by_class = replay_rankset(path, spec, replicas="on", record_events=False, **kw)
    return full, by_class


@pytest.mark.parametrize("topology, npus", [(["Switch"], [16]), (["Ring", "Switch"], [4, 4]),
                                            (["Ring", "Switch"], [2, 8]), (["FullyConnected", "Ring"], [8, 2])])
def test_one_rank_per_stage_gives_every_rank_exactly(job, tmp_path, topology, npus):
    full, by_class = both(job, SystemSpec(network=network_file(tmp_path, topology, npus)))
    assert by_class.config["replicas"]["replayed"] == [0, 8]  # the two pipeline stages
    assert by_class.config["replicas"]["classes"] == {"0": 8, "8": 8}
    assert by_class.makespan_ns == full.makespan_ns
    assert by_class.ranks == full.ranks
    assert len({r["finish_ns"] for r in full.ranks}) == 2  # the stages differ: the check can fail


def test_collective_start_last_too(job, tmp_path):
    spec = SystemSpec(network=network_file(tmp_path, ["Ring", "Switch"], [4, 4]))
    modes = api.CaptureModes(coll_start="last")
    full, by_class = both(job, spec, modes=modes)
    assert by_class.ranks == full.ranks and by_class.config["replicas"]["replayed"] == [0, 8]


def test_a_network_that_sets_replicas_apart_is_found_during_the_replay(job, tmp_path, monkeypatch):
    """One Ring of 16: the data-parallel group (8, 10, 12, 14) runs as a ring whose last link
    is 6 hops long, so its members end at different times: no replica is its representative."""
    spec = SystemSpec(network=network_file(tmp_path, ["Ring"], [16]))
    with pytest.raises(ClassesRefused, match=r"ends rank \d+ at \d+ ns and rank \d+, whose replica it is"):
        replay_rankset(job, spec, replicas="on", record_events=False)
    monkeypatch.setattr(replicas, "AUTO_RANKS", 2)
    auto = replay_rankset(job, spec, record_events=False)
    full = replay_rankset(job, spec, replicas="off", record_events=False)
    assert auto.ranks == full.ranks
    assert auto.config["replicas"]["replayed"] == "all" and "whose replica it is" in auto.config["replicas"]["why"]


def test_one_slow_replica_sets_its_peers_apart(job, tmp_path, monkeypatch):
    """Rank 4 computes one op 3x longer: its tensor-parallel peer waits for it, its ring
    neighbours in the data-parallel group leave later than the others, and so on through the
    pipeline: in this small job no two ranks stay alike, which the classes find (by neighbours
    in each group, not just by file) and the replay whole is what runs."""
    work = tmp_path / "set"
    work.mkdir()
    for f in job.iterdir():
        (work / f.name).write_bytes(f.read_bytes())
    reader = TraceReader(work / "workload.4.et")
    nodes = list(reader)
    slow = next(i for i, n in enumerate(nodes) if "duration_ns" in n.attrs)
    ns = nodes[slow].attrs["duration_ns"]
    nodes[slow] = nodes[slow]._replace(attrs={**nodes[slow].attrs, "duration_ns": ns._replace(value=ns.value * 3)})
    write_trace(work / "workload.4.et", nodes, reader.metadata)
    monkeypatch.setattr(replicas, "AUTO_RANKS", 2)
    auto = replay_rankset(work, record_events=False)
    full = replay_rankset(work, replicas="off", record_events=False)
    assert auto.ranks == full.ranks
    assert auto.config["replicas"] == {"ranks": 16, "replayed": "all",
                                       "why": "no two ranks run the same graph in the same place"}
    assert full.ranks[4]["compute_ns"] > full.ranks[6]["compute_ns"]  # the change is replayed


def test_what_cannot_replay_by_classes_says_why(job, tmp_path):
    net = network_file(tmp_path, ["Ring", "Switch"], [4, 4])
    aware = SystemSpec(network=net, network_model="congestion-aware")
    with pytest.raises(ClassesRefused, match="congestion-aware network: replicas' messages share links"):
        replay_rankset(job, aware, replicas="on", record_events=False)
    with pytest.raises(ClassesRefused, match="time from the capture's record"):
        replay_rankset(job, SystemSpec(network=net), replicas="on", modes=api.CaptureModes(host_time="gaps"))


def test_classes_need_equal_graphs_not_equal_names(job):
    """Colour refinement on the files' shapes: two ranks of one stage and replica (tensor
    parallel peers) are alike too, but a rank of the other stage never is."""
    files = find_rank_files(job)
    shapes = {r: read_shape(f) for r, f in files.items()}
    assert shapes[0].digest == shapes[6].digest and shapes[0].groups != shapes[6].groups
    assert shapes[0].digest != shapes[8].digest
    classes = find_classes(shapes, comm_groups_of(files, None), SystemSpec().backend(16, str(job)))
    assert classes.members() == {0: list(range(8)), 8: list(range(8, 16))}


def test_shape_compiled_and_python_agree(job, shared_fixtures):
    files = sorted(job.glob("*.et")) + sorted(glob.glob(str(shared_fixtures / "**" / "*.et"), recursive=True))[:20]
    for f in files:
        buf = f.read_bytes() if hasattr(f, "read_bytes") else open(f, "rb").read()
        size, pos = decode_varint(buf, 0)
        with hotloops.python_twins():
            twin = hotloops.shape_of(buf, pos + size)
        assert hotloops.shape_of(buf, pos + size) == twin, f


def test_cli_says_what_it_replayed(job, tmp_path):
    net = network_file(tmp_path, ["Ring", "Switch"], [4, 4])
    res = CliRunner().invoke(app, [str(job), "-n", str(net), "--replicas", "on"])
    assert res.exit_code == 0, res.output
    assert "0-7" in res.stdout and "8-15" in res.stdout
    assert "replayed 2 of 16 ranks, one per class of replicas" in res.stderr
    bad = CliRunner().invoke(app, [str(job), "-n", str(network_file(tmp_path, ["Ring"], [16], "ring.yml")),
                                   "--replicas", "on"])
    assert bad.exit_code == 1 and "--replicas off replays every rank" in bad.output


def test_the_timeline_names_what_each_replayed_rank_stands_for(job, tmp_path):
    result = replay_rankset(job, replicas="on")
    names = {e["args"]["name"] for e in result.timeline().to_dict()["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert names == {"rank 0 (and its 7 replicas)", "rank 8 (and its 7 replicas)"}


def test_a_scaled_capture_replays_as_its_captured_ranks(tmp_path):
    """`trace-convert scale` copies each captured rank to its replicas: the copies (whose metadata
    names another rank and host) replay as the two ranks captured, every row as the full replay's."""
    import json

    from chakra_tools.convert.scale import scale_rankset
    from chakra_tools.core.graph import Graph, RankSet
    from chakra_tools.core.model import CommType, Metadata, Node, NodeType, make_attr, make_attrs

    def rank(r):
        slow = 40 * r  # the captured ranks differ
        nodes = [Node(1, "aten::mm", NodeType.COMP_NODE, (), duration_micros=100 + slow, attrs=make_attrs(is_cpu_op=True)),
                 Node(2, "gloo:all_reduce", NodeType.COMM_COLL_NODE, (1,), attrs=make_attrs(
                     comm_type=CommType.ALL_REDUCE, comm_size=1 << 20, pg_name="1", is_cpu_op=False)),
                 Node(3, "aten::add", NodeType.COMP_NODE, (2,), duration_micros=30 + slow, attrs=make_attrs(is_cpu_op=True))]
        groups = {"1": {"ranks": [0, 1], "torch_name": "0", "desc": "default_pg"}}
        meta = Metadata(attrs={"rank": make_attr("rank", r), "world_size": make_attr("world_size", 2),
                               "host": make_attr("host", f"node{r}"),
                               "process_groups": make_attr("process_groups", json.dumps(groups))})
        return Graph(nodes, rank=r, metadata=meta)

    scaled, _ = scale_rankset(RankSet({r: rank(r) for r in (0, 1)}, {"1": (0, 1)}), 8)
    scaled.write(tmp_path / "dp8")
    full, by_class = both(tmp_path / "dp8")
    assert by_class.config["replicas"]["replayed"] == [0, 1]
    assert by_class.ranks == full.ranks
    assert full.ranks[0]["finish_ns"] != full.ranks[1]["finish_ns"] or full.ranks[0]["idle_ns"] != full.ranks[1]["idle_ns"]


def test_a_group_naming_a_rank_without_a_file_is_refused_not_a_crash(job, tmp_path):
    """With --no-validate nothing stops a group that names a missing rank before the classes."""
    work = tmp_path / "set"
    work.mkdir()
    for f in job.iterdir():
        if f.name != "workload.15.et":
            (work / f.name).write_bytes(f.read_bytes())
    with pytest.raises(ClassesRefused, match=r"group '\d+' has rank 15, which has no file here"):
        replay_rankset(work, replicas="on", validate=False, record_events=False)


def test_random_jobs_networks_and_algorithms_by_classes_equal_the_full_replay(tmp_path, monkeypatch):
    """A differential check over random GPT layouts, networks of 1-4 dimensions of every topology,
    every collective algorithm, both optimizations and both start rules: every set replayed by
    classes gives the full replay's rows, and where the model sets replicas apart (trees) the
    replay falls back to every rank."""
    import random

    monkeypatch.setattr(replicas, "AUTO_RANKS", 2)
    rng = random.Random(7)
    used = {"classes": 0, "all": 0}
    for case in range(16):
        work, spec, modes, layout, dims, algos = random_gpt_case(rng, tmp_path, case)
        full = replay_rankset(work, spec, replicas="off", record_events=False, modes=modes)
        auto = replay_rankset(work, spec, record_events=False, modes=modes)
        assert auto.ranks == full.ranks, (case, layout, dims, algos)
        used["classes" if isinstance(auto.config["replicas"]["replayed"], list) else "all"] += 1
    assert used["classes"] >= 10, used


def test_the_report_says_which_ranks_ran(job, tmp_path):
    from chakra_tools.visualize.sources import from_replay

    replay_rankset(job, replicas="on").write(tmp_path / "r.json")
    es = from_replay(tmp_path / "r.json")
    assert any(n.startswith("replayed 2 of 16 ranks, one per class of replicas") for n in es.notes)
    assert sorted(es.breakdown) == list(range(16))  # every rank's row
