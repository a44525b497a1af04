"""trace-convert scale (convert/scale.py): a converted capture at another data-parallel degree.

Tiny inline rank sets (DDP, FSDP-like, pipeline, tensor parallel) with the expected bytes beside
them, and real captures of examples/ddp.py and examples/pipeline.py (tests/convert/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys

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


def test_cli_names_the_layout_it_read_and_the_one_it_could_not_tell_apart(tmp_path):
    """trace-convert scale says which degrees it kept and, on stderr, the other layout the graph
    fits; --tp picks that one."""
    src = _written(tmp_path / "in", two_ranks())
    proc = _cli("scale", src, "--dp", 4, "-o", tmp_path / "dp4")
    assert proc.returncode == 0, proc.stderr
    assert "trace-convert scale: dp 2 -> 4: 2 -> 4 ranks (per-rank batch)" in proc.stdout
    assert "note: the graph fits tp=2 pp=1 as well" in proc.stderr and "give --tp/--pp" in proc.stderr
    proc = _cli("scale", src, "--dp", 1, "--tp", 2, "-o", tmp_path / "tp2")
    assert proc.returncode == 0, proc.stderr
    assert "dp 1 -> 1, tp 2 kept: 2 -> 2 ranks" in proc.stdout and "note: the graph fits" not in proc.stderr
    proc = _cli("scale", src, "--dp", 2, "--pp", 2, "-o", tmp_path / "pp2")
    assert proc.returncode == 2 and "rank 0 sends and receives nothing" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "pp2").exists()


def test_scale_down_keeps_the_first_ranks_and_grows_the_shard():
    four, _ = scale_rankset(two_ranks(), 4)
    scaled, report = scale_rankset(four, 2)
    assert scaled.ranks == [0, 1] and scaled.comm_groups == {"1": (0, 1)} and report.source_rank == {0: 0, 1: 1}
    assert sizes(scaled[1])["ALL_GATHER"] == SHARD  # a 4th of the parameters back to a half
    assert not [d for d in validate_rankset(scaled) if d.severity == "error"]


def test_collectives_left_alone_at_the_new_degree_are_dropped_and_their_dependents_rewired():
    """At 1 rank the all-gather, reduce-scatter and all-reduce have no peer: they move nothing
    (the replay charges them nothing) and ASTRA-sim never completes them (consumers.py,
    astra-single-rank-group), so they go; what waited for them waits for what they waited for."""
    scaled, report = scale_rankset(two_ranks(), 1)
    assert scaled.ranks == [0] and report.lone_dropped == {0: 3}
    g = scaled[0]
    assert [(n.id, n.data_deps) for n in g.nodes.values()] == [(1, ()), (3, (1,)), (6, (3,))]
    assert not [d for d in validate_rankset(scaled) if d.severity == "error"]
    # in a model-parallel job (tp 2 x dp 2) only the data-parallel collectives are alone at dp 1
    def rank(r):
        return [comp(1, 10), coll(2, CommType.ALL_REDUCE, 1024, [1], pg="1" if r < 2 else "4"),
                coll(3, CommType.ALL_REDUCE, 4096, [2], pg=str(2 + r % 2)), comp(4, 10, [3])]
    source = four_ranks(rank, {"1": (0, 1), "4": (2, 3), "2": (0, 2), "3": (1, 3)})
    scaled, report = scale_rankset(source, 1)
    assert (report.tp, report.old_dp, report.lone_dropped) == (2, 2, {0: 1, 1: 1})
    assert [n.id for n in scaled[1].nodes.values()] == [1, 2, 4] and scaled[1][4].data_deps == (2,)
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
    # made and written rank by rank, the files are those of the set made whole and written
    scale_rankset(RankSet.load(tmp_path / "in"), 8)[0].write(tmp_path / "whole", record_world=True)
    for f in sorted((tmp_path / "out").iterdir()):
        assert f.read_bytes() == (tmp_path / "whole" / f.name).read_bytes(), f.name


def test_a_scaled_set_that_fails_validation_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    """Validated on the stage, after every rank is written: refused, nothing of it is put in place
    and what the folder held stays."""
    from chakra_tools.convert import scale as scaling
    from chakra_tools.convert.run import ConversionCheckError

    out = tmp_path / "out"
    scale(_written(tmp_path / "in", two_ranks()), 4, out)
    before = {f.name: f.read_bytes() for f in out.iterdir()}
    broken = scaling._scaled_graph

    def with_a_stray_dependency(g, rank, *args):  # rank 5 depends on a node it does not have
        made = broken(g, rank, *args)
        if rank == 5:
            first = min(made.nodes)
            made.nodes[first] = made.nodes[first].replace(data_deps=(10**6,))
        return made

    monkeypatch.setattr(scaling, "_scaled_graph", with_a_stray_dependency)
    with pytest.raises(ConversionCheckError, match="fails validation") as e:
        scale(tmp_path / "in", 8, out)
    assert ".stage" not in str(e.value) and str(out) in str(e.value)
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before


def four_ranks(nodes, groups) -> RankSet:
    return RankSet({r: Graph(nodes(r), rank=r, metadata=metadata(r, 4)) for r in range(4)}, groups)


def send(i, dst, deps=()):
    return Node(i, "gloo:send", NodeType.COMM_SEND_NODE, tuple(deps), attrs=make_attrs(comm_dst=dst, comm_size=64, comm_tag=0))


def test_replaying_a_scaled_set_on_recorded_time_is_warned_about(tmp_path):
    """--host-time timeline (or --comm measured, --align recorded) on a scaled set replays the
    old degree's recorded waits: trace-replay says so; the defaults say nothing; an unscaled set
    says nothing either way."""
    from chakra_tools.replay import CaptureModes, replay_rankset

    source = _written(tmp_path / "in", two_ranks())
    scale(source, 4, tmp_path / "out")
    recorded = CaptureModes(host_time="timeline", comm="measured")
    said = {}
    for name, path, modes in (("scaled, recorded", tmp_path / "out", recorded),
                              ("scaled, defaults", tmp_path / "out", CaptureModes()),
                              ("source, recorded", source, recorded)):
        heard = []
        replay_rankset(path, modes=modes, on_warning=heard.append, record_events=False)
        said[name] = [str(d) for d in heard if d.code == "scaled-recorded-time"]
    assert not said["scaled, defaults"] and not said["source, recorded"]
    (text,) = said["scaled, recorded"]
    assert "--comm measured, --host-time timeline take time from the record" in text
    assert "scaled from a 2-rank capture" in text


def test_send_receive_that_no_pipeline_explains_is_refused_naming_the_node():
    """Ranks 0 and 1 all-reduce together and rank 0 sends to 1: in no tp x dp x pp layout are
    they one group and two stages of one pipeline at once."""
    def rank(r):
        return [coll(1, CommType.ALL_REDUCE, 1024, pg="2" if r < 2 else "3")] + ([send(2, 1, [1])] if r == 0 else [])
    with pytest.raises(InputError, match=r"rank 0 node 2 \('gloo:send'\): a send/receive between ranks 0 and 1, "
                                         r"which are not two stages of one pipeline.*no tensor x data x pipeline layout"):
        scale_rankset(four_ranks(rank, {"1": (0, 1, 2, 3), "2": (0, 1), "3": (2, 3)}), 4)


def test_a_group_no_layout_explains_is_refused_naming_the_group():
    """Groups {0, 3} and {1, 2} are neither consecutive (tensor parallel) nor strided (data
    parallel) in any layout."""
    def rank(r):
        return [coll(1, CommType.ALL_REDUCE, 1024, pg="2" if r in (0, 3) else "3")]
    with pytest.raises(InputError, match=r"rank 0 node 1 \('gloo:all_reduce'\): a collective on process group 2 "
                                         r"\(ranks \[0, 3\]\), which is neither within rank 0's replica"):
        scale_rankset(four_ranks(rank, {"1": (0, 1, 2, 3), "2": (0, 3), "3": (1, 2)}), 8)


def test_given_degrees_that_the_graph_does_not_fit_are_refused():
    with pytest.raises(InputError, match=r"rank 0 sends and receives nothing, so it is no pipeline stage of pp=2; the layout pp=2"):
        scale_rankset(two_ranks(), 4, pp=2)
    with pytest.raises(InputError, match="--tp 3: the captured degree divides the rank count 2"):
        scale_rankset(two_ranks(), 4, tp=3)


def test_a_two_rank_job_on_the_world_is_data_parallel_unless_told_tensor_parallel():
    """DDP and 2-way tensor parallelism on the world look the same: taken as DDP (the all-reduce
    grows to the new world), tp=2 as the alternative; told tp=2, it is one replica whose
    replicas would exchange nothing the trace shows: not grown (see below)."""
    scaled, report = scale_rankset(two_ranks(), 4)
    assert (report.tp, report.new_dp, report.alternatives) == (1, 4, [(2, 1)])
    assert scaled.comm_groups == {"1": (0, 1, 2, 3)}
    scaled, report = scale_rankset(two_ranks(), 1, tp=2)
    assert (report.tp, report.old_dp, report.new_dp, report.group_kinds) == (2, 1, 1, {"1": "tp"})
    assert scaled.comm_groups == {"1": (0, 1)} and sizes(scaled[1]) == sizes(two_ranks()[1])
    with pytest.raises(InputError, match="what 2 replicas would exchange"):
        scale_rankset(two_ranks(), 2, tp=2)


def named(rs: RankSet, names: dict[str, str]) -> RankSet:
    """`rs` with its groups' recorded descriptions (GlobalMetadata process_groups, as PyTorch writes
    a group's `group_desc`) set to `names`."""
    doc = json.dumps({pg: {"ranks": list(m), "desc": names.get(pg, "undefined")} for pg, m in rs.comm_groups.items()})
    for g in rs:
        g.metadata = Metadata(g.metadata.version, {**g.metadata.attrs, "process_groups": make_attr("process_groups", doc)},
                              g.metadata.present)
    return rs


