"""Staggered collectives: a member that arrives early goes through the collective's steps as its
peers' messages come in (ASTRA-sim's behaviour), against times computed by hand.

Every case: 4 NPUs on one Ring dimension (50 GB/s = 53.6870912 B/ns, 500 ns per hop), endpoint
delay d = 10 ns, local memory 1600 GB/s, one chunk, 262,144 bytes; ranks 0-2 arrive at 0 and
rank 3 at 10,000 ns. A message of m bytes over h hops takes int(h * 500 + m / 53.687...) ns:
64 KiB over 1 hop 1720, over 2 hops 2220; 128 KiB over 1 hop 2941. Reducing m bytes costs
3 * int(m / 1600): 120 ns for 64 KiB. Each per-rank time below was also checked against
ASTRA-sim 518bd51's own on such workloads (bench/astra_parity.py, docs/validation.md).

The rule of each step (collectives.staggered_phase): a rank waits `pre`, sends, its receive from
each peer completes at max(its own send, the peer's send + transfer), then it spends `post`.
"""

from __future__ import annotations

import pytest

from chakra_tools.core.model import CommType
from chakra_tools.replay import collectives as C
from chakra_tools.replay import steps as S
from chakra_tools.replay.backend import AnalyticalBackend
from chakra_tools.replay.config import Dim, NetworkConfig, SystemConfig

from _util import coll, comp, events, run

SIZE = 262_144
ARRIVALS = [0, 0, 0, 10_000]


def backend(algorithm: str, net: NetworkConfig | None = None) -> AnalyticalBackend:
    impl = {k: (algorithm,) for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}
    return AnalyticalBackend(net or NetworkConfig((Dim("Ring", 4, 50.0, 500.0),)),
                             SystemConfig(implementations=impl, local_mem_bw_gbps=1600))


def test_ring_all_reduce_with_a_late_rank_by_hand(tmp_path):
    """Ring all-reduce: 6 steps of 64 KiB from the predecessor (rank i-1); pre d = 10 before the
    first; post d + 120 after receives 1-3 (reduce-scatter half), d after 4-6. Per step, sends
    then ends (end = max(own send, predecessor's send + 1720) + post):

        step  sends (r0, r1, r2, r3)       ends
        1     10, 10, 10, 10010            11860, 1860, 1860, 10140
        2     11860, 1860, 1860, 10140     11990, 13710, 3710, 10270
        3     11990, 13710, 3710, 10270    12120, 13840, 15560, 10400
        4     12120, 13840, 15560, 10400   12130, 13850, 15570, 17290
        5     12130, 13850, 15570, 17290   19020, 13860, 15580, 17300
        6     19020, 13860, 15580, 17300   19030, 20750, 15590, 17310

    Rank 1 ends as everyone would from 10,000 (7 * 10 + 6 * 1720 + 3 * 120 = 10,750 later);
    the others end earlier, each by how far its chain of messages ran ahead.
    """
    want = [19_030, 20_750, 15_590, 17_310]
    be = backend("ring")
    assert be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3], None, ARRIVALS) == want
    assert 10_000 + be.collective_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3]) == max(want)
    # the same through the replayer: rank 3 computes 10 µs first
    ranks = {0: [coll(2, SIZE)], 1: [coll(2, SIZE)], 2: [coll(2, SIZE)],
             3: [comp(1, us=10), coll(2, SIZE, deps=(1,))]}
    ev = events(run(tmp_path, ranks, be=be))
    assert [ev[(r, 2)] for r in range(4)] == [(0, 19_030), (0, 20_750), (0, 15_590), (10_000, 17_310)]


def test_direct_all_reduce_with_a_late_rank_by_hand():
    """Direct all-reduce: two steps with every peer (1 hop to i±1: 1720; 2 hops to i+2: 2220);
    pre d before the first, none before the second (it leaves as the first's packets come
    back); post d + 120 (reduce-scatter), then d (all-gather).

        step 1: sends 10, 10, 10, 10010; last arrivals r0 11730 (from r3), r1 12230 (r3, 2 hops),
                r2 11730, r3 its own send 10010 -> ends 11860, 12360, 11860, 10140
        step 2: sends 11860, 12360, 11860, 10140; r0: max(12360+1720, 11860+2220, 10140+1720)
                = 14080 -> 14090; r1: 13580 -> 13590; r2: 14080 -> 14090; r3: 12360+2220 = 14580
                -> 14590 (= 10000 + 2 * (2 * 10 + 2220) + 120 - 10, the symmetric time)
    """
    be = backend("direct")
    got = be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3], None, ARRIVALS)
    assert got == [14_090, 13_590, 14_090, 14_590]
    assert 10_000 + be.collective_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3]) == 14_590


