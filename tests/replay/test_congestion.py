"""The congestion-aware network model: links as queues, hand-computed contention, ASTRA-sim's
congestion_aware results, and the model through `trace-replay`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from chakra_tools.cli.replay import app as replay_app
from chakra_tools.core.model import CommType
from chakra_tools.replay import AnalyticalBackend, Dim, NetworkConfig, SystemConfig, SystemSpec, replay_rankset
from chakra_tools.replay.api import open_rankset
from chakra_tools.replay.congestion import CongestionAware
from chakra_tools.replay.engine import Replayer
from chakra_tools.replay.linknet import Edge, of_edges, of_network, run_alone
from chakra_tools.replay.timing import Staggered

from _util import coll, comp, recv, ring_net, send, write_rankset

MIB = 1 << 20
GIB_PER_S = (1 << 30) / 1e9  # bytes per ns of 1 GB/s as ASTRA-sim reads it


def finishes(tmp_path, ranks, net, system=SystemConfig(), groups=None, aware=True):
    prefix = write_rankset(tmp_path, ranks, groups)
    feeders, g = open_rankset(prefix)
    be = AnalyticalBackend(net, system, links=of_network(net) if aware else None)
    timing = CongestionAware(be, be.links) if aware else Staggered(be)
    result = Replayer(feeders, timing, groups=g).run()
    return [r["finish_ns"] for r in result.ranks], result


# -- the link queue, by hand ------------------------------------------------------------------------
def test_a_message_alone_takes_the_sum_of_its_hops():
    net = of_network(ring_net(4, topo="Switch"))
    hop = int(500 + MIB / (50 * GIB_PER_S))  # latency + serialization, truncated as ASTRA-sim does
    assert run_alone(net, [(0, 0, 3, MIB)]) == [2 * hop]


def test_two_messages_on_one_link_take_twice_as_long():
    """0->2 and 1->2 meet on the switch's link to NPU 2: the second waits there for the first's
    serialization, so its last byte arrives one serialization later."""
    net = of_network(ring_net(4, topo="Switch"))
    ser = int(MIB / (50 * GIB_PER_S))
    hop = int(500 + MIB / (50 * GIB_PER_S))
    first, second = run_alone(net, [(0, 0, 2, MIB), (0, 1, 2, MIB)])
    assert first == 2 * hop
    assert second == hop + ser + hop  # reached the switch together, left it one serialization later
    # on links of their own (a FullyConnected) neither waits
    fc = of_network(ring_net(4, topo="FullyConnected"))
    assert run_alone(fc, [(0, 0, 2, MIB), (0, 1, 2, MIB)]) == [hop, hop]


def test_a_ring_sends_the_shorter_way_and_clockwise_on_a_tie():
    net = of_network(ring_net(6))
    assert net.route(0, 2) == [0, 1, 2]
    assert net.route(0, 4) == [0, 5, 4]
    assert net.route(0, 3) == [0, 1, 2, 3]


def test_several_dimensions_are_crossed_innermost_first():
    net = of_network(NetworkConfig((Dim("Ring", 2, 50.0, 500.0), Dim("Switch", 2, 25.0, 1000.0))))
    assert [net.name(d) for d in net.route(0, 3)] == ["npu 0", "npu 1", "switch 1.1", "npu 3"]


# -- an oversubscribed uplink ----------------------------------------------------------------------
def clos(uplink_gbit: float) -> list[Edge]:
    """Two racks of 4 NPUs, each NPU at 100 Gbit/s to its leaf, each leaf to one spine."""
    edges = [Edge(f"npu{r * 4 + i}", f"leaf{r}", 12.5, 100.0) for r in range(2) for i in range(4)]
    return edges + [Edge(f"leaf{r}", "spine", uplink_gbit / 8, 100.0) for r in range(2)]


def test_an_oversubscribed_uplink_shows_in_messages_across_racks():
    """Four NPUs of rack 0 each send 1 MiB to their peer in rack 1 at once. With a 400 Gbit/s
    uplink (no oversubscription) the four share it at a quarter of the time each; at 100 Gbit/s
    (4:1) each waits for the ones ahead of it on the uplink at the NPU links' own rate."""
    msgs = [(0, i, 4 + i, MIB) for i in range(4)]
    npus = [f"npu{i}" for i in range(8)]
    npu_hop = int(100 + MIB / 12.5)
    full = max(run_alone(of_edges(npus, clos(400)), msgs))
    over = max(run_alone(of_edges(npus, clos(100)), msgs))
    # 4:1: the uplink serializes the four one after another at 12.5 B/ns; the last then goes on
    # over the spine's link to leaf 1 and leaf 1's link to its NPU, each one NPU-link hop
    assert over == npu_hop + 3 * int(MIB / 12.5) + npu_hop + npu_hop + npu_hop
    up_hop, up_ser = int(100 + MIB / 50), int(MIB / 50)
    assert full == npu_hop + 3 * up_ser + up_hop + up_hop + npu_hop
    assert over > full


