"""Topology and algorithm formulas against hand-computed values, and ASTRA-sim's own numbers."""

from __future__ import annotations

import pytest

from chakra_tools.core.errors import InputError
from chakra_tools.core.model import CommType
from chakra_tools.feed.info import NodeInfo
from chakra_tools.replay import (AnalyticalBackend, Dim, NetworkConfig, Scales,
                                 load_memory, load_network, load_system)
from chakra_tools.replay import collectives as C
from chakra_tools.replay import steps as S
from chakra_tools.replay.config import memory_from_dict, network_from_dict, system_from_dict

RING4 = {"preferred-dataset-splits": 4, "endpoint-delay": 10, "active-chunks-per-dimension": 1,
         "all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
         "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["ring"],
         "collective-optimization": "localBWAware", "local-mem-bw": 1600}

# REFERENCE §4: ASTRA-sim master (congestion-unaware analytical), 1 MiB per rank,
# Ring_4chunks.json + Ring_<N>npus.yml (one Ring dimension, 50 GB/s, 500 ns).
ASTRA_SIM_NS = {
    (CommType.ALL_REDUCE, 4): 43_000, (CommType.ALL_REDUCE, 8): 64_440, (CommType.ALL_REDUCE, 16): 99_640,
    (CommType.ALL_GATHER, 4): 64_744, (CommType.ALL_GATHER, 8): 151_016, (CommType.ALL_GATHER, 16): 323_560,
    (CommType.REDUCE_SCATTER, 4): 22_240, (CommType.REDUCE_SCATTER, 8): 33_080,
    (CommType.REDUCE_SCATTER, 16): 50_740,
    (CommType.ALL_TO_ALL, 4): 41_560, (CommType.ALL_TO_ALL, 8): 125_480, (CommType.ALL_TO_ALL, 16): 391_240,
}


RING4x2 = {**RING4, **{f"{c}-implementation": ["ring", "ring"]  # one per dimension of a 2-D network
                       for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}}


def ring(n, bw=50.0, lat=500.0, topo="Ring"):
    return NetworkConfig((Dim(topo, n, bw, lat),))


@pytest.mark.parametrize(("kind", "npus"), sorted(ASTRA_SIM_NS))
def test_astra_sim_microbenchmarks_within_one_percent(kind, npus):
    b = AnalyticalBackend(ring(npus), system_from_dict(RING4))
    ours = b.collective_ns(kind, 1 << 20, list(range(npus)))
    ref = ASTRA_SIM_NS[(kind, npus)]
    assert abs(ours - ref) <= 0.01 * ref, (ours, ref)
    assert ours == ref  # in fact exact: the model is ASTRA-sim's, step for step


def test_link_time_hand_computed():
    # 50 GB/s = 50 * 2**30 / 1e9 = 53.6870912 B/ns; 65536 B -> 1220.703 ns; + 500 ns; truncated.
    ctx = C.PhaseContext(Dim("Ring", 4, 50.0, 500.0))
    assert ctx.net(65536) == 1720
    assert ctx.net(65536, hops=2) == 2220
    assert C.neighbour_hops(Dim("Switch", 8, 1, 1)) == 2
    assert C.neighbour_hops(Dim("FullyConnected", 8, 1, 1), 3) == 1
    assert C.neighbour_hops(Dim("Ring", 8, 1, 1), 7) == 1  # the short way round
    assert C.neighbour_hops(Dim("Ring", 8, 1, 1), 4) == 4


def test_ring_all_reduce_phase_by_hand():
    # one 256 KiB chunk on 4 NPUs: 7 endpoint delays + 6 messages of 64 KiB (1720 ns) +
    # 3 reductions of 3 * int(65536 / 1600) = 120 ns
    ctx = C.PhaseContext(Dim("Ring", 4, 50.0, 500.0), 10, 1600)
    assert C.ring_all_reduce(4, 262144, ctx) == (7 * 10 + 6 * 1720 + 3 * 120, 262144)
    assert C.ring_reduce_scatter(4, 262144, ctx) == (4 * 10 + 3 * 1720 + 3 * 120, 65536)
    # all-gather: 3 messages of the whole chunk: int(500 + 262144/53.687) = 5382
    assert C.ring_all_gather(4, 262144, ctx) == (4 * 10 + 3 * 5382, 4 * 262144)