def test_the_captures_own_group_names_settle_what_the_graph_cannot():
    """Megatron-LM names its groups (group_desc): a 2-rank job on the world named
    TENSOR_MODEL_PARALLEL_GROUP is tensor parallel, with no other reading left to note."""
    _, report = scale_rankset(named(two_ranks(), {"1": "TENSOR_MODEL_PARALLEL_GROUP"}), 1)
    assert (report.tp, report.old_dp, report.alternatives) == (2, 1, [])
    _, report = scale_rankset(named(two_ranks(), {"1": "DATA_PARALLEL_GROUP"}), 4)
    assert (report.tp, report.old_dp, report.alternatives) == (1, 2, [])


def test_groups_within_one_replica_are_copied_to_each_new_one():
    """A 4-stage pipeline (dp 1) whose first and last stage all-reduce their tied embeddings
    (Megatron's EMBEDDING_GROUP {0, 3}) and whose stages all-reduce gradients on groups of one:
    at dp 2 the embedding group of the second replica is {4, 7}, the gradient groups {s, s + 4}
    ... in Megatron order, stage s of replica d is rank 2s + d: {0, 6} and {1, 7}."""
    def stage(r):
        nodes = [comp(1, 10)]
        if r < 3:
            nodes.append(send(2, r + 1, [1]))
        if r > 0:
            nodes.append(Node(3, "gloo:recv", NodeType.COMM_RECV_NODE, (1,),
                              attrs=make_attrs(comm_src=r - 1, comm_size=64, comm_tag=0)))
        nodes.append(coll(4, CommType.ALL_REDUCE, 4096, [1], pg=str(10 + r)))  # gradients, a group of one
        if r in (0, 3):
            nodes.append(coll(5, CommType.ALL_REDUCE, 512, [4], pg="5"))
        return nodes
    groups = {"1": (0, 1, 2, 3), "5": (0, 3), **{str(10 + r): (r,) for r in range(4)}}
    source = named(four_ranks(stage, groups), {"5": "EMBEDDING_GROUP"})
    scaled, report = scale_rankset(source, 2)
    assert (report.tp, report.pp, report.old_dp, report.group_kinds["5"]) == (1, 4, 1, "replica")
    assert report.source_rank == {0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2, 6: 3, 7: 3}
    embedding = {r: scaled.comm_groups[scaled[r][5].pg_name] for r in (0, 1, 6, 7)}
    assert embedding == {0: (0, 6), 6: (0, 6), 1: (1, 7), 7: (1, 7)}
    assert scaled.comm_groups[scaled[2][4].pg_name] == (2, 3)  # stage 1's gradients, both replicas
    assert scaled[3][2].comm_dst == 5 and scaled[5][3].comm_src == 3
    assert not [d for d in validate_rankset(scaled) if d.severity == "error"]


