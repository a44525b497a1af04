"""The double binary tree beyond one dimension, against times computed by hand.

ASTRA-sim 518bd51 runs DoubleBinaryTreeAllReduce for *every* phase on a dimension whose
implementation is doubleBinaryTree (a reduce-scatter or all-gather phase is a whole all-reduce of
the phase's data, which keeps its size), picks a phase's implementation from its collective's list
(an all-reduce's reduce-scatter phase uses all-reduce-implementation), and alternates the two
trees of a dimension by a counter that every phase created there advances. Each time below was
also checked against the built binary (bench/astra_parity.py: "4x2 ring+switch doubleBinaryTree").

Every case: a 2x2 system, two Ring dimensions of 2 NPUs (50 GB/s = 53.6870912 B/ns, 500 ns per
hop), endpoint delay d = 10 ns on both, local memory 1600 GB/s, one chunk of 262,144 bytes. Rank r
sits at (r % 2, r // 2): along dimension 0 the pairs {0, 1} and {2, 3}, along dimension 1 {0, 2}
and {1, 3}; a pair's position is the coordinate. A message takes int(500 + 262144 / 53.687...) =
5382 ns, a reduction 3 * int(262144 / 1600) = 489.

A tree of 2 is a top and one leaf (RootMax: top at position 1; RootMin: position 0). The leaf
sends up at start + d; the top receives at max(its start, that + 5382), ends d + 489 later and
sends down; the leaf ends d after receiving that (a receive completes at max(posted, arrived)).
"""

from __future__ import annotations

from chakra_tools.core.model import CommType
from chakra_tools.replay.backend import AnalyticalBackend
from chakra_tools.replay.config import Dim, NetworkConfig, SystemConfig

SIZE = 262_144
NET = NetworkConfig((Dim("Ring", 2, 50.0, 500.0), Dim("Ring", 2, 50.0, 500.0)))


def backend(**impls: tuple[str, ...]) -> AnalyticalBackend:
    impl = {k: ("ring",) for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}
    impl.update({k.replace("_", "-"): v for k, v in impls.items()})
    return AnalyticalBackend(NET, SystemConfig(implementations=impl, local_mem_bw_gbps=1600,
                                               collective_optimization="localBWAware"))


def test_a_two_dimensional_tree_all_reduce_by_hand():
    """localBWAware: reduce-scatter on dimension 0, all-reduce on 1, all-gather on 0, each a tree
    all-reduce of the whole chunk. Dimension 0's counter: 0 for the reduce-scatter (RootMax), 1
    for the all-gather (RootMin); dimension 1's: 0 (RootMax). Rank 0 arrives at 10,000.

    RS, dim 0, RootMax (tops 1, 3): pair {0, 1}: leaf 0 sends at 10,010, top 1 receives at 15,392,
    ends 15,891; rank 0 receives at 21,273, ends 21,283. Pair {2, 3}, from 0: rank 2 ends at 11,283,
    rank 3 at 5,891.
    AR, dim 1, RootMax (tops 2, 3): pair {0, 2}: leaf 0 sends at 21,293, top 2 receives at 26,675,
    ends 27,174; rank 0 ends at 27,174 + 5,382 + 10 = 32,566. Pair {1, 3}: leaf 1 sends at 15,901,
    top 3 (from 5,891) receives at 21,283, ends 21,782; rank 1 ends at 27,174.
    AG, dim 0, RootMin (tops 0, 2): pair {0, 1}: leaf 1 sends at 27,184, top 0 (from 32,566)
    receives at 32,566, ends 33,065; rank 1 ends at 33,065 + 5,382 + 10 = 38,457. Pair {2, 3}:
    leaf 3 sends at 21,792, top 2 (from 27,174) receives at 27,174, ends 27,673; rank 3 ends at
    33,065.

    A reduce-scatter that used reduce-scatter-implementation (ring) would halve the data and end
    far earlier; one that kept the RootMax tree for the all-gather would end rank 0 last.
    """
    be = backend(all_reduce=("doubleBinaryTree", "doubleBinaryTree"))
    got = be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3], None, [10_000, 0, 0, 0])
    assert got == [33_065, 38_457, 27_673, 33_065]