def test_switch_and_direct_by_hand():
    ctx = C.PhaseContext(Dim("Switch", 8, 100.0, 1000.0), 10, 0)
    # 8192 B over 2 hops at 107.374 B/ns: int(2000 + 76.29) = 2076; reduction without local
    # memory bandwidth: 3 x 10 ns.
    msg = 65536 // 8
    assert ctx.net(msg, 2) == 2076
    assert C.direct_reduce_scatter(8, 65536, ctx) == (2 * 10 + 2076 + 30, 8192)
    # the all-gather half leaves as the reduce-scatter half's packets come back: one delay less
    # (ASTRA-sim 518bd51, checked with bench/astra_parity.py)
    assert C.direct_all_reduce(8, 65536, ctx)[0] == (20 + 2076 + 30) + (10 + 2076)


def test_halving_doubling_by_hand():
    ctx = C.PhaseContext(Dim("FullyConnected", 4, 50.0, 500.0), 10, 1600)
    # reduce-scatter: messages of 128 KiB then 64 KiB, one hop each. As in ASTRA-sim's
    # HalvingDoubling, the first receive is reduced at the size of the packet it inserts next
    # (64 KiB), and the second starts a new cycle of log2(4) = 2 inserts, whose first is never
    # processed (checked against ASTRA-sim 518bd51 with bench/astra_parity.py)
    t1 = 10 + ctx.net(131072) + 3 * int(65536 / 1600)
    t2 = 10 + ctx.net(65536)
    assert C.hd_reduce_scatter(4, 262144, ctx) == (10 + t1 + t2, 65536)


def test_pipeline_of_chunks_through_dimensions():
    assert C.pipeline_ns([(0, 10)], chunks=4, active=1) == 40
    assert C.pipeline_ns([(0, 10)], chunks=4, active=2) == 20
    # dim 0 then dim 1: the second chunk's dim-0 phase overlaps the first one's dim-1 phase
    assert C.pipeline_ns([(0, 10), (1, 30)], chunks=2, active=1) == 10 + 30 + 30
    # both phases on one queue (RS and AG on the same dimension) share it, first come first
    # served: the second chunk's first phase (there at 0) goes before the first's second (at 10)
    assert C.pipeline_ns([(0, 10), (0, 10)], chunks=2, active=1) == 40
    # RS on dim 0 at 0-10 and 10-20; dim 1 at 10-40 and 40-70; AG on dim 0 at 40-50 and 70-80
    assert C.pipeline_ns([(0, 10), (1, 30), (0, 10)], chunks=2, active=1) == 80


def test_two_dimensional_all_reduce_localbwaware_by_hand():
    net = NetworkConfig((Dim("Ring", 4, 50.0, 500.0), Dim("Switch", 2, 25.0, 1000.0)))
    b = AnalyticalBackend(net, system_from_dict({**RING4x2, "endpoint-delay": 20}))
    size = 1 << 20
    chunk = size // 4
    # endpoint-delay on every dimension of the system's own topology (the 10 ns "fast" bus is
    # only for a communicator group's ring: test_endpoint_delay_is_the_configs_on_dimension_0)
    c0 = C.PhaseContext(net.dims[0], 20, 1600)
    c1 = C.PhaseContext(net.dims[1], 20, 1600)
    rs, after = C.ring_reduce_scatter(4, chunk, c0)
    ar, _ = C.ring_all_reduce(2, after, c1)
    ag, _ = C.ring_all_gather(4, after, c0)
    want = C.pipeline_ns([(0, rs), (1, ar), (0, ag)], chunks=4, active=1)
    assert b.collective_ns(CommType.ALL_REDUCE, size, list(range(8))) == want
    # baseline: a full all-reduce on each dimension in turn
    base = AnalyticalBackend(net, system_from_dict({**RING4x2, "collective-optimization": "baseline",
                                                    "endpoint-delay": 20}))
    a0, _ = C.ring_all_reduce(4, chunk, c0)
    a1, _ = C.ring_all_reduce(2, chunk, c1)
    assert base.collective_ns(CommType.ALL_REDUCE, size, list(range(8))) == C.pipeline_ns(
        [(0, a0), (1, a1)], 4, 1)