def test_halving_doubling_all_reduce_with_a_late_rank_by_hand():
    """Halving-doubling all-reduce: partners i^1 (128 KiB, 2941 ns), i^2 (64 KiB, 2 hops, 2220),
    i^2 (64 KiB, 2220), i^1 (128 KiB, 2941); pre d before the first; post d + 120 after the
    first receive (ASTRA-sim reduces it at the size of the packet it inserts next, 64 KiB) and
    d after the others (in cycles of log2(4) = 2 inserts only the second of the first is processed).

        step 1: sends 10, 10, 10, 10010 -> ends 3081, 3081, 13081, 10140
        step 2: r0 waits for r2 (13081 + 2220) -> 15311; r1 for r3 (10140 + 2220) -> 12370;
                r2 13091; r3 10150
        step 3: r0 15321, r1 12380, r2 15311 + 2220 -> 17541, r3 12370 + 2220 -> 14600
        step 4: r0 15331, r1 15321 + 2941 -> 18272, r2 17551, r3 17541 + 2941 -> 20492
    """
    be = backend("halvingDoubling")
    got = be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3], None, ARRIVALS)
    assert got == [15_331, 18_272, 17_551, 20_492]
    assert 10_000 + be.collective_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3]) == 20_492


def test_double_binary_tree_per_rank_by_hand():
    """ASTRA-sim's double binary tree, one chunk of 256 KiB through the RootMax tree of 4: top 3,
    its one child 1, whose children are the leaves 0 and 2 (ranks in order under the top).
    Messages carry the whole chunk: 1 hop 5382 ns, 2 hops (1 <-> 3) 5882; reduction
    3 * int(262144 / 1600) = 489.

        leaves 0, 2 send up at d = 10; rank 1 receives both at 10 + 5382 = 5392, sends up at
        5392 + 10 + 489 = 5891; the top receives at 5891 + 5882 = 11773 and sends down at
        11773 + 499 = 12272 (its end); rank 1 receives at 18154, sends down and ends at 18653;
        the leaves receive at 18653 + 5382 = 24035 and end at 24045.

    Rank 3, 10 µs late, is the top: it posts its receive at 10,000, before its child's message
    arrives, so its lateness changes nothing.
    """
    want = [24_045, 18_653, 24_045, 12_272]  # each backend's first collective: the RootMax tree
    assert backend("doubleBinaryTree").collective_finish_ns(
        CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3], None, [0] * 4) == want
    assert backend("doubleBinaryTree").collective_finish_ns(
        CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3], None, ARRIVALS) == want
    assert backend("doubleBinaryTree").collective_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3]) == max(want)


KINDS = (CommType.ALL_REDUCE, CommType.REDUCE_SCATTER, CommType.ALL_GATHER, CommType.ALL_TO_ALL)


@pytest.mark.parametrize("algorithm", ["ring", "direct", "halvingDoubling"])
@pytest.mark.parametrize("topology", ["Ring", "Switch", "FullyConnected"])
def test_equal_arrivals_step_models_agree_with_the_phase_formulas(algorithm, topology):
    """The step models are the phase formulas step by step: with everyone at once they agree,
    on every kind, per dimension and through chunks over two dimensions."""
    for n in (2, 4, 8):
        ctx = C.PhaseContext(Dim(topology, n, 50.0, 500.0), 10, 1600)
        for coll_name in (C.ALL_REDUCE, C.REDUCE_SCATTER, C.ALL_GATHER, C.ALL_TO_ALL):
            steps, out = S.steps_fn(coll_name, algorithm)(n, 1 << 20, ctx)
            ns, want_out = C.phase_fn(coll_name, algorithm, topology)(n, 1 << 20, ctx)
            assert S.staggered_phase([5] * n, steps, ctx) == [5 + ns] * n and out == want_out
    net = NetworkConfig((Dim(topology, 4, 50.0, 500.0), Dim("Switch", 2, 25.0, 700.0)))
    be = backend(algorithm, net)
    be.system = SystemConfig(implementations=be.system.implementations, local_mem_bw_gbps=1600,
                             splits=4, collective_optimization="localBWAware")
    for kind in KINDS:
        stagger = be._staggered(int(kind), 1 << 20, tuple(range(8)), None, (0,) * 8)
        assert stagger == [be.collective_ns(kind, 1 << 20, list(range(8)))] * 8