def test_the_next_tree_all_reduce_takes_the_next_trees_on_each_dimension():
    """The counters run on: the second all-reduce's reduce-scatter takes dimension 0's tree 2
    (RootMax again), its all-reduce dimension 1's tree 1 (RootMin), its all-gather tree 3 (RootMin).
    Everyone from 0:

    RS, RootMax: ranks 0, 2 (leaves) end at 11,283, ranks 1, 3 (tops) at 5,891.
    AR, RootMin (tops 0, 1): pair {0, 2}: leaf 2 sends at 11,293, top 0 receives at 16,675, ends
    17,174; rank 2 ends at 22,566. Pair {1, 3}: leaf 3 sends at 5,901, top 1 receives at 11,283,
    ends 11,782; rank 3 ends at 17,174.
    AG, RootMin (tops 0, 2): pair {0, 1}: leaf 1 sends at 11,792, top 0 receives at 17,174, ends
    17,673; rank 1 ends at 23,065. Pair {2, 3}: leaf 3 sends at 17,184, top 2 receives at 22,566,
    ends 23,065; rank 3 ends at 28,457.
    """
    be = backend(all_reduce=("doubleBinaryTree", "doubleBinaryTree"))
    first = be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3], None, [0] * 4)
    second = be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3], None, [0] * 4)
    assert first == [23_065, 28_457, 17_673, 23_065]  # the first case's times less rank 0's 10,000
    assert second == [17_673, 23_065, 23_065, 28_457]


def test_a_tree_reduce_scatter_or_all_gather_is_the_tree_all_reduce():
    """One dimension of 4 (as tests/replay/test_skew.py): with reduce-scatter-implementation or
    all-gather-implementation doubleBinaryTree, the collective runs the tree all-reduce of its
    chunk, so each rank ends as in that all-reduce: [24,045, 18,653, 24,045, 12,272]."""
    want = [24_045, 18_653, 24_045, 12_272]
    ring4 = NetworkConfig((Dim("Ring", 4, 50.0, 500.0),))
    for kind, key in ((CommType.REDUCE_SCATTER, "reduce-scatter"), (CommType.ALL_GATHER, "all-gather")):
        impl = {k: ("ring",) for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}
        impl[key] = ("doubleBinaryTree",)
        be = AnalyticalBackend(ring4, SystemConfig(implementations=impl, local_mem_bw_gbps=1600))
        assert be.collective_finish_ns(kind, SIZE, [0, 1, 2, 3], None, [0] * 4) == want


def test_a_group_smaller_than_the_system_runs_ring_where_the_list_has_several_entries():
    """ASTRA-sim's CommunicatorGroup runs a group smaller than the system with Ring wherever the
    collective's implementation list has more than one entry. Group {0, 1} (along dimension 0):
    a ring all-reduce of 2, two messages of 128 KiB (int(500 + 131072 / 53.687...) = 2941 ns),
    one reduced (3 * int(131072 / 1600) = 243): 3 * d + 2 * 2941 + 243 = 6155 ns for both, where
    the tree would end them apart (5891 and 11283, as above). The whole system keeps its trees."""
    be = backend(all_reduce=("doubleBinaryTree", "doubleBinaryTree"))
    assert be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 1], None, [0, 0]) == [6155, 6155]
    assert be.collective_ns(CommType.ALL_REDUCE, SIZE, [0, 1]) == 6155
    assert be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3], None, [0] * 4) == [
        23_065, 28_457, 17_673, 23_065]