def test_groups_and_involved_dim_pick_the_dimensions():
    net = NetworkConfig((Dim("Ring", 4, 50.0, 500.0), Dim("Switch", 2, 25.0, 1000.0)))
    b = AnalyticalBackend(net, system_from_dict(RING4x2))
    assert b.group_dims(range(8), None) == [(0, 4), (1, 2)]
    assert b.group_dims([0, 1, 2, 3], None) == [(0, 4)]
    assert b.group_dims([1, 5], None) == [(1, 2)]
    assert b.group_dims(range(8), [False, True]) == [(1, 2)]
    # a group that is no sub-grid is one ring on its outermost dimension
    assert b.group_dims([0, 1, 5], None) == [(1, 3)]
    only_dim1 = b.collective_ns(CommType.ALL_REDUCE, 1 << 20, list(range(8)), [False, True])
    assert only_dim1 == b.collective_ns(CommType.ALL_REDUCE, 1 << 20, [0, 4])
    assert b.collective_ns(CommType.ALL_REDUCE, 1 << 20, [3]) == 0


def test_small_collectives_inflate_to_one_byte_per_npu_as_astra_sim():
    b = AnalyticalBackend(ring(4), system_from_dict(RING4))
    assert b.chunking(8, C.ALL_REDUCE) == (4, 4)
    assert b.chunking(1 << 20, C.ALL_REDUCE) == (1 << 18, 4)


def test_in_network_offload_is_one_trip_to_the_switch_and_back():
    net = NetworkConfig((Dim("Switch", 8, 50.0, 500.0, in_network_offload=True),))
    b = AnalyticalBackend(net, system_from_dict({**RING4, "preferred-dataset-splits": 1}))
    ctx = C.PhaseContext(net.dims[0], 10, 1600)
    assert b.collective_ns(CommType.ALL_REDUCE, 1 << 20, list(range(8))) == 2 * 10 + 2 * ctx.net(1 << 20, 1)
    plain = AnalyticalBackend(ring(8, topo="Switch"), system_from_dict({**RING4, "preferred-dataset-splits": 1}))
    assert plain.collective_ns(CommType.ALL_REDUCE, 1 << 20, list(range(8))) > b.collective_ns(
        CommType.ALL_REDUCE, 1 << 20, list(range(8)))


def test_p2p_uses_the_first_differing_dimension():
    net = NetworkConfig((Dim("Ring", 4, 50.0, 500.0), Dim("Switch", 2, 25.0, 1000.0)))
    b = AnalyticalBackend(net)
    assert net.address(5) == (1, 1)
    assert b.p2p_ns(0, 1, 65536) == 1720  # dim 0, one hop
    assert b.p2p_ns(0, 4, 65536) == int(2000 + 65536 / (25 * 2**30 / 1e9))  # dim 1: switch, 2 hops
    assert b.p2p_ns(0, 5, 65536) == 1720  # differs first in dim 0


def info(**kw):
    base = dict(id=1, name="x", type=4, duration_micros=3, is_cpu_op=False, num_ops=0, tensor_size=0,
                comm_type=None, comm_size=0, comm_src=None, comm_dst=None, comm_tag=None, pg_name="",
                involved_dim=None)
    return NodeInfo(**{**base, **kw})