def test_equal_paths_spread_over_spines_and_the_same_pair_keeps_its_path():
    edges = [Edge(f"npu{i}", f"leaf{i // 2}", 12.5, 0.0) for i in range(4)]
    edges += [Edge(f"leaf{l}", f"spine{s}", 12.5, 0.0) for l in range(2) for s in range(2)]
    net = of_edges([f"npu{i}" for i in range(4)], edges)
    spines = {net.name(net.route(s, d)[2]) for s, d in ((0, 2), (0, 3), (1, 2), (1, 3))}
    assert spines == {"spine0", "spine1"}
    assert net.route(0, 3) == net.route(0, 3)


# -- collectives against ASTRA-sim's congestion_aware backend ----------------------------------------
@pytest.mark.parametrize("kind, astra_sim_ns", [(CommType.ALL_REDUCE, 336_796), (CommType.ALL_TO_ALL, 659_944)])
def test_switch_collectives_equal_astra_sims_congestion_aware_backend(tmp_path, shared_fixtures, kind, astra_sim_ns):
    """REFERENCE §4: ASTRA-sim 518bd51 congestion_aware, 8-NPU Switch at 50 GB/s and 500 ns,
    Ring_4chunks.json, one 4 MiB collective per rank."""
    from chakra_tools.replay import load_system

    system = load_system(shared_fixtures / "astra-sim/configs/Ring_4chunks.json")
    ends, _ = finishes(tmp_path, {r: [coll(1, 4 * MIB, kind=kind)] for r in range(8)},
                       ring_net(8, topo="Switch"), system)
    assert ends == [astra_sim_ns] * 8


@pytest.mark.parametrize("topo", ["Ring", "FullyConnected"])
@pytest.mark.parametrize("kind", [CommType.ALL_REDUCE, CommType.ALL_GATHER, CommType.REDUCE_SCATTER,
                                  CommType.ALL_TO_ALL])
def test_one_collective_on_its_own_links_costs_what_it_does_congestion_unaware(tmp_path, topo, kind):
    """A ring's messages never meet on a Ring's or FullyConnected's links when every member
    starts together: the two models agree to the ns (as ASTRA-sim's two backends do)."""
    ranks = {r: [coll(1, 4 * MIB, kind=kind)] for r in range(8)}
    system = SystemConfig(splits=4)
    aware, _ = finishes(tmp_path / "a", ranks, ring_net(8, topo=topo), system)
    unaware, _ = finishes(tmp_path / "u", ranks, ring_net(8, topo=topo), system, aware=False)
    assert aware == unaware


def test_two_groups_on_one_switch_share_nothing_but_their_links(tmp_path):
    """Groups {0,1} and {2,3} all-reduce at once on a 4-NPU Switch: every NPU has its own link
    to the switch, so each group takes what it takes alone."""
    ranks = {r: [coll(1, MIB, pg="1" if r < 2 else "2")] for r in range(4)}
    groups = {"1": [0, 1], "2": [2, 3]}
    both, _ = finishes(tmp_path / "b", ranks, ring_net(4, topo="Switch"), groups=groups)
    alone, _ = finishes(tmp_path / "a", {0: ranks[0], 1: ranks[1]}, ring_net(4, topo="Switch"), groups={"1": [0, 1]})
    assert both[:2] == alone and both[2:] == alone


def test_a_4_to_1_uplink_slows_all_reduces_across_racks(tmp_path):
    """Four data-parallel pairs (i, i+4) all-reduce across two racks at once: every step, each
    rack's four messages take its uplink one after another. At 100 Gbit/s (4:1 oversubscribed)
    the last of them waits three NPU-link serializations there, at 400 Gbit/s three quarter-ones:
    each of the ring's two steps is then at least 3 x (S/12.5 - S/50) ns longer."""
    from chakra_tools.replay.spec import graph_dims

    groups = {str(i + 1): [i, i + 4] for i in range(4)}
    ranks = {r: [coll(1, MIB, pg=str(r % 4 + 1))] for r in range(8)}
    prefix = write_rankset(tmp_path, ranks, groups)
    npus = [f"npu{i}" for i in range(8)]
    makespan = {}
    for uplink in (400, 100):
        links = of_edges(npus, clos(uplink))
        be = AnalyticalBackend(graph_dims(links), SystemConfig(splits=1), links=links)
        feeders, g = open_rankset(prefix)
        result = Replayer(feeders, CongestionAware(be, links), groups=g).run()
        makespan[uplink] = result.makespan_ns
        busiest = result.config["links_busy"][0]
        if uplink == 100:  # the uplinks carry four NPUs' bytes at one NPU link's rate: the busiest
            assert "spine" in (busiest["from"], busiest["to"])
    step_message = MIB // 2
    assert makespan[100] - makespan[400] >= 2 * 3 * (int(step_message / 12.5) - int(step_message / 50))