def test_a_collective_on_a_group_of_one_reads_as_data_parallel():
    """examples/tensor_parallel.py --tp 2 on 2 ranks: activations all-reduced on the world, each
    rank's gradients on a group of one (dp 1, as DDP at one rank). Read as tp 2 x dp 1 (not dp
    2 with tensor-parallel groups of one); at dp 2 the gradient groups become {0, 2} and {1, 3}."""
    def rank(r):
        return [coll(1, CommType.ALL_REDUCE, 1024, pg="1"), coll(2, CommType.ALL_REDUCE, 4096, [1], pg=str(2 + r))]
    source = RankSet({r: Graph(rank(r), rank=r, metadata=metadata(r)) for r in (0, 1)}, {"1": (0, 1), "2": (0,), "3": (1,)})
    scaled, report = scale_rankset(source, 2)
    assert (report.tp, report.old_dp, report.group_kinds) == (2, 1, {"1": "tp", "2": "dp", "3": "dp"})
    assert report.alternatives == [(1, 1)]
    assert [scaled.comm_groups[n.pg_name] for n in scaled[3].nodes.values()] == [(2, 3), (1, 3)]


def test_all_to_all_is_refused_where_its_group_grows_and_unused_groups_are_dropped():
    with pytest.raises(InputError, match=r"ALL_TO_ALL on process group 1 \(ranks \[0, 1\]\), whose size changes with the degree: its per-rank size depends on its peers"):
        scale_rankset(two_ranks(lambda: [coll(1, CommType.ALL_TO_ALL, 64)]), 4)
    scaled, _ = scale_rankset(two_ranks(lambda: [coll(1, CommType.ALL_TO_ALL, 64)]), 1, tp=2)  # its group stays
    assert sizes(scaled[1]) == {"ALL_TO_ALL": 64}
    # at the same degree nothing changes size: the set is rewritten (its waits taken out), not refused
    scaled, report = scale_rankset(two_ranks(lambda: [coll(1, CommType.ALL_TO_ALL, 64)]), 2)
    assert report.new_ranks == 2 and sizes(scaled[1]) == {"ALL_TO_ALL": 64}
    scaled, report = scale_rankset(two_ranks(groups={"1": (0, 1), "7": (1,)}), 4)
    assert report.dropped_groups == ["7"] and set(scaled.comm_groups) == {"1"}