def test_skewed_two_dimensional_collective_ends_no_later_than_together():
    """Over two dimensions and four chunks, each member ends no later than if everyone had
    started at the last arrival, and the last to arrive ends exactly then or earlier."""
    net = NetworkConfig((Dim("Ring", 4, 50.0, 500.0), Dim("Switch", 2, 25.0, 700.0)))
    be = backend("ring", net)
    be.system = SystemConfig(implementations=be.system.implementations, local_mem_bw_gbps=1600, splits=4)
    arrivals = [0, 3000, 0, 0, 9000, 0, 500, 0]
    together = 9000 + be.collective_ns(CommType.ALL_REDUCE, 1 << 20, list(range(8)))
    got = be.collective_finish_ns(CommType.ALL_REDUCE, 1 << 20, list(range(8)), None, arrivals)
    assert max(got) <= together and min(got) < together
    assert all(g >= a for g, a in zip(got, arrivals))


def test_double_binary_tree_alternates_its_trees_across_collectives():
    """ASTRA-sim's tree counter runs on from one collective to the next: with one chunk each, the
    second all-reduce of a group takes the RootMin tree (top 0, its child 2 over the leaves 1 and
    3), the mirror of the first's: the same times, by position in the other tree."""
    be = backend("doubleBinaryTree")
    first = be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3], None, [0] * 4)
    second = be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3], None, [0] * 4)
    assert first == [24_045, 18_653, 24_045, 12_272]
    assert second == [12_272, 24_045, 18_653, 24_045]
    assert be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3], None, [0] * 4) == first


def test_a_groups_ring_follows_the_comm_group_files_order(tmp_path):
    """ASTRA-sim's ring over a communicator group is the members in comm_group.json's order
    (RingTopology over `involved_NPUs`), not in rank order. On a Ring of 8 (50 GB/s, 500 ns,
    one chunk, 1 MiB all-reduce, ring algorithm), the group [0, 2, 1, 3] has links of 2, 1, 2 and
    3 hops where [0, 1, 2, 3] has 1, 1, 1 and 3: 518bd51 ends ranks 0-3 at 37,329 / 36,329 /
    37,329 / 36,329 ns against 35,829 / 35,829 / 34,829 / 34,829 in rank order."""
    be = AnalyticalBackend(NetworkConfig((Dim("Ring", 8, 50.0, 500.0),)),
                           SystemConfig(collective_optimization="localBWAware", local_mem_bw_gbps=1600))
    ends = {}
    for order in ([0, 1, 2, 3], [0, 2, 1, 3]):
        groups = {"1": order, "2": [4, 5, 6, 7]}
        ranks = {r: [coll(1, 1 << 20, pg="1" if r < 4 else "2")] for r in range(8)}
        ev = events(run(tmp_path / "".join(map(str, order)), ranks, groups, be))
        ends[tuple(order)] = [ev[(r, 1)][1] for r in range(4)]
    assert ends[(0, 1, 2, 3)] == [35_829, 35_829, 34_829, 34_829]
    assert ends[(0, 2, 1, 3)] == [37_329, 36_329, 37_329, 36_329]


def test_direct_all_reduce_sends_its_second_half_per_free_packet(tmp_path):
    """ASTRA-sim's direct all-reduce (AllToAll) sends each all-gather message on a packet-handled
    event once every reduce-scatter message has come, and a fast peer's all-gather message
    handled early frees a send before the member's own slow reductions end. FullyConnected 4
    (100 GB/s, 100 ns), endpoint delay 10 ns, local-mem-bw 50 (a 15.7 us reduction per 256 KiB
    message), 3 MiB in 3 chunks, ranks arriving at 3/0/0/2 us: 518bd51 ends every rank at
    65,065 ns (waiting for the member's own reductions first gave 65,514)."""
    impl = {k: ("direct",) for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}
    be = AnalyticalBackend(NetworkConfig((Dim("FullyConnected", 4, 100.0, 100.0),)),
                           SystemConfig(implementations=impl, splits=3, local_mem_bw_gbps=50))
    skew = [3, 0, 0, 2]
    ranks = {r: ([comp(1, skew[r]), coll(2, 3 << 20, (1,))] if skew[r] else [coll(2, 3 << 20)]) for r in range(4)}
    ev = events(run(tmp_path, ranks, None, be))
    assert [ev[(r, 2)][1] for r in range(4)] == [65_065] * 4
