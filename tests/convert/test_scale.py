"""trace-convert scale (convert/scale.py): a converted capture at another data-parallel degree.

Tiny inline rank sets (DDP, FSDP-like, pipeline, tensor parallel) with the expected bytes beside
them, and real captures of examples/ddp.py and examples/pipeline.py (tests/convert/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from math import ceil

import pytest

from chakra_tools.convert.scale import scale, scale_rankset
from chakra_tools.core.errors import InputError
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import CommType, Metadata, Node, NodeType, make_attr, make_attrs
from chakra_tools.core.validate import validate_rankset
from chakra_tools.replay import AnalyticalBackend, default_network, replay

PARAM_BYTES = 4_000_000
SHARD = PARAM_BYTES // 2


def comp(i, us, deps=()):
    return Node(i, f"aten::mm{i}", NodeType.COMP_NODE, tuple(deps), duration_micros=us,
                attrs=make_attrs(is_cpu_op=True, duration_ns=us * 1000 + 7, num_ops=1000))


def coll(i, kind, size, deps=(), pg="1", **extra):
    return Node(i, f"gloo:{kind.name.lower()}", NodeType.COMM_COLL_NODE, tuple(deps),
                attrs=make_attrs(comm_type=kind, comm_size=size, pg_name=pg, is_cpu_op=False, group_size=2, **extra))


def fsdp_rank() -> list[Node]:
    """Forward: all-gather a parameter shard; backward: reduce-scatter the gradient, then DDP's
    all-reduce of a replicated buffer."""
    return [comp(1, 100), coll(2, CommType.ALL_GATHER, SHARD, [1], in_nelems=SHARD // 4, out_nelems=SHARD // 2),
            comp(3, 200, [2]), coll(4, CommType.REDUCE_SCATTER, PARAM_BYTES, [3], in_nelems=PARAM_BYTES // 4,
                                    out_nelems=PARAM_BYTES // 8),
            coll(5, CommType.ALL_REDUCE, 4096, [4]), comp(6, 50, [5])]


def metadata(rank: int, world: int = 2) -> Metadata:
    groups = {"1": {"ranks": list(range(world)), "torch_name": "0", "desc": "default_pg"}}
    return Metadata(attrs={"rank": make_attr("rank", rank), "world_size": make_attr("world_size", world),
                           "process_groups": make_attr("process_groups", json.dumps(groups)),
                           "measured_window_ns": make_attr("measured_window_ns", [1, 2])})


def two_ranks(nodes=fsdp_rank, groups=None) -> RankSet:
    return RankSet({r: Graph(nodes(), rank=r, metadata=metadata(r)) for r in (0, 1)}, groups or {"1": (0, 1)})


def sizes(g: Graph) -> dict[str, int]:
    return {n.comm_type.name: n.comm_size for n in g.nodes.values() if n.type is NodeType.COMM_COLL_NODE}


def test_scale_up_replicates_ranks_and_resizes_what_follows_the_degree():
    scaled, report = scale_rankset(two_ranks(), 4)
    assert scaled.ranks == [0, 1, 2, 3] and scaled.comm_groups == {"1": (0, 1, 2, 3)}
    assert report.source_rank == {0: 0, 1: 1, 2: 0, 3: 1}
    assert sizes(scaled[3]) == {"ALL_GATHER": PARAM_BYTES // 4, "REDUCE_SCATTER": PARAM_BYTES, "ALL_REDUCE": 4096}
    ag, rs = scaled[2][2], scaled[2][4]
    assert (ag.attr("in_nelems"), ag.attr("out_nelems"), ag.attr("group_size")) == (PARAM_BYTES // 16, SHARD // 2, 4)
    assert (rs.attr("in_nelems"), rs.attr("out_nelems")) == (PARAM_BYTES // 4, PARAM_BYTES // 16)
    assert [n.duration_micros for n in scaled[3].nodes.values() if n.type is NodeType.COMP_NODE] == [100, 200, 50]
    meta = scaled[3].metadata.attrs
    assert meta["rank"].value == 3 and meta["world_size"].value == 4
    assert json.loads(meta["process_groups"].value)["1"]["ranks"] == [0, 1, 2, 3]
    assert "measured_window_ns" not in meta  # nothing in the scaled set was measured
    assert not [d for d in validate_rankset(scaled) if d.severity == "error"]


def test_scale_down_keeps_the_first_ranks_and_grows_the_shard():
    scaled, _ = scale_rankset(two_ranks(), 1)
    assert scaled.ranks == [0] and scaled.comm_groups == {"1": (0,)}
    assert sizes(scaled[0])["ALL_GATHER"] == PARAM_BYTES
    assert not [d for d in validate_rankset(scaled) if d.severity == "error"]


def test_global_batch_scales_compute_by_old_over_new_degree():
    scaled, report = scale_rankset(two_ranks(), 4, batch="global")
    mm = scaled[1][3]
    assert (mm.duration_micros, mm.attr("duration_ns"), mm.attr("num_ops")) == (100, round(200_007 / 2), 500)
    assert report.resized == {"ALL_GATHER": 4, "COMP": 12}


def test_scaled_set_is_written_validated_and_replays(tmp_path):
    report = scale(_written(tmp_path / "in", two_ranks()), 8, tmp_path / "out")
    assert report.new_dp == 8
    rs = RankSet.load(tmp_path / "out")
    assert rs.ranks == list(range(8))
    result = replay(tmp_path / "out", AnalyticalBackend(default_network(8))).to_dict(events=False)
    assert len(result["ranks"]) == 8 and all(r["finish_ns"] > 0 for r in result["ranks"])


def test_send_receive_between_stages_is_refused_naming_the_node():
    def stage():
        return [comp(1, 10), Node(2, "gloo:send", NodeType.COMM_SEND_NODE, (1,),
                                  attrs=make_attrs(comm_dst=1, comm_size=64, comm_tag=0))]
    with pytest.raises(InputError, match=r"rank 0 node 2 \('gloo:send'\): a send/receive between ranks"):
        scale_rankset(two_ranks(stage), 4)


def test_collective_on_a_group_that_is_not_the_world_is_refused_naming_the_group():
    def tp():
        return [coll(1, CommType.ALL_REDUCE, 1024, pg="2")]
    with pytest.raises(InputError, match=r"process group 2 \(ranks \[0\]\), which is not the world"):
        scale_rankset(two_ranks(tp, {"1": (0, 1), "2": (0,), "3": (1,)}), 4)


def test_all_to_all_is_refused_and_unused_groups_are_dropped():
    with pytest.raises(InputError, match="ALL_TO_ALL collective, whose per-rank size depends on its peers"):
        scale_rankset(two_ranks(lambda: [coll(1, CommType.ALL_TO_ALL, 64)]), 4)
    scaled, report = scale_rankset(two_ranks(groups={"1": (0, 1), "7": (1,)}), 4)
    assert report.dropped_groups == ["7"] and set(scaled.comm_groups) == {"1"}


def test_bad_degree_and_batch_are_input_errors():
    with pytest.raises(InputError, match="--dp 0"):
        scale_rankset(two_ranks(), 0)
    with pytest.raises(InputError, match="--batch 'half'"):
        scale_rankset(two_ranks(), 2, batch="half")


def _written(folder, rs: RankSet):
    rs.write(folder, "trace")
    return folder


def _cli(*args):
    return subprocess.run([sys.executable, "-c", "from chakra_tools.cli.main import convert_main; convert_main()",
                           *map(str, args)], capture_output=True, text=True)


@pytest.mark.slow
def test_real_ddp_capture_scales_to_4_and_back_to_1(ddp_run, tmp_path):
    """The DDP capture's gradient all-reduce keeps its bytes at every degree; every output
    validates (trace-validate) and replays."""
    et = tmp_path / "et"
    assert _cli("pytorch", ddp_run, "-o", et, "-q").returncode == 0
    original = RankSet.load(et)
    for dp in (4, 1):
        proc = _cli("scale", et, "--dp", dp, "-o", tmp_path / f"dp{dp}")
        assert proc.returncode == 0, proc.stderr
        assert "collective waits taken out of the step nodes: rank 0 " in proc.stdout
        scaled = RankSet.load(tmp_path / f"dp{dp}")
        assert scaled.ranks == list(range(dp))
        assert sizes(scaled[dp - 1]) == sizes(original[(dp - 1) % 2]) == {"ALL_REDUCE": sizes(original[0])["ALL_REDUCE"]}
        check = subprocess.run([sys.executable, "-c", "from chakra_tools.cli.main import validate_main; validate_main()",
                                str(tmp_path / f"dp{dp}")], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        result = replay(tmp_path / f"dp{dp}", AnalyticalBackend(default_network(dp)))
        assert len(result.to_dict(events=False)["ranks"]) == dp


@pytest.mark.slow
def test_real_pipeline_capture_is_refused(pipeline_run, tmp_path):
    et = tmp_path / "et"
    assert _cli("pytorch", pipeline_run, "-o", et, "-q").returncode == 0
    proc = _cli("scale", et, "--dp", 4, "-o", tmp_path / "out")
    assert proc.returncode == 2 and "a send/receive between ranks" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def _generated(**kw) -> RankSet:
    from chakra_tools.frontends.generate import TransformerConfig, generate

    base = dict(layers=4, hidden=1024, heads=16, seq=1024, vocab=50304, device="H100", efficiency=0.5)
    return generate(TransformerConfig(**{**base, **kw}))


def _makespan(rs: RankSet, folder) -> int:
    from chakra_tools.replay import Dim, NetworkConfig

    rs.write(folder, "w")
    net = NetworkConfig((Dim("Ring", len(rs), 50.0, 500.0),))
    return max(r["finish_ns"] for r in replay(folder, AnalyticalBackend(net)).to_dict(events=False)["ranks"])


@pytest.mark.parametrize("zero", [0, 1, 3])
def test_generated_workload_scaled_from_8_to_64_replays_as_the_generators_own(tmp_path, zero):
    """Per-rank batch 8: the generator's 64-rank job against its 8-rank job scaled to 64 (same
    bytes per all-reduce, ZeRO/FSDP shards a 64th). ZeRO 0 is exact; with ZeRO the optimizer
    updates a 64th of the parameters instead of an 8th, which scale leaves as it was."""
    scaled, _ = scale_rankset(_generated(dp=8, batch=64, zero=zero), 64)
    real = _generated(dp=64, batch=512, zero=zero)
    got, want = _makespan(scaled, tmp_path / "scaled"), _makespan(real, tmp_path / "real")
    if zero == 0:
        assert got == want
    assert abs(got - want) / want < 0.01


def test_generated_pipeline_and_tensor_parallel_jobs_are_refused():
    with pytest.raises(InputError, match="a send/receive between ranks"):
        scale_rankset(_generated(dp=2, pp=2, batch=16, microbatches=2), 4)
    with pytest.raises(InputError, match="which is not the world"):
        scale_rankset(_generated(dp=2, tp=2, batch=16), 4)


def stepped_rank(r: int) -> Graph:
    """One captured step 0..5000 µs: the step node (exclusive 1400 µs: 400 µs of Python between
    ops, 1000 µs idle while the all-reduce is in flight), forward 1000..3000, the all-reduce
    3000..4000, the optimizer 4000..4500; no op 0..400 (Python) and 4500..5000 (Python)."""
    t = 1_000_000
    nodes = [Node(1, "ProfilerStep#3", NodeType.COMP_NODE, start_time_micros=t, duration_micros=1400,
                  attrs=make_attrs(is_cpu_op=True, tid=1, duration_ns=1_400_000)),
             Node(2, "aten::mm", NodeType.COMP_NODE, (1,), start_time_micros=t + 400, duration_micros=2600,
                  attrs=make_attrs(is_cpu_op=True, tid=1)),
             coll(3, CommType.ALL_REDUCE, 4096, [2]).replace(start_time_micros=t + 3000, duration_micros=1000),
             Node(4, "Optimizer.step#SGD.step", NodeType.COMP_NODE, (3,), start_time_micros=t + 4000,
                  duration_micros=500, attrs=make_attrs(is_cpu_op=True, tid=1))]
    meta = metadata(r)
    attrs = {**meta.attrs, "profiler_steps_ns": make_attr("profiler_steps_ns", [t * 1000, (t + 5000) * 1000])}
    return Graph(nodes, rank=r, metadata=Metadata(meta.version, attrs, meta.present))


def test_the_old_degrees_wait_for_a_collective_leaves_the_step_node():
    """The thread's idle time in the step is 400 + 1000 + 500 µs, 1000 of it with the all-reduce
    in flight: that share of the step node's 1400 µs was waiting for the old degree's collective."""
    rs = RankSet({r: stepped_rank(r) for r in (0, 1)}, {"1": (0, 1)})
    scaled, report = scale_rankset(rs, 1)
    step = scaled[0][1]
    wait = round(1_400_000 * 1000 / 1900)
    assert step.attr("collective_wait_ns") == wait and step.attr("duration_ns") == 1_400_000 - wait
    assert step.duration_micros == round((1_400_000 - wait) / 1000)
    assert report.waits_ns == {0: wait}
    assert [scaled[0][i].duration_micros for i in (2, 4)] == [2600, 500]  # the ops' own time stays
    meta = json.loads(scaled[0].metadata.attrs["scaled_from"].value)
    assert meta == {"dp": 2, "batch": "per-rank", "steps": 1}


def test_without_step_windows_nothing_is_taken_out():
    plain = {r: Graph(stepped_rank(r).nodes.values(), rank=r, metadata=metadata(r)) for r in (0, 1)}
    scaled, report = scale_rankset(RankSet(plain, {"1": (0, 1)}), 4)
    assert report.waits_ns == {0: 0, 1: 0} and scaled[3][1].attr("duration_ns") == 1_400_000
    assert json.loads(scaled[3].metadata.attrs["scaled_from"].value)["steps"] is None


def test_scaled_from_survives_a_second_rescale_and_a_bad_one_is_an_input_error(tmp_path):
    from chakra_tools.convert.scale import scaled_from

    once, _ = scale_rankset(two_ranks(), 4)
    twice, _ = scale_rankset(once, 1, batch="global")
    assert scaled_from(twice[0]) == {"dp": 2, "batch": "global", "steps": None}
    g = twice[0]
    bad = Graph(g.nodes.values(), rank=0, metadata=Metadata(g.metadata.version, {
        **g.metadata.attrs, "scaled_from": make_attr("scaled_from", '{"dp": "two"}')}, g.metadata.present))
    with pytest.raises(InputError, match="GlobalMetadata scaled_from is not"):
        scaled_from(bad)