def test_compute_measured_roofline_and_scales():
    sysc = system_from_dict({"peak-perf": 100, "local-mem-bw": 1000, "roofline-enabled": 1})
    b = AnalyticalBackend(ring(2), sysc)
    assert AnalyticalBackend(ring(2)).compute_ns(0, info()) == 3000
    assert AnalyticalBackend(ring(2)).compute_ns(0, info(duration_micros=0)) == 1
    # memory bound: intensity 10 flop/B * 1e12 B/s = 1e13 flop/s < 1e14 peak -> 1e9 flop in 100 us
    assert b.compute_ns(0, info(num_ops=10**9, tensor_size=10**8)) == 100_000
    # compute bound: intensity 1000 -> capped at 1e14 flop/s -> 10 us
    assert b.compute_ns(0, info(num_ops=10**9, tensor_size=10**6)) == 10_000
    half = AnalyticalBackend(ring(2), scales=Scales.parse("compute=0.5"))
    assert half.compute_ns(0, info()) == 1500
    assert half.compute_ns(0, info(is_cpu_op=True)) == 3000  # host not scaled


def test_memory_models():
    pool = AnalyticalBackend(ring(4), memory=memory_from_dict(
        {"memory-type": "MEMORY_POOL", "remote-mem-latency": 100, "remote-mem-bw": 10}))
    x = info(type=2, tensor_size=10_000)  # 100 + 10000/10 = 1100 ns
    assert pool.memory_ns(0, x, 0) == 1100
    assert pool.memory_ns(1, x, 0) == 2200  # one shared port: queued behind rank 0
    per_npu = AnalyticalBackend(ring(4), memory=memory_from_dict(
        {"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-latency": 100, "remote-mem-bw": 10}))
    assert per_npu.memory_ns(0, x, 0) == per_npu.memory_ns(1, x, 0) == 1100
    per_node = AnalyticalBackend(ring(4), memory=memory_from_dict(
        {"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-latency": 100, "remote-mem-bw": 10,
         "num-nodes": 2, "num-npus-per-node": 2}))
    assert [per_node.memory_ns(r, x, 0) for r in range(4)] == [1100, 2200, 1100, 2200]
    local = AnalyticalBackend(ring(4), system_from_dict({"local-mem-bw": 1000}))
    assert local.memory_ns(0, x, 5) == 5 + 10  # 10000 B at 1000 B/ns
    with pytest.raises(InputError, match="remote-mem-bw"):
        memory_from_dict({"memory-type": "MEMORY_POOL"})


def test_config_files_and_errors(shared_fixtures, tmp_path):
    cfg = shared_fixtures / "astra-sim" / "configs"
    net = load_network(cfg / "Ring_4npus.yml")
    assert net.npus == 4 and net.dims[0] == Dim("Ring", 4, 50.0, 500.0)
    sysc = load_system(cfg / "Ring_4chunks.json")
    assert (sysc.splits, sysc.active_chunks, sysc.collective_optimization) == (4, 1, "localBWAware")
    assert load_memory(cfg / "no_memory_expansion.json").memory_type == "NO_MEMORY_EXPANSION"
    with pytest.raises(InputError, match="unknown topology 'Torus'"):
        network_from_dict({"topology": ["Torus"], "npus_count": [4], "bandwidth": [1], "latency": [1]})
    with pytest.raises(InputError, match="missing key 'latency'"):
        network_from_dict({"topology": ["Ring"], "npus_count": [4], "bandwidth": [1]})
    with pytest.raises(InputError, match="unknown collective implementation"):
        system_from_dict({"all-reduce-implementation": ["magic"]})
    assert system_from_dict({"all-reduce-implementation": ["oneRing", "direct8"]}).algorithm("all-reduce", 1) == "direct"


def test_example_configs_load_and_cost_a_collective():
    from pathlib import Path

    cfg = Path(__file__).resolve().parents[2] / "examples" / "configs"
    net = load_network(cfg / "ring8_switch4.yml")
    assert net.npus == 32 and net.dims[1].in_network_offload
    b = AnalyticalBackend(net, load_system(cfg / "hierarchical_roofline.json"),
                          load_memory(cfg / "memory_per_node.json"))
    assert b.collective_ns(CommType.ALL_REDUCE, 64 << 20, list(range(32))) > 0
    assert b.roofline and b.compute_ns(0, info(num_ops=10**12, tensor_size=10**9)) > 0
    assert load_memory(cfg / "memory_pool.json").memory_type == "MEMORY_POOL"