def test_all_to_all_of_equal_shares_keeps_each_ranks_buffer_where_asked():
    """--all-to-all per-rank: experts spread over the data-parallel group, each rank's tokens the
    same at any degree: the buffer stays, its equal shares re-split over the new group; unequal
    shares (alltoallv) say nothing of another split and are refused, naming the node."""
    equal = lambda: [coll(1, CommType.ALL_TO_ALL, 64, in_nelems=16, out_nelems=16, in_split=[8, 8],  # noqa: E731
                          out_split=[8, 8])]
    scaled, report = scale_rankset(two_ranks(equal), 4, all_to_all="per-rank")
    (a2a,) = [n for n in scaled[3].nodes.values() if n.type is NodeType.COMM_COLL_NODE]
    assert a2a.comm_size == 64 and a2a.attrs["group_size"].value == 4
    assert list(a2a.attrs["in_split"].value) == [4] * 4 == list(a2a.attrs["out_split"].value)
    assert report.resized == {"ALL_TO_ALL": 4}
    assert not [d for d in validate_rankset(scaled) if d.severity == "error"]
    unequal = lambda: [coll(1, CommType.ALL_TO_ALL, 64, in_nelems=16, in_split=[12, 4])]  # noqa: E731
    with pytest.raises(InputError, match=r"rank 0 node 1 sends unequal shares \(in_split \[12, 4\]\)"):
        scale_rankset(two_ranks(unequal), 4, all_to_all="per-rank")
    with pytest.raises(InputError, match="--all-to-all per-rank keeps each rank's buffer"):
        scale_rankset(two_ranks(equal), 4)
    with pytest.raises(InputError, match="--all-to-all 'guess'"):
        scale_rankset(two_ranks(equal), 4, all_to_all="guess")


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
    """The DDP capture's gradient all-reduce keeps its bytes at every degree (at 1 rank it has no
    peer and is left out, the CLI says so); every output validates (trace-validate) and replays."""
    et = tmp_path / "et"
    assert _cli("pytorch", ddp_run, "-o", et, "-q").returncode == 0
    original = RankSet.load(et)
    for dp in (4, 1):
        proc = _cli("scale", et, "--dp", dp, "-o", tmp_path / f"dp{dp}")
        assert proc.returncode == 0, proc.stderr
        assert "collective waits, out of the host ops: rank " in proc.stdout  # the rank that waited (the faster one)
        scaled = RankSet.load(tmp_path / f"dp{dp}")
        assert scaled.ranks == list(range(dp))
        if dp > 1:
            assert sizes(scaled[dp - 1]) == sizes(original[(dp - 1) % 2]) == {"ALL_REDUCE": sizes(original[0])["ALL_REDUCE"]}
        else:
            assert sizes(scaled[0]) == {} and "collectives left out on 1 ranks: their group at dp 1 is one rank" in proc.stderr
        check = subprocess.run([sys.executable, "-c", "from chakra_tools.cli.main import validate_main; validate_main()",
                                str(tmp_path / f"dp{dp}")], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        result = replay(tmp_path / f"dp{dp}", AnalyticalBackend(default_network(dp)))
        assert len(result.to_dict(events=False)["ranks"]) == dp


@pytest.mark.slow
def test_real_pipeline_capture_scales_its_replicas(pipeline_dp_run, pipeline_run, tmp_path):
    """examples/pipeline.py --stages 2 on 2 ranks (2 stages, one replica) at dp 2: 4 ranks, stage
    s on ranks 2s and 2s+1, each replica's sends to its own next stage, the gradient all-reduce on
    {0, 1} and {2, 3}; the set validates and replays. Without --stages the pipeline has no
    gradient all-reduce at all, and scale will not make up what replicas exchange."""
    plain = tmp_path / "plain"
    assert _cli("pytorch", pipeline_run, "-o", plain, "-q").returncode == 0
    proc = _cli("scale", plain, "--dp", 2, "-o", tmp_path / "refused")
    assert proc.returncode == 2 and "nothing says what 2 replicas would exchange" in proc.stderr
    et = tmp_path / "et"
    assert _cli("pytorch", pipeline_dp_run, "-o", et, "-q").returncode == 0
    proc = _cli("scale", et, "--dp", 2, "-o", tmp_path / "out", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["tp"], report["pp"], report["old_dp"], report["new_dp"], report["new_ranks"]) == (1, 2, 1, 2, 4)
    scaled, original = RankSet.load(tmp_path / "out"), RankSet.load(et)
    assert report["source_rank"] == {"0": 0, "1": 0, "2": 1, "3": 1}
    for r in scaled.ranks:
        peers = {n.comm_dst if n.type is NodeType.COMM_SEND_NODE else n.comm_src for n in scaled[r].nodes.values()
                 if n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)}
        assert peers == {r + 2 if r < 2 else r - 2}
        assert len(scaled[r].nodes) == len(original[r // 2].nodes)
        assert {scaled.comm_groups[n.pg_name] for n in scaled[r].nodes.values()
                if n.type is NodeType.COMM_COLL_NODE} == {(0, 1) if r < 2 else (2, 3)}
    check = subprocess.run([sys.executable, "-c", "from chakra_tools.cli.main import validate_main; validate_main()",
                            str(tmp_path / "out")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert len(replay(tmp_path / "out", AnalyticalBackend(default_network(4))).to_dict(events=False)["ranks"]) == 4


@pytest.mark.slow
def test_real_tensor_and_data_parallel_capture_scales_its_data_parallel_degree(tp_dp_run, tmp_path):
    """examples/tensor_parallel.py --tp 2 on 4 ranks: the layout read off its groups (tp 2 x dp
    2), the tensor-parallel all-reduces kept on 2-rank groups, the gradient all-reduce on a group
    of the new data-parallel degree with its bytes; down to 2 ranks and up to 8."""
    et = tmp_path / "et"
    assert _cli("pytorch", tp_dp_run, "-o", et, "-q").returncode == 0
    original = RankSet.load(et)
    for dp in (1, 4):
        proc = _cli("scale", et, "--dp", dp, "-o", tmp_path / f"dp{dp}", "--json")
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert (report["tp"], report["pp"], report["old_dp"], report["alternatives"]) == (2, 1, 2, [])
        scaled = RankSet.load(tmp_path / f"dp{dp}")
        assert scaled.ranks == list(range(2 * dp)) and sorted(set(report["group_kinds"].values())) == ["dp", "tp"]
        for r in scaled.ranks:
            source = original[report["source_rank"][str(r)]]
            collectives = [old for old in source.nodes.values() if old.type is NodeType.COMM_COLL_NODE]
            assert collectives
            for old in collectives:
                tensor = report["group_kinds"][old.pg_name] == "tp"
                if not tensor and dp == 1:  # the gradient all-reduce alone at dp 1: left out
                    assert old.id not in scaled[r].nodes
                    continue
                new = scaled[r][old.id]
                assert new.comm_size == old.comm_size
                assert scaled.comm_groups[new.pg_name] == ((r - r % 2, r - r % 2 + 1) if tensor
                                                           else tuple(range(r % 2, 2 * dp, 2)))
        check = subprocess.run([sys.executable, "-c", "from chakra_tools.cli.main import validate_main; validate_main()",
                                str(tmp_path / f"dp{dp}")], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


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


@pytest.mark.parametrize("degrees", [dict(tp=2), dict(pp=2, microbatches=2), dict(tp=2, pp=2, microbatches=2)],
                         ids=["tp2", "pp2", "tp2-pp2"])
@pytest.mark.parametrize("zero", [0, 3])
def test_generated_model_parallel_job_scaled_from_dp_2_to_8_replays_as_the_generators_own(tmp_path, degrees, zero):
    """The layout read off the generator's groups and send/receive peers; its tp x pp x dp 2 job
    at dp 8 against its own dp 8 job: exact without ZeRO, within 1% with it (as above)."""
    source = _generated(dp=2, batch=16, zero=zero, **degrees)
    scaled, report = scale_rankset(source, 8)
    assert (report.tp, report.pp) == (degrees.get("tp", 1), degrees.get("pp", 1))
    real = _generated(dp=8, batch=64, zero=zero, **degrees)
    got, want = _makespan(scaled, tmp_path / "scaled"), _makespan(real, tmp_path / "real")
    if zero == 0:
        assert got == want
    assert abs(got - want) / want < 0.01


@pytest.mark.parametrize("seed", range(8))
def test_random_generated_layouts_scale_as_the_generators_own_job(tmp_path, seed):
    """Random tp x pp x dp jobs (per-rank batch fixed, no ZeRO) scaled to a random dp: the layout
    is read back as generated and the replay equals the generator's own job to the ns. (At dp 1
    the generator writes no gradient all-reduce, and scale refuses to grow such a job: below.)"""
    import random

    rng = random.Random(seed)
    tp, pp, dp, new = rng.choice((1, 2, 4)), rng.choice((1, 2, 3)), rng.choice((2, 3)), rng.choice((1, 2, 4, 5))
    micro = rng.choice((1, 2)) if pp > 1 else 1
    small = dict(layers=2 * pp, hidden=256, heads=4, seq=128, vocab=4096, tp=tp, pp=pp, microbatches=micro)
    source = _generated(**small, dp=dp, batch=2 * micro * dp)
    scaled, report = scale_rankset(source, new)
    assert (report.tp, report.pp, report.old_dp, report.new_dp) == (tp, pp, dp, new), (tp, pp, dp, new)
    own = _generated(**small, dp=new, batch=2 * micro * new)
    assert _makespan(scaled, tmp_path / "scaled") == _makespan(own, tmp_path / "own"), (tp, pp, dp, new)


def test_a_job_whose_replicas_exchange_nothing_is_not_grown():
    """The generator's dp-1 pipeline writes no gradient all-reduce; a single process without DDP
    none at all: more replicas of either would be independent jobs, so scale refuses, and still
    shrinks or keeps them."""
    pipeline = _generated(layers=4, hidden=256, heads=4, seq=128, vocab=4096, pp=2, microbatches=2, dp=1, batch=4)
    with pytest.raises(InputError, match=r"no collective of the capture is on a data-parallel group or the world.*"
                                         r"nothing says what 4 replicas would exchange"):
        scale_rankset(pipeline, 4)
    alone = RankSet({0: Graph([comp(1, 100)], rank=0, metadata=metadata(0, 1))}, {})
    with pytest.raises(InputError, match="what 2 replicas would exchange"):
        scale_rankset(alone, 2)
    assert scale_rankset(alone, 1)[0].ranks == [0]


def test_astra_sims_hybrid_transformer_workload_scales_as_its_own_conversion(shared_fixtures, tmp_path):
    """ASTRA-sim 1.0's Transformer_HybridParallel.txt (model_parallel_NPU_group 4) converted on 8
    NPUs (tp 4 x dp 2) and scaled to dp 1 and 4 replays to the ns as the same text converted on
    4 and 16 NPUs."""
    from chakra_tools.frontends import TextOptions, read_text_workload, text_to_rankset

    workload = read_text_workload(shared_fixtures / "astra-sim/text_workloads/Transformer_HybridParallel.txt")

    def convert_text(npus: int) -> RankSet:
        return text_to_rankset(workload, TextOptions(npus=npus))[0]

    source = convert_text(8)
    for dp, npus in ((1, 4), (4, 16)):
        scaled, report = scale_rankset(source, dp)
        assert (report.tp, report.old_dp, report.alternatives) == (4, 2, [])
        assert _makespan(scaled, tmp_path / f"s{dp}") == _makespan(convert_text(npus), tmp_path / f"t{dp}")


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


def test_a_set_whose_converter_took_the_waits_out_has_none_estimated_again():
    """The converter takes each untraced wait out where it lay (`collective_waits_out`): an
    estimate on top would take the step node's Python time out as well."""
    def converted(r):
        g = stepped_rank(r)
        meta = g.metadata
        attrs = {**meta.attrs, "collective_waits_out": make_attr("collective_waits_out", True)}
        return Graph(g.nodes.values(), rank=r, metadata=Metadata(meta.version, attrs, meta.present))

    scaled, report = scale_rankset(RankSet({r: converted(r) for r in (0, 1)}, {"1": (0, 1)}), 1)
    assert report.waits_ns == {0: 0} and scaled[0][1].attr("duration_ns") == 1_400_000
    assert scaled[0].metadata.attrs["collective_waits_out"].value is True


def test_scaled_from_survives_a_second_rescale_and_a_bad_one_is_an_input_error(tmp_path):
    from chakra_tools.core.measured import scaled_from

    once, _ = scale_rankset(two_ranks(), 4)
    twice, _ = scale_rankset(once, 1, batch="global")
    assert scaled_from(twice[0]) == {"dp": 2, "batch": "global", "steps": None, "tp": 1, "pp": 1}
    g = twice[0]
    bad = Graph(g.nodes.values(), rank=0, metadata=Metadata(g.metadata.version, {
        **g.metadata.attrs, "scaled_from": make_attr("scaled_from", '{"dp": "two"}')}, g.metadata.present))
    with pytest.raises(InputError, match="GlobalMetadata scaled_from is not"):
        scaled_from(bad)


def test_expert_parallel_all_to_all_is_refused_not_read_as_tensor_parallel():
    """A 4-rank DDP job with MoE's all-to-all on groups [0,1] and [2,3]: the groups look like
    tensor-parallel ones, and reading them so made `--dp 8` write 16 ranks. Refused with the
    reason unless --tp says what they are."""
    def moe(rank):
        pg = "2" if rank < 2 else "3"
        return [comp(1, 100), coll(2, CommType.ALL_TO_ALL, 65536, [1], pg=pg), comp(3, 100, [2]),
                coll(4, CommType.ALL_REDUCE, 4096, [3], pg="1")]

    groups = {"1": (0, 1, 2, 3), "2": (0, 1), "3": (2, 3)}
    rs = RankSet({r: Graph(moe(r), rank=r, metadata=metadata(r, 4)) for r in range(4)}, groups)
    with pytest.raises(InputError, match=r"ALL_TO_ALL on process group 2 \(ranks \[0, 1\]\).*expert"):
        scale_rankset(rs, 8)
    scaled, _ = scale_rankset(rs, 4, tp=2)  # stated: kept as tensor parallel
    assert scaled.ranks == list(range(8))


def test_a_large_groups_record_says_its_size_where_its_members_would_fill_every_file(monkeypatch):
    """Every scaled rank's GlobalMetadata records the process groups; a group past LISTED_MEMBERS
    is recorded by its size (its members are comm_group.json's): listed, a 16,384-rank world made
    each rank file 87 KB. Worked out once for all ranks: every rank gets the same record."""
    from chakra_tools.convert import newgroups

    monkeypatch.setattr(newgroups, "LISTED_MEMBERS", 2)
    scaled, _ = scale_rankset(two_ranks(), 4)
    records = [scaled[r].metadata.attrs["process_groups"].value for r in scaled.ranks]
    assert len(set(records)) == 1 and records[0] is records[3]
    record = json.loads(records[0])["1"]
    assert record["size"] == 4 and "ranks" not in record and scaled.comm_groups == {"1": (0, 1, 2, 3)}
    # and every rank's record lists every group of the set, the last rank's as the first's
    assert set(json.loads(records[3])) == set(scaled.comm_groups)
    assert not [d for d in validate_rankset(scaled) if d.severity == "error"]


def test_every_scaled_rank_records_every_group_of_the_set():
    """Tensor-parallel groups are made replica by replica as the ranks are scaled; each rank's
    process_groups record is written once all are made: rank 0's lists the last replica's groups
    too (it listed only those made before it), and every rank's is the same."""
    def job(rank):
        pg = "2" if rank < 2 else "3"
        return [comp(1, 100), coll(2, CommType.ALL_REDUCE, 65536, [1], pg=pg), comp(3, 100, [2]),
                coll(4, CommType.ALL_REDUCE, 4096, [3], pg="1")]

    groups = {"1": (0, 1, 2, 3), "2": (0, 1), "3": (2, 3)}
    rs = named(RankSet({r: Graph(job(r), rank=r, metadata=metadata(r, 4)) for r in range(4)}, groups),
               {"2": "TENSOR_MODEL_PARALLEL_GROUP", "3": "TENSOR_MODEL_PARALLEL_GROUP"})
    scaled, _ = scale_rankset(rs, 4, tp=2)
    records = {r: json.loads(scaled[r].metadata.attrs["process_groups"].value) for r in scaled.ranks}
    assert set(records[0]) == set(scaled.comm_groups) and len(scaled.comm_groups) > len(groups)
    assert all(rec == records[0] for rec in records.values())