def test_sends_queue_on_a_shared_link_and_receives_wait_for_them(tmp_path):
    """Ranks 0 and 1 each send 1 MiB to rank 2 through a Switch: rank 2's second receive ends
    one serialization after its first."""
    ranks = {0: [send(1, 2, MIB, tag=1)], 1: [send(1, 2, MIB, tag=2)],
             2: [recv(1, 0, MIB, tag=1), recv(2, 1, MIB, tag=2)], 3: [comp(1)]}
    ends, result = finishes(tmp_path, ranks, ring_net(4, topo="Switch"))
    hop, ser = int(500 + MIB / (50 * GIB_PER_S)), int(MIB / (50 * GIB_PER_S))
    by_node = {(result.ev_rank[i], result.ev_node[i]): result.ev_end[i] for i in range(len(result.ev_node))}
    assert sorted([by_node[(2, 1)], by_node[(2, 2)]]) == [2 * hop, hop + ser + hop]


def test_skewed_members_queue_their_own_messages_as_astra_sim_does(tmp_path):
    """Members arrive 0, 3, 1 and 7 us late to a 1 MiB then a 256 KiB ring all-reduce on a
    4-NPU FullyConnected (4 chunks, endpoint delay 10): an early member whose predecessor's
    messages are already there sends its next one while its last is still on the link, and it
    queues. ASTRA-sim 518bd51's two backends on these files (run.sh aware|unaware, the
    workload this test writes, the system below): congestion_aware [68430, 68940, 69450, 69960],
    congestion_unaware [67545, 68350, 69155, 69960]."""
    system = SystemConfig(splits=4, active_chunks=1, endpoint_delay_ns=10, local_mem_bw_gbps=1600,
                          collective_optimization="localBWAware",
                          implementations={c: ("ring",) for c in ("all-reduce", "all-gather", "reduce-scatter",
                                                                  "all-to-all")})
    ranks = {r: [comp(1, us=[0, 3, 1, 7][r]), coll(2, MIB, deps=(1,)), coll(3, MIB // 4, deps=(2,))] for r in range(4)}
    net = ring_net(4, topo="FullyConnected")
    aware, _ = finishes(tmp_path / "a", ranks, net, system)
    unaware, _ = finishes(tmp_path / "u", ranks, net, system, aware=False)
    assert aware == [68430, 68940, 69450, 69960]
    assert unaware == [67545, 68350, 69155, 69960]


# -- through trace-replay ----------------------------------------------------------------------------
def test_trace_replay_network_model_congestion_aware(tmp_path):
    prefix = write_rankset(tmp_path / "set", {r: [coll(1, 4 * MIB)] for r in range(8)})
    (tmp_path / "sw.yml").write_text("topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    runner = CliRunner()
    out = {}
    for model in ("congestion-unaware", "congestion-aware"):
        res = runner.invoke(replay_app, [str(prefix), "--network", str(tmp_path / "sw.yml"), "--network-model", model,
                                         "--json"])
        assert res.exit_code == 0, res.output
        out[model] = json.loads(res.stdout)["makespan_ns"]
    assert out["congestion-aware"] > out["congestion-unaware"]
    bad = runner.invoke(replay_app, [str(prefix), "--network-model", "congested"])
    assert bad.exit_code != 0 and "congestion-aware" in bad.output


def test_congestion_aware_takes_a_captures_timeline_with_communication_from_the_links(tmp_path):
    """`--as-captured --comm model`: the capture's skew and host timeline, communication on the
    links; the record's communication (--comm calibrated) cannot be re-timed on them: refused."""
    from chakra_tools.core.errors import InputError
    from chakra_tools.replay import AS_CAPTURED

    # rank 1 began its traced step 40 us after rank 0, as recorded
    ranks = {r: [comp(1, us=10, start=100 + 40 * r), coll(2, MIB, deps=(1,), start=110 + 40 * r, us=60)]
             for r in range(2)}
    prefix = write_rankset(tmp_path, ranks)
    spec = SystemSpec(network_model="congestion-aware")
    with pytest.raises(InputError, match="add --comm model"):
        replay_rankset(prefix, spec, modes=AS_CAPTURED)
    modelled = replay_rankset(prefix, spec)
    captured = replay_rankset(prefix, spec, modes=AS_CAPTURED.merged_with(comm="model"))
    assert captured.config["network_model"] == "congestion-aware"
    assert captured.makespan_ns == modelled.makespan_ns + 40_000  # the all-reduce waits for rank 1's start


def test_several_dimensions_with_queued_chunks_fall_back_and_say_so(tmp_path):
    """Chunks waiting for slots on several dimensions: each member grants its slots in the order
    chunks reach it, which can make two chunks wait for each other (a random 3-dimension case
    deadlocked so); such a collective is timed congestion-unaware, and the replay says so."""
    net = NetworkConfig((Dim("Switch", 4, 200.0, 2500.0), Dim("Ring", 2, 100.0, 100.0)))
    system = SystemConfig(splits=4, active_chunks=1, collective_optimization="localBWAware")
    ranks = {r: [comp(1, us=r % 3), coll(2, MIB, deps=(1,))] for r in range(8)}
    aware, result = finishes(tmp_path / "a", ranks, net, system)
    unaware, _ = finishes(tmp_path / "u", ranks, net, system, aware=False)
    assert aware == unaware
    assert any(d.code == "congestion-unaware-phase" and "2-dimension" in d.message for d in result.diagnostics)


@pytest.mark.parametrize("topo", ["Switch", "Ring", "FullyConnected"])
@pytest.mark.parametrize("algorithm", ["ring", "halvingDoubling", "direct"])
def test_the_compiled_loop_equals_the_python_reference(tmp_path, monkeypatch, topo, algorithm):
    """`_linkloop` (C) against `_Steps` and `LinkStateTwin` (Python) on the same inputs: skewed
    members, two groups sharing links, four chunks two at a time, sends: every rank's finish and
    every link's use equal."""
    from chakra_tools.replay import congestion, linknet

    if linknet.COMPILED is None:
        pytest.skip("the compiled loop is not built (no C compiler, or CHAKRA_TOOLS_PURE_PYTHON)")
    system = SystemConfig(splits=4, active_chunks=2, endpoint_delay_ns=10, local_mem_bw_gbps=1600,
                          implementations={c: (algorithm,) for c in ("all-reduce", "all-gather", "reduce-scatter",
                                                                     "all-to-all")})
    groups = {"1": [0, 2, 4, 6], "2": [1, 3, 5, 7]}
    ranks = {r: [comp(1, us=(3 * r) % 7), coll(2, MIB, deps=(1,), kind=CommType.ALL_GATHER),
                 coll(3, MIB // 2, deps=(2,), pg="1" if r % 2 == 0 else "2"),
                 send(4, (r + 1) % 8, 1 << 16, tag=r, deps=(3,)), recv(5, (r - 1) % 8, 1 << 16, tag=(r - 1) % 8),
                 coll(6, MIB, deps=(4, 5), kind=CommType.REDUCE_SCATTER)] for r in range(8)}
    compiled, result_c = finishes(tmp_path / "c", ranks, ring_net(8, topo=topo), system, groups=groups)
    monkeypatch.setattr(linknet, "COMPILED", None)
    monkeypatch.setattr(congestion, "COMPILED", None)
    python, result_p = finishes(tmp_path / "p", ranks, ring_net(8, topo=topo), system, groups=groups)
    assert compiled == python
    assert result_c.config["links_busy"] == result_p.config["links_busy"]


def test_a_receive_at_the_instant_a_packet_is_handled_counts_first(tmp_path):
    """A direct all-reduce of 4 KiB on an 8-NPU Switch (100 GB/s, 500 ns; endpoint delay 1,
    4 chunks): its 128-byte messages and 1 ns delays make receives and handled packets meet at
    the same ns, where ASTRA-sim counts the receive first (collectives._per_packet_phase's order).
    ASTRA-sim 518bd51 congestion_aware on the files this test writes: 8,072 ns on every rank
    (a random case of bench/astra_parity.py, seed 5096, where this was 8,076 before)."""
    system = SystemConfig(splits=4, active_chunks=1, endpoint_delay_ns=1, local_mem_bw_gbps=1600,
                          collective_optimization="localBWAware",
                          implementations={c: ("direct",) for c in ("all-reduce", "all-gather", "reduce-scatter",
                                                                    "all-to-all")})
    ends, _ = finishes(tmp_path, {r: [coll(1, 4096)] for r in range(8)},
                       NetworkConfig((Dim("Switch", 8, 100.0, 500.0),)), system)
    assert ends == [8072] * 8