def test_a_group_across_both_dimensions_is_one_ring_timed_on_the_first_differing_dimension():
    """ASTRA-sim gives such a group one ring of its members in one phase, and its network times a
    message on the first dimension where the two ends differ. Ranks 0 (0, 0) and 3 (1, 1) of a
    Ring 2 x Switch 2 system (25 GB/s, 700 ns): each message goes over dimension 0, 1 hop, 2941 ns
    for 128 KiB (the Switch would take int(2 * 700 + 131072 / 26.84...) = 6282). A ring all-reduce
    of 2 from 0 and 1,000: the reduce-scatter step sends at 10 and 1,010; rank 0 receives at
    1,010 + 2,941 = 3,951 and goes on at 3,951 + d + 243 = 4,204, rank 3 receives at 10 + 2,941 =
    2,951 and goes on at 3,204; the all-gather step: rank 0 receives at 3,204 + 2,941 = 6,145 and
    ends at 6,155, rank 3 at 4,204 + 2,941 + 10 = 7,155. Together: 3 * d + 2 * 2,941 + 243 = 6,155
    for both."""
    net = NetworkConfig((Dim("Ring", 2, 50.0, 500.0), Dim("Switch", 2, 25.0, 700.0)))
    impl = {k: ("ring", "ring") for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}
    be = AnalyticalBackend(net, SystemConfig(implementations=impl, local_mem_bw_gbps=1600,
                                             collective_optimization="localBWAware"))
    assert be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 3], None, [0, 1000]) == [6155, 7155]
    assert be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 3], None, [0, 0]) == [6155, 6155]
    assert be.collective_ns(CommType.ALL_REDUCE, SIZE, [0, 3]) == 6155


def test_a_group_two_hops_apart_pays_two_hops():
    """Ranks 0 and 2 of a Ring of 4 (50 GB/s, 500 ns): the group's ring messages cross two links,
    int(2 * 500 + 131072 / 53.687...) = 3441 ns for 128 KiB, so the all-reduce of 256 KiB takes
    3 * d + 2 * 3441 + 243 = 7155 ns (as ASTRA-sim times strided groups: bench/astra_parity.py,
    "8-rank ring, strided groups of 4"), not the 6155 of neighbours."""
    impl = {k: ("ring",) for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}
    be = AnalyticalBackend(NetworkConfig((Dim("Ring", 4, 50.0, 500.0),)),
                           SystemConfig(implementations=impl, local_mem_bw_gbps=1600))
    assert be.collective_ns(CommType.ALL_REDUCE, SIZE, [0, 2]) == 7155
    assert be.collective_ns(CommType.ALL_REDUCE, SIZE, [0, 1]) == 6155
    assert be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 2], None, [0, 1000]) == [7155, 8155]


def test_direct_over_a_group_by_hand():
    """A direct all-reduce over group {0, 1, 2, 3} of a Ring of 8 (one chunk of 256 KiB, messages
    of 64 KiB): 1720 ns to a neighbour, 2220 two hops away, 2720 three (0 <-> 3 is three hops
    here, not the group's one). Each step sends to all peers: the first after d, then d + 120 (a
    reduction) after the last message in; on a group's ring ASTRA-sim's all-gather half reduces
    too, so the second step also ends d + 120 after its last message.

        step 1 (all send at 10): 0 and 3 last hear from each other at 2730, go on at 2860; 1 and 2
        last hear at 10 + 2220 = 2230, go on at 2360.
        step 2: 0 hears from 3 at 2860 + 2720 = 5580, ends 5710 (so does 3); 1 hears from 3 at
        2860 + 2220 = 5080, ends 5210 (so does 2).
    """
    impl = {k: ("direct",) for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}
    be = AnalyticalBackend(NetworkConfig((Dim("Ring", 8, 50.0, 500.0),)),
                           SystemConfig(implementations=impl, local_mem_bw_gbps=1600))
    got = be.collective_finish_ns(CommType.ALL_REDUCE, SIZE, [0, 1, 2, 3], None, [0] * 4)
    assert got == [5710, 5210, 5210, 5710]