def test_the_bundled_8_rank_examples_fit_their_network():
    """`make demo` replays the bundled 8-rank sets on ring4_switch2.yml: 8 NPUs over two levels, so a
    newcomer's first run warns of nothing (ring8_switch4's 32 NPUs left 24 without a file)."""
    from pathlib import Path

    from chakra_tools.replay import SystemSpec, replay_rankset

    root = Path(__file__).resolve().parents[2]
    net = root / "examples" / "configs" / "ring4_switch2.yml"
    assert load_network(net).npus == 8 and len(load_network(net).dims) == 2
    heard = []
    result = replay_rankset(root / "traces" / "examples" / "custom_ring_allreduce", SystemSpec(network=net),
                            on_warning=heard.append)
    assert heard == [] and result.makespan_ns > 0


def test_exact_duration_ns_attribute_wins_over_rounded_micros(tmp_path):
    """Converters round sub-microsecond work up to 1 µs and keep the exact time in `duration_ns`."""
    from chakra_tools.core.etwrite import write_trace
    from chakra_tools.core.model import Node, NodeType, make_attrs
    from chakra_tools.feed import ETFeeder

    path = tmp_path / "t.0.et"
    write_trace(path, [Node(1, "k", NodeType.COMP_NODE, duration_micros=1, attrs=make_attrs(duration_ns=250)),
                       Node(2, "h", NodeType.COMP_NODE, duration_micros=3)])
    f = ETFeeder(path)
    assert [f.info(i).duration_ns for i in (1, 2)] == [250, None]
    b = AnalyticalBackend(NetworkConfig((Dim("Ring", 4, 50.0, 500.0),)))
    assert b.compute_ns(0, f.info(1)) == 250
    assert b.compute_ns(0, f.info(2)) == 3000


def test_manifest_comparison_measures_the_aligned_window_of_the_job():
    from chakra_tools.replay.fidelity import compare_with_manifest

    result = {"ranks": [{"rank": 0, "finish_ns": 30}, {"rank": 1, "finish_ns": 40}]}
    man = {"captured_steps": [1, 2], "ranks": [
        {"rank": 0, "step_times_ns": [5, 10, 10], "step_starts_unix_ns": [0, 100, 112]},
        {"rank": 1, "step_times_ns": [5, 12, 9], "step_starts_unix_ns": [0, 103, 116]}]}
    cmp = compare_with_manifest(result, man)
    # window 100 .. 125 over 2 steps = 12.5 ns a step; makespan 40 / 2 steps = 20
    assert cmp["job"] == {"measured_ns": 12, "predicted_ns": 20, "error": 0.6}
    del man["ranks"][1]["step_starts_unix_ns"]
    assert "job" not in compare_with_manifest(result, man)


def test_endpoint_delay_is_the_configs_on_dimension_0():
    """ASTRA-sim charges `endpoint-delay` per packet on the system's own topology, dimension 0
    included (RingTopology::Dimension::NA takes the Usual memory bus); 518bd51 on one Switch of 4,
    64 KiB ring all-reduce, one chunk: 10,390 ns at 10, 10,495 at 25 (7 delays of 15 more)."""
    net = NetworkConfig((Dim("Switch", 4, 50.0, 700.0),))
    one = {**RING4, "preferred-dataset-splits": 1, "collective-optimization": "baseline"}
    at = {d: AnalyticalBackend(net, system_from_dict({**one, "endpoint-delay": d})).collective_ns(
        CommType.ALL_REDUCE, 65536, range(4)) for d in (10, 25)}
    assert at == {10: 10_390, 25: 10_495}


