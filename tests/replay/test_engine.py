"""The multi-rank engine: rendezvous, pairing, resources, deadlocks, the ASTRA-sim example."""

from __future__ import annotations

import pytest

from chakra_tools.core.errors import InputError
from chakra_tools.core.model import CommType
from chakra_tools.feed import DeadlockError
from chakra_tools.replay import AnalyticalBackend, load_memory, load_network, load_system, replay
from chakra_tools.replay.api import open_rankset
from chakra_tools.replay.engine import Replayer
from chakra_tools.replay.resources import parse_limits

from _util import backend, coll, comp, events, recv, ring_net, run, send, write_rankset


def test_astra_sim_all_reduce_fixture_is_43000_ns(shared_fixtures):
    a = shared_fixtures / "astra-sim"
    be = AnalyticalBackend(load_network(a / "configs/Ring_4npus.yml"),
                           load_system(a / "configs/Ring_4chunks.json"),
                           load_memory(a / "configs/no_memory_expansion.json"))
    r = replay(a / "all_reduce_4npus_1MB", be)
    assert abs(r.makespan_ns - 43_000) <= 430
    assert [x["finish_ns"] for x in r.ranks] == [43_000] * 4
    assert [x["exposed_comm_ns"] for x in r.ranks] == [43_000] * 4
    (c,) = r.collectives
    assert (c["comm_type"], c["bytes"], c["ranks"], c["start_ns"], c["end_ns"]) == (
        "ALL_REDUCE", 1 << 20, [0, 1, 2, 3], 0, 43_000)


def test_astra_sim_custom_ring_of_sends_and_receives_completes(shared_fixtures):
    """14 sends, 14 receives (all tag 0) and 7 reductions per rank pair up in issue order."""
    a = shared_fixtures / "astra-sim"
    r = replay(a / "custom_ring_allreduce_8npus_1MB", AnalyticalBackend(ring_net(8)))
    assert len(r.ev_node) == 8 * 35 and len(r.pairs) == 8 * 14
    assert len({x["finish_ns"] for x in r.ranks}) == 1  # symmetric ring: every rank ends together


def test_collective_waits_for_every_rank_of_its_group(tmp_path):
    ranks = {0: [coll(1, 1 << 20)], 1: [comp(1, us=5), coll(2, 1 << 20, deps=(1,))]}
    r = run(tmp_path, ranks)
    ev = events(r)
    d = backend(ring_net(2)).collective_ns(CommType.ALL_REDUCE, 1 << 20, [0, 1])
    early, late = backend(ring_net(2)).collective_finish_ns(CommType.ALL_REDUCE, 1 << 20, [0, 1], None, [0, 5000])
    assert late == 5000 + d and 5000 < early < late  # rank 0 issued at 0, waited for rank 1's messages
    assert ev[(0, 1)] == (0, early)
    assert ev[(1, 2)] == (5000, 5000 + d)
    assert r.collectives[0]["start_ns"] == 5000
    assert r.ranks[0]["idle_ns"] == 0 and r.ranks[0]["exposed_comm_ns"] == early
    # the critical path runs through rank 1's compute
    assert [tuple(x) for x in r.to_dict()["critical_path"]][:2] == [(1, 1), (1, 2)]


def test_groups_rendezvous_independently(tmp_path):
    ranks = {0: [coll(1, 4096, pg="1")], 1: [comp(1, us=3), coll(2, 4096, deps=(1,), pg="1")],
             2: [coll(1, 4096, pg="2")], 3: [coll(1, 4096, pg="2")]}
    r = run(tmp_path, ranks, groups={"1": [0, 1], "2": [2, 3]})
    by_pg = {c["pg"]: c for c in r.collectives}
    assert by_pg["1"]["start_ns"] == 3000 and by_pg["1"]["ranks"] == [0, 1]
    assert by_pg["2"]["start_ns"] == 0 and by_pg["2"]["ranks"] == [2, 3]


def test_kth_collective_of_a_group_meets_the_kth(tmp_path):
    ranks = {0: [coll(1, 100), coll(2, 200, deps=(1,))], 1: [coll(7, 100), coll(9, 200, deps=(7,))]}
    r = run(tmp_path, ranks)
    assert [c["node_ids"] for c in r.collectives] == [{"0": 1, "1": 7}, {"0": 2, "1": 9}]