def test_direct_all_reduce_hands_on_per_packet_by_hand():
    """Direct all-reduce on a Ring of 4 (200 GB/s, 2,500 ns, endpoint 25 ns, local-mem-bw 50): the
    all-gather half's message to each peer leaves as one reduce-scatter packet has been reduced,
    so the farther peer's extra hop hides behind the nearer peers' reductions (518bd51: 25,741 ns;
    waiting for the farthest packet's reduction first would be 28,241)."""
    ctx = C.PhaseContext(Dim("Ring", 4, 200.0, 2500.0), 25, 50)
    msg = (1 << 20) // 4
    near, far = ctx.net(msg, 1), ctx.net(msg, 2)            # 3,720 and 6,220
    handled = 25 + near + 25 + ctx.reduce(msg)               # the nearer peers' packets: 19,496
    assert far + 25 + ctx.reduce(msg) > handled              # the farthest is handled later
    want = handled + far + 25                                # the 2-hop message sent at 19,496
    assert want == 25_741
    assert C.direct_all_reduce(4, 1 << 20, ctx) == (want, 1 << 20)
    # with cheap reductions every packet has come before the first is handled: as before
    cheap = C.PhaseContext(Dim("Ring", 4, 200.0, 2500.0), 25, 1600)
    assert C.direct_all_reduce(4, 1 << 20, cheap)[0] == 25 + far + 25 + cheap.reduce(msg) + far + 25 == 13_004


def test_a_short_implementation_list_spans_only_its_dimensions():
    """ASTRA-sim builds a collective's logical topology from its implementation list, one
    dimension per entry: Ring_4chunks.json's one entry on a 2-D network runs a collective over
    every NPU on dimension 0 alone (518bd51, Ring 4 x Switch 2, 1 MiB all-reduce skewed
    0/2/0/9/40/0/0/1 us: 46,840..52,000 on ranks 0-3, 77,840..83,000 on 4-7, as with
    involved_dim [true, false]). Our own default (no system JSON) spans every dimension."""
    net = NetworkConfig((Dim("Ring", 4, 50.0, 500.0), Dim("Switch", 2, 25.0, 1000.0)))
    one = AnalyticalBackend(net, system_from_dict(RING4, "Ring_4chunks.json"))
    ring0 = one.collective_ns(CommType.ALL_REDUCE, 1 << 20, list(range(8)), [True, False])
    assert one.collective_ns(CommType.ALL_REDUCE, 1 << 20, list(range(8))) == ring0 == 43_000
    assert one.collective_ns(CommType.ALL_REDUCE, 1 << 20, list(range(8))) < AnalyticalBackend(
        net, system_from_dict(RING4x2)).collective_ns(CommType.ALL_REDUCE, 1 << 20, list(range(8)))
    assert "name 1 of the network's 2 dimensions" in " ".join(one.notes())
    # a group smaller than the system keeps the one entry for its own ring
    assert one.collective_ns(CommType.ALL_REDUCE, 1 << 20, [0, 4]) > 0
    default = AnalyticalBackend(net)
    assert default.notes() == []
    assert default.collective_ns(CommType.ALL_REDUCE, 1 << 20, list(range(8))) > default.collective_ns(
        CommType.ALL_REDUCE, 1 << 20, list(range(8)), [True, False])


@pytest.mark.parametrize("n, hops, period", [(4, None, 1), (64, None, 1), (6, {(5, 0): 3}, 1), (12, None, 2),
                                             (12, None, 3), (12, None, 12), (8, {(7, 0): 2}, 2)])
def test_a_ring_phase_whose_starts_repeat_takes_what_the_step_by_step_loop_takes(n, hops, period):
    """Members whose starts repeat every p on links of one time keep the pattern (computed for p
    members, `steps._periodic`); one longer link (a ring closing over more hops) breaks it, and then
    the loop runs."""
    from chakra_tools.replay.config import Dim

    ctx = C.PhaseContext(Dim("Switch", n, 50.0, 500.0), delay_ns=10, local_mem_bw_gbps=1600)
    steps, _ = S.ring_reduce_scatter_steps(n, 1 << 20, ctx)
    link = lambda j, i, m: ctx.net(m, (hops or {}).get((j, i), 1))  # noqa: E731
    starts = [100 + 37 * (i % period) for i in range(n)]
    got = S.staggered_phase(starts, steps, ctx, link)
    ready = list(starts)  # the general loop, written out
    for s in steps:
        sent = [t + s.pre_ns for t in ready]
        ready = [max(sent[i], sent[(i - 1) % n] + link((i - 1) % n, i, s.msg)) + s.post_ns for i in range(n)]
    assert got == ready
    assert (len(set(got)) == 1) == (hops is None and period == 1)