def test_groups_issued_in_different_orders_deadlock_with_a_clear_message(tmp_path):
    ranks = {0: [coll(1, 64, pg="1"), coll(2, 64, pg="2", deps=(1,))],
             1: [coll(1, 64, pg="2"), coll(2, 64, pg="1", deps=(1,))]}
    with pytest.raises(DeadlockError) as e:
        run(tmp_path, ranks, groups={"1": [0, 1], "2": [0, 1]})
    msg = str(e.value)
    assert "rank 0: %1 'coll1' (collective #0 of pg '1') waits for ranks [1]" in msg
    assert "rank 1: %1 'coll1' (collective #0 of pg '2') waits for ranks [0]" in msg


def test_send_recv_pair_on_src_dst_tag(tmp_path):
    ranks = {0: [comp(1, us=2), send(2, dst=1, size=65536, tag=5, deps=(1,))],
             1: [recv(1, src=0, size=65536, tag=5)]}
    r = run(tmp_path, ranks)
    ev = events(r)
    p2p = 1720  # one Ring hop, 64 KiB at 50 GB/s, 500 ns
    assert ev[(0, 2)] == (2000, 2000 + p2p)
    assert ev[(1, 1)] == (0, 2000 + p2p)  # posted at 0, completes when the data arrives
    assert r.to_dict()["deps"] == [[0, 2, 1, 1]] or [0, 2, 1, 1] in r.to_dict()["deps"]


def test_recv_posted_late_completes_at_its_post(tmp_path):
    ranks = {0: [send(1, dst=1, size=8, tag=0)], 1: [comp(1, us=10), recv(2, src=0, size=8, deps=(1,))]}
    ev = events(run(tmp_path, ranks))
    assert ev[(1, 2)] == (10_000, 10_000)


def test_unmatched_tag_deadlocks_naming_the_receive(tmp_path):
    ranks = {0: [send(1, dst=1, size=8, tag=7)], 1: [recv(1, src=0, size=8, tag=8)]}
    with pytest.raises(DeadlockError, match="rank 1: %1 recv waits for a send from rank 0 tag 8"):
        run(tmp_path, ranks)


def test_send_without_destination_is_an_input_error(tmp_path):
    from chakra_tools.core.model import Node, NodeType

    ranks = {0: [Node(1, "s", NodeType.COMM_SEND_NODE)], 1: [comp(1)]}
    with pytest.raises(InputError, match="without comm_dst"):
        run(tmp_path, ranks)


def test_one_compute_op_in_flight_per_rank_by_default(tmp_path):
    ranks = {0: [comp(1, us=4), comp(2, us=4), comp(3, us=4, cpu=True)], 1: [comp(1)]}
    ev = events(run(tmp_path, ranks))
    assert ev[(0, 1)] == (0, 4000) and ev[(0, 2)] == (4000, 8000)  # GPU lane serialises
    assert ev[(0, 3)] == (0, 4000)  # the host lane is separate
    ev2 = events(run(tmp_path / "b", ranks, limits=parse_limits("compute=2")))
    assert ev2[(0, 2)] == (0, 4000)


def test_receives_are_exempt_from_the_comm_limit(tmp_path):
    ranks = {0: [recv(1, src=1, size=8, tag=1), send(2, dst=1, size=8, tag=2)],
             1: [send(1, dst=0, size=8, tag=1, deps=()), recv(2, src=0, size=8, tag=2)]}
    # rank 1 sends only after... nothing: but rank 0's recv must not block its own send
    ev = events(run(tmp_path, ranks))
    assert ev[(0, 2)][0] == 0


def test_overlap_and_exposed_comm(tmp_path):
    """Compute 0-10 us beside an all-reduce issued at 0: overlap = min(10 us, comm)."""
    ranks = {r: [comp(1, us=10), coll(2, 1 << 16)] for r in range(2)}
    r = run(tmp_path, ranks)
    d = backend(ring_net(2)).collective_ns(CommType.ALL_REDUCE, 1 << 16, [0, 1])
    st = r.ranks[0]
    assert st["compute_ns"] == 10_000 and st["comm_ns"] == d
    assert st["overlap_ns"] == min(10_000, d)
    assert st["exposed_comm_ns"] == d - min(10_000, d)
    assert st["finish_ns"] == max(10_000, d) and st["idle_ns"] == 0


def test_what_if_scale_halves_compute(tmp_path):
    from chakra_tools.replay import Scales

    ranks = {0: [comp(1, us=10), comp(2, us=10, deps=(1,))], 1: [comp(1)]}
    fast = AnalyticalBackend(ring_net(2), scales=Scales.parse("compute=0.5"))
    assert run(tmp_path, ranks, be=fast).ranks[0]["finish_ns"] == 10_000


def test_unknown_pg_with_a_group_file_is_an_error(tmp_path):
    ranks = {0: [coll(1, 8, pg="9")], 1: [coll(1, 8, pg="9")]}
    with pytest.raises(InputError, match="pg_name '9' is not in the comm-group file"):
        run(tmp_path, ranks, groups={"1": [0, 1]})


def test_window_smaller_than_the_dependency_distance_still_finishes(tmp_path):
    """Rank 0's send to rank 1 lies beyond a 2-node window, behind nodes that wait on rank 1."""
    ranks = {0: [recv(1, src=1, size=8, tag=1), comp(2, deps=(1,)), comp(3, deps=(1,)),
                 comp(4, deps=(1,)), send(5, dst=1, size=8, tag=2)],
             1: [recv(1, src=0, size=8, tag=2), send(2, dst=0, size=8, tag=1, deps=(1,))]}
    r = run(tmp_path, ranks, window=2)
    assert len(r.ev_node) == 7


def test_host_gaps_keep_recorded_time_between_host_ops(tmp_path):
    from chakra_tools.core.model import Node, NodeType, make_attrs
    from chakra_tools.replay.engine import Replayer
    from _util import write_rankset

    def host(i, start, dur, deps=()):
        return Node(i, f"h{i}", NodeType.COMP_NODE, deps, start_time_micros=start, duration_micros=dur,
                    attrs=make_attrs(is_cpu_op=True))

    prefix = write_rankset(tmp_path, {0: [host(1, 100, 2), host(2, 110, 2, (1,))]})
    from chakra_tools.replay.timing import Captured

    plain = Replayer(*_open(prefix)).run()
    feeders, be = _open(prefix)
    gaps = Replayer(feeders, Captured(be, comm="model", host_gaps=True)).run()
    assert plain.makespan_ns == 4_000
    assert gaps.makespan_ns == 2_000 + 8_000 + 2_000


def _open(prefix):
    from chakra_tools.replay.api import open_rankset

    feeders, _ = open_rankset(prefix)
    return feeders, backend(ring_net(2))


def test_recorded_alignment_starts_ranks_at_their_recorded_offsets(tmp_path):
    from chakra_tools.core.model import Node, NodeType, make_attrs
    from chakra_tools.replay.api import open_rankset
    from chakra_tools.replay.modes import recorded_starts
    from chakra_tools.replay.engine import Replayer
    from _util import write_rankset

    def k(i, start, deps=()):
        return Node(i, f"k{i}", NodeType.COMP_NODE, deps, start_time_micros=start, duration_micros=10,
                    attrs=make_attrs(is_cpu_op=False))

    prefix = write_rankset(tmp_path, {0: [k(1, 100), coll(2, 4096, deps=(1,))],
                                      1: [k(1, 150), coll(2, 4096, deps=(1,))]})
    feeders, groups = open_rankset(prefix)
    starts = recorded_starts(feeders)
    assert starts == {0: 0, 1: 50_000}
    from chakra_tools.replay.timing import Captured

    r = Replayer(feeders, Captured(backend(ring_net(2)), comm="model", start_ns=starts), groups=groups).run()
    ev = events(r)
    assert ev[(1, 1)] == (50_000, 60_000)
    assert r.collectives[0]["start_ns"] == 60_000
    assert [x["start_ns"] for x in r.ranks] == [0, 50_000]
    assert r.ranks[1]["idle_ns"] == 0 and r.ranks[0]["idle_ns"] == 0


def test_windows_expand_until_every_rank_finds_its_part(tmp_path):
    """Rank 1's expansion finds only a receive waiting for rank 0, whose matching send rank 0
    finds on its second expansion: the replay must keep expanding, not declare a deadlock."""
    ranks = {0: [recv(1, src=1, size=8, tag=1), comp(2, deps=(1,)), comp(3, deps=(1,)),
                 recv(4, src=1, size=8, tag=3), comp(5, deps=(4,)), comp(6, deps=(4,)),
                 send(7, dst=1, size=8, tag=2), send(8, dst=1, size=8, tag=4)],
             1: [recv(1, src=0, size=8, tag=2), comp(2, deps=(1,)), comp(3, deps=(1,)),
                 send(4, dst=0, size=8, tag=1, deps=(1,)), send(5, dst=0, size=8, tag=3, deps=(1,)),
                 recv(6, src=0, size=8, tag=4)]}
    r = run(tmp_path, ranks, window=1)
    assert len(r.ev_node) == 14 and len(r.pairs) == 4


def test_a_timing_policy_of_ones_own_drives_the_same_kernel(tmp_path):
    """The kernel takes every duration from the policy it is given: a slower network is a
    subclass of Modelled, with no option of the kernel involved."""
    from chakra_tools.replay.timing import Modelled

    class TenTimesSlowerNetwork(Modelled):
        def collective_ns(self, members, group, size):
            return [10 * ns for ns in super().collective_ns(members, group, size)]

    prefix = write_rankset(tmp_path, {r: [comp(1, us=5), coll(2, 1 << 20, deps=(1,))] for r in (0, 1)})

    def collective_ns(timing):
        feeders, groups = open_rankset(prefix)
        c = Replayer(feeders, timing, groups=groups).run().collectives[0]
        return c["end_ns"] - c["start_ns"]

    be = backend(ring_net(2))
    assert collective_ns(TenTimesSlowerNetwork(be)) == 10 * collective_ns(Modelled(be)) > 0


def test_node_ids_use_the_whole_uint64_range(tmp_path):
    big = 2**63 + 5  # legal on the wire (uint64), beyond a signed 64-bit array
    r = run(tmp_path, {0: [comp(big, us=3), comp(big + 1, us=2, deps=(big,))]})
    assert [(e["node_id"], e["end_ns"]) for e in r.to_dict()["events"]] == [(big, 3000), (big + 1, 5000)]


def test_without_a_comm_group_file_every_unknown_group_is_every_rank_said_once(tmp_path):
    ranks = {r: [coll(1, 4096, pg="1.0"), coll(2, 4096, deps=(1,), pg="2.0")] for r in (0, 1)}
    result = run(tmp_path, ranks)
    assert len(result.collectives) == 2
    (warning,) = [d for d in result.diagnostics if d.code == "unknown-pg"]
    assert "pg_name '1.0', '2.0' taken as every rank" in warning.message


def test_a_compute_node_without_is_cpu_op_is_gpu_work_as_in_astra_sim(tmp_path):
    """Two independent 10 µs nodes, one without the attribute: both on the one GPU compute
    queue, 20,000 ns (ASTRA-sim's figure), not side by side on host and GPU."""
    from chakra_tools.core.model import Node, NodeType

    bare = Node(1, "bare", NodeType.COMP_NODE, duration_micros=10)  # no is_cpu_op at all
    r = run(tmp_path, {0: [bare, comp(2, us=10)]})
    assert r.makespan_ns == 20_000
    assert {e["lane"] for e in r.to_dict()["events"]} == {"compute"}


def test_memory_nodes_take_the_communication_slot_as_in_astra_sim(tmp_path):
    """Two independent 10 us loads and a 1 MiB all-reduce: ASTRA-sim issues loads and stores as
    communication, one in flight per rank, so the three run one after another; with a memory
    lane of their own (`memory_on_comm=False`) the loads overlap each other and the collective."""
    from chakra_tools.core.model import Node, NodeType
    from chakra_tools.replay.engine import Resources

    def load(i):
        return Node(i, f"load{i}", NodeType.MEM_LOAD_NODE, duration_micros=10)

    ranks = {0: [load(1), load(2), coll(3, 1 << 20)], 1: [coll(3, 1 << 20)]}
    prefix = write_rankset(tmp_path, ranks)

    def makespan(**kw):
        feeders, groups = open_rankset(prefix)
        return Replayer(feeders, backend(ring_net(2)), groups=groups, resources=Resources(**kw)).run()

    shared, own = makespan(), makespan(memory_on_comm=False)
    coll_ns = own.collectives[0]["end_ns"] - own.collectives[0]["start_ns"]
    assert own.makespan_ns == max(10_000, coll_ns)
    assert shared.makespan_ns == 20_000 + coll_ns
    assert {e["lane"] for e in shared.to_dict()["events"] if e["name"].startswith("load")} == {"mem"}


def test_values_the_replay_cannot_run_are_input_errors_naming_the_file(tmp_path):
    from chakra_tools.core.model import Node, NodeType, make_attrs

    odd_kind = Node(1, "c", NodeType.COMM_COLL_NODE, attrs=make_attrs(comm_type=2**31 - 1, comm_size=8))
    with pytest.raises(InputError, match=r"t\.0\.et: rank 0: node 1 .*comm_type 2147483647 is no collective kind"):
        run(tmp_path / "a", {0: [odd_kind], 1: [odd_kind]})
    forever = [comp(1, us=2**62), comp(2, us=2**62, deps=(1,))]  # 2^62 us each: past 2^63 ns
    with pytest.raises(InputError, match=r"t\.0\.et: rank 0: node \d+: finishes at .* past the replay's 64-bit clock"):
        run(tmp_path / "b", {0: forever})
    lonely = [send(1, dst=7, size=8)]
    with pytest.raises(InputError, match=r"t\.0\.et: rank 0: node 1 .*comm_dst=7 is not a rank of this set"):
        run(tmp_path / "c", {0: lonely, 1: [comp(1)]})
