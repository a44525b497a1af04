"""Calls in flight at once share a machine's uplink (replay/sharing.py), by hand: what the test
bed measured for gloo over a tbf-shaped uplink (a 512 KiB reduce-scatter and a 128 KiB
all-gather started together end at 95 and 64 ms, 63 and 31 ms alone)."""

from __future__ import annotations

from chakra_tools.core.model import CommType
from chakra_tools.replay.api import open_rankset, run_replay
from chakra_tools.replay.modes import CaptureModes
from chakra_tools.replay.fabric import Fabric, Level
from chakra_tools.replay.library import LibraryBackend

from _util import backend, coll, comp, recv, send, write_rankset

# 2 machines x 2 ranks; no latency, no floors: a call's time alone is its bytes on the uplink
FABRIC = Fabric((Level("intra-node", 2, 0.0, 0.01), Level("inter-node", 2, 0.0, 80.0, shared=True)))


def _ends(tmp_path, calls):
    prefix = write_rankset(tmp_path, {r: [coll(i + 1, size, kind=kind) for i, (kind, size) in enumerate(calls)]
                                      for r in range(4)})
    be = LibraryBackend(backend(), FABRIC)
    feeders, groups = open_rankset(prefix)
    result = run_replay(prefix, feeders, be, groups=groups, modes=CaptureModes())
    assert result.config["link_sharing"].startswith("processor sharing")
    ends = {c["node_id"]: c["end_ns"] for c in result.collectives}
    alone = [be._call(int(kind), size, (0, 1, 2, 3))[0] for kind, size in calls]
    return [ends[i + 1] for i in range(len(calls))], alone


def test_two_calls_started_together_share_the_uplink(tmp_path):
    """Both bandwidth-bound: each at half the rate while both are there. The all-gather (a alone)
    ends at 2a; the reduce-scatter (b alone) has done a of its b by then and ends at a + b: the
    two together take what one after the other would, and neither ends at its time alone."""
    (rs, ag), (b, a) = _ends(tmp_path, [(CommType.REDUCE_SCATTER, 512 << 10), (CommType.ALL_GATHER, 128 << 10)])
    assert a < b
    assert abs(ag - 2 * a) <= 2 and abs(rs - (a + b)) <= 2


def test_a_call_alone_takes_its_time_alone(tmp_path):
    (rs,), (b,) = _ends(tmp_path, [(CommType.REDUCE_SCATTER, 512 << 10)])
    assert rs == b


def test_calls_together_get_the_links_rate_not_their_efficiencies_alone_stacked(tmp_path):
    """At efficiency 0.8 a call alone takes a and keeps the uplink busy 0.8 of it; two started
    together get the link's rate (less what the capture says calls lose together: nothing here)
    and end when their bytes are through, 1.6a, not their efficiencies stacked, 2a."""
    from chakra_tools.replay.library import KindCost

    ends = {}
    for n in (1, 2):
        folder = tmp_path / str(n)
        folder.mkdir()
        prefix = write_rankset(folder, {r: [coll(i + 1, 1 << 20) for i in range(n)] for r in range(4)})
        be = LibraryBackend(backend(), FABRIC, kinds={"ALL_REDUCE": KindCost(efficiency=0.8)})
        feeders, groups = open_rankset(prefix)
        ends[n] = [c["end_ns"] for c in run_replay(prefix, feeders, be, groups=groups, modes=CaptureModes()).collectives]
    a = be._call(int(CommType.ALL_REDUCE), 1 << 20, (0, 1, 2, 3))[0]
    assert ends[1] == [a]
    assert all(abs(end - 1.6 * a) <= 3 for end in ends[2]), (ends[2], a)


def test_calls_that_cross_no_shared_link_do_not_slow_each_other(tmp_path):
    """Groups within one machine each: their rings never leave it."""
    prefix = write_rankset(tmp_path, {r: [coll(1, 1 << 20, pg="1" if r < 2 else "2")] for r in range(4)},
                           {"1": [0, 1], "2": [2, 3]})
    be = LibraryBackend(backend(), FABRIC)
    feeders, groups = open_rankset(prefix)
    result = run_replay(prefix, feeders, be, groups=groups, modes=CaptureModes())
    alone = be._call(int(CommType.ALL_REDUCE), 1 << 20, (0, 1))[0]
    assert [c["end_ns"] for c in result.collectives] == [alone, alone]


# -- what calls sharing a link lose (Level.shared_efficiency), and reading it off a capture ---------

LOSSY = Fabric((FABRIC.levels[0], Level("inter-node", 2, 0.0, 80.0, shared=True, shared_efficiency=0.8)))
RS_AG = [(CommType.REDUCE_SCATTER, 512 << 10), (CommType.ALL_GATHER, 128 << 10)]


def _replay(prefix, fabric):
    be = LibraryBackend(backend(), fabric)
    feeders, groups = open_rankset(prefix)
    return run_replay(prefix, feeders, be, groups=groups, modes=CaptureModes()), be


def test_calls_sharing_a_link_get_what_it_gives_them_together(tmp_path):
    """Two calls keeping the uplink full together get 80% of it between them, 40% each: the
    all-gather (a alone) ends at a / 0.4 = 2.5a, by when the reduce-scatter has done a of its b
    and runs the rest alone, ending at 1.5a + b."""
    prefix = write_rankset(tmp_path, {r: [coll(i + 1, size, kind=kind) for i, (kind, size) in enumerate(RS_AG)]
                                      for r in range(4)})
    result, be = _replay(prefix, LOSSY)
    ends = {c["node_id"]: c["end_ns"] for c in result.collectives}
    b, a = (be._call(int(kind), size, (0, 1, 2, 3))[0] for kind, size in RS_AG)
    assert abs(ends[2] - 2.5 * a) <= 3 and abs(ends[1] - (1.5 * a + b)) <= 3


def _captured(tmp_path, calls, measured_ns: int):
    """A rank set of `calls` started together on 4 ranks whose files say the run took `measured_ns`."""
    from chakra_tools.core.graph import Graph, RankSet
    from chakra_tools.core.measured import Measured
    from chakra_tools.core.model import Metadata

    meta = Metadata(attrs=Measured((10_000, 10_000 + measured_ns)).attrs())
    nodes = [coll(i + 1, size, kind=kind) for i, (kind, size) in enumerate(calls)]
    RankSet({r: Graph(nodes, rank=r, metadata=meta) for r in range(4)}, {}).write(tmp_path, "t")
    return tmp_path / "t"


def _calibration(fabric):
    from chakra_tools.replay.clusterfit import ClusterFit
    from chakra_tools.replay.netfit import Calibration, NetworkFit

    return Calibration(NetworkFit(1000.0, 0.1, 0.0), 4, [], {}, cluster=ClusterFit(fabric, "gloo", {}, 0.0))


def _rs_ag_ns(folder, fabric) -> int:
    """The model's step for the two calls on `fabric` (written to `folder`)."""
    folder.mkdir()
    prefix = write_rankset(folder, {r: [coll(i + 1, size, kind=kind) for i, (kind, size) in enumerate(RS_AG)]
                                    for r in range(4)})
    return _replay(prefix, fabric)[0].makespan_ns


def test_fit_sharing_reads_the_efficiency_off_the_capture(tmp_path):
    """A capture whose two calls took what they take at 80% together: the fit finds 80%, and
    the capture replayed on the fitted cluster takes its own measured step."""
    from chakra_tools.replay.sharefit import fit_sharing

    measured = _rs_ag_ns(tmp_path / "lossy", LOSSY)
    assert measured > 1.1 * _rs_ag_ns(tmp_path / "lossless", FABRIC)
    prefix = _captured(tmp_path, RS_AG, measured)
    cal, found = fit_sharing(prefix, _calibration(FABRIC))
    assert found.error_before < -0.05 and abs(found.error_after) <= 0.003
    assert abs(found.efficiency - 0.8) <= 0.01
    assert cal.cluster.fabric.levels[1].shared_efficiency == found.efficiency
    assert cal.cluster.fabric.levels[0].shared_efficiency == 1.0  # a rank's own link: not shared
    assert cal.to_dict()["cluster"]["levels"][1]["shared_efficiency"] == found.efficiency
    from chakra_tools.replay.calfile import format_calibration, read_calibration, write_calibration

    (tmp_path / "net").mkdir()
    write_calibration(cal, tmp_path / "net")
    back = read_calibration(tmp_path / "net")
    assert back.cluster.fabric.levels[1].shared_efficiency == found.efficiency
    assert f"calls sharing an uplink: {found.efficiency:.0%} of its rate" in format_calibration(back)


def test_fit_sharing_takes_the_captures_typical_step_not_one_a_busy_host_stretched(tmp_path):
    """Four profiler steps of the two calls at 80% together, one of them stretched by 40% (a host
    that lost its core for a while): the fit reads 80% off the typical step; over the window as a
    whole it would blame the stretched step on the links."""
    from chakra_tools.core.graph import Graph, RankSet
    from chakra_tools.core.measured import Measured
    from chakra_tools.core.model import Metadata
    from chakra_tools.replay.sharefit import fit_sharing, typical_steps

    step = _rs_ag_ns(tmp_path / "lossy", LOSSY)
    lengths = [step, step, round(1.4 * step), step]
    bounds, t = [], 10_000
    for n in lengths:
        bounds.append((t, t + n))
        t += n
    measured = Measured((10_000, t), tuple(bounds))
    assert typical_steps(measured).duration_ns == 4 * step
    nodes = []
    for k in range(4):  # each step's two calls after the step before
        deps = (2 * k - 1, 2 * k) if k else ()
        nodes += [coll(2 * k + 1 + i, size, deps=deps, kind=kind) for i, (kind, size) in enumerate(RS_AG)]
    meta = Metadata(attrs=measured.attrs())
    (tmp_path / "cap").mkdir()
    RankSet({r: Graph(nodes, rank=r, metadata=meta) for r in range(4)}, {}).write(tmp_path / "cap", "t")
    _, found = fit_sharing(tmp_path / "cap" / "t", _calibration(FABRIC))
    assert abs(found.efficiency - 0.8) <= 0.01, found


def test_fit_sharing_leaves_the_links_alone_where_the_capture_cannot_tell(tmp_path):
    """One call at a time (nothing shared, however short the replay), a replay already as long as
    the capture (the model does not make calls faster together), and one still short with the
    calls losing all the fit allows (the step is long for another reason; at that least rate a
    tensor- and pipeline-parallel job captured short came out +29% on 4 machines): nothing lost."""
    from chakra_tools.replay.sharefit import FLOOR, fit_sharing

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    floor = Fabric((FABRIC.levels[0], Level("inter-node", 2, 0.0, 80.0, shared=True, shared_efficiency=FLOOR)))
    slow = _captured(tmp_path / "c", RS_AG, round(1.2 * _rs_ag_ns(tmp_path / "floor", floor)))
    _, found = fit_sharing(slow, _calibration(FABRIC))
    assert found.efficiency == 1.0 and "not the links" in found.reason and found.error_before < -0.2
    alone = _captured(tmp_path / "a", RS_AG[:1], 10 ** 9)
    _, found = fit_sharing(alone, _calibration(FABRIC))
    assert found.efficiency == 1.0 and "no calls shared" in found.reason and found.error_before < -0.5
    fast = _captured(tmp_path / "b", RS_AG, 1000)
    _, found = fit_sharing(fast, _calibration(FABRIC))
    assert found.efficiency == 1.0 and "not short" in found.reason and found.replays == 1


def test_a_damaged_sharing_record_is_refused_by_name(tmp_path):
    import json

    import pytest

    from chakra_tools.core.errors import InputError
    from chakra_tools.replay.calfile import read_calibration, write_calibration

    write_calibration(_calibration(LOSSY), tmp_path)
    doc = json.loads((tmp_path / "fit.json").read_text())
    assert doc["cluster"]["levels"][1]["shared_efficiency"] == 0.8
    doc["sharing"] = {"efficiency": "most"}
    (tmp_path / "fit.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="fit.json: sharing"):
        read_calibration(tmp_path)
    doc["sharing"] = None
    doc["cluster"]["levels"][1]["shared_efficiency"] = 1.5
    (tmp_path / "fit.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="shared_efficiency"):
        read_calibration(tmp_path)


def test_calls_floor_bound_alone_ride_the_links_bucket_together(tmp_path):
    """Each call's rounds take their floor alone (the floor a little over the round's bytes),
    so alone neither gains from a shaper's bucket; together they ask 1.8 times the link's rate,
    and the bucket (held by the link, not spent by the first call that could not use it) carries
    the excess: both end at their time alone, as the test bed's reduce-scatter and all-gather
    did at 500 Mbit/s. Without a bucket the link is shared and both are late. Nor do they take
    turns on their floors."""
    from chakra_tools.replay.library import KindCost

    size = 128 << 10
    plain = LibraryBackend(backend(), FABRIC)
    rounds_bytes = plain._call(int(CommType.ALL_GATHER), size, (0, 1, 2, 3))[0] / 3  # one round's bytes, ns
    floor = 1.1 * rounds_bytes
    kinds = {k: KindCost((0.0, floor)) for k in ("ALL_GATHER", "REDUCE_SCATTER")}
    calls = [(CommType.REDUCE_SCATTER, 4 * size), (CommType.ALL_GATHER, size)]

    def ends(burst_ns):
        fabric = Fabric((FABRIC.levels[0], Level("inter-node", 2, 0.0, 80.0, shared=True, burst_ns=burst_ns)))
        folder = tmp_path / f"b{int(burst_ns)}"
        folder.mkdir()
        prefix = write_rankset(folder, {r: [coll(i + 1, s, kind=k) for i, (k, s) in enumerate(calls)]
                                        for r in range(4)})
        be = LibraryBackend(backend(), fabric, "gloo", kinds, 0.0)
        feeders, groups = open_rankset(prefix)
        result = run_replay(prefix, feeders, be, groups=groups, modes=CaptureModes())
        got = {c["node_id"]: c["end_ns"] for c in result.collectives}
        return got[1], got[2], [be._call(int(k), s, (0, 1, 2, 3))[0] for k, s in calls]

    rs, ag, (rs_alone, ag_alone) = ends(10 * floor)
    assert abs(rs_alone - 6 * floor) <= 6 and abs(ag_alone - 3 * floor) <= 3  # floor-bound alone
    assert abs(ag - ag_alone) <= 3 and abs(rs - rs_alone) <= 3
    rs, ag, _ = ends(0.0)
    assert ag > 1.5 * ag_alone and rs > rs_alone + 0.3 * ag_alone


def test_a_round_the_bucket_carries_still_takes_its_floor(tmp_path):
    """Rounds a little longer than their floor alone, after an idle spell with a bucket that
    holds all their bytes: the bytes pass at once, each round still takes its floor (the
    members' turnaround), so the call takes 3 floors, and a faster link never makes it slower.
    Counting the floor only for rounds it bound put such a call at nothing, and the mixed job
    on 4 nodes ran faster at 250 Mbit/s than at 300."""
    from chakra_tools.replay.library import KindCost

    size = 128 << 10
    one_round = LibraryBackend(backend(), FABRIC)._call(int(CommType.ALL_GATHER), size, (0, 1, 2, 3))[0] / 3
    floor = 0.9 * one_round
    kinds = {"ALL_GATHER": KindCost((0.0, floor))}

    def end(ns_per_byte, burst_ns):
        fabric = Fabric((FABRIC.levels[0], Level("inter-node", 2, 0.0, ns_per_byte, shared=True, burst_ns=burst_ns)))
        folder = tmp_path / f"r{ns_per_byte:g}-{burst_ns:g}"
        folder.mkdir(exist_ok=True)
        prefix = write_rankset(folder, {r: [coll(1, size, kind=CommType.ALL_GATHER)] for r in range(4)})
        feeders, groups = open_rankset(prefix)
        result = run_replay(prefix, feeders, LibraryBackend(backend(), fabric, "gloo", kinds, 0.0),
                            groups=groups, modes=CaptureModes())
        return result.collectives[0]["end_ns"]

    assert abs(end(80.0, 0.0) - 3 * one_round) <= 3  # bound by its bytes without a bucket
    assert abs(end(80.0, 10 * one_round) - 3 * floor) <= 3
    ends = [end(rate, 10 * one_round) for rate in (120.0, 100.0, 80.0, 60.0, 40.0)]
    assert ends == sorted(ends, reverse=True) and min(ends) >= 3 * floor - 3


# -- sends share the uplinks as calls do ------------------------------------------------------------

def _p2p_ends(tmp_path, ranks, groups=None, window=None, fabric=FABRIC):
    """{(rank, node id): end} of every send, receive and call of `ranks` on `fabric`."""
    prefix = write_rankset(tmp_path, ranks, groups)
    be = LibraryBackend(backend(), fabric, "gloo", {}, 0.0, window)
    feeders, groups = open_rankset(prefix)
    result = run_replay(prefix, feeders, be, groups=groups, modes=CaptureModes())
    return {(e["rank"], e["node_id"]): e["end_ns"] for e in result.to_dict()["events"]}, be


def test_two_replicas_sends_leaving_one_machine_split_its_uplink(tmp_path):
    """Two pipeline replicas each send 256 KiB from machine 0 to machine 1 at once (ranks 0->2,
    1->3): the test bed's TCP flows split the uplink and both arrive at twice the time alone, where
    first in, first out had one alone and the other after it (a 4-stage pipeline captured on 4
    machines replayed 15% short on its own network)."""
    size = 256 << 10
    ranks = {0: [send(1, 2, size)], 1: [send(1, 3, size)], 2: [recv(1, 0, size)], 3: [recv(1, 1, size)]}
    ends, be = _p2p_ends(tmp_path / "a", ranks)
    alone = be.p2p_ns(0, 2, size)
    assert alone == FABRIC.message_ns(0, 2, size)
    for rank in range(4):
        assert abs(ends[(rank, 1)] - 2 * alone) <= 2
    # what calls lose to each other as their rounds fall out of step is not a stream's: on a
    # link where two calls get 80% of it, two sends still get all of it
    ends, _ = _p2p_ends(tmp_path / "b", ranks, fabric=LOSSY)
    assert all(abs(ends[(rank, 1)] - 2 * alone) <= 2 for rank in range(4))


def test_sends_from_one_rank_to_another_go_in_order(tmp_path):
    """Rank 0 sends two 128 KiB messages to rank 2 at once: one TCP connection (gloo's pair)
    carries them one after the other, the first arriving at its time alone and the second after
    it, not both at twice that as two flows would."""
    size = 128 << 10
    ends, be = _p2p_ends(tmp_path, {0: [send(1, 2, size, tag=1), send(2, 2, size, tag=2)],
                                    2: [recv(1, 0, size, tag=1), recv(2, 0, size, tag=2)],
                                    1: [comp(1)], 3: [comp(1)]})
    alone = be.p2p_ns(0, 2, size)
    assert abs(ends[(2, 1)] - alone) <= 2 and abs(ends[(2, 2)] - 2 * alone) <= 2


def test_a_send_beside_a_call_shares_the_uplink_with_it(tmp_path):
    """A 128 KiB send (a alone) from rank 0 to 2 and a 512 KiB all-reduce of ranks 1 and 3 (4a
    alone, the same uplinks kept as busy): each at half the rate while both are there, the send
    at 2a and the call at 5a, as two calls would. Before, a send kept its own time (a) and only
    slowed the call."""
    small, big = 128 << 10, 512 << 10
    ranks = {0: [send(1, 2, small)], 2: [recv(1, 0, small)],
             1: [coll(1, big, pg="1")], 3: [coll(1, big, pg="1")]}
    ends, be = _p2p_ends(tmp_path, ranks, {"1": [1, 3]})
    a, c = be.p2p_ns(0, 2, small), be._call(int(CommType.ALL_REDUCE), big, (1, 3))[0]
    assert abs(c - 4 * a) <= 4
    assert abs(ends[(2, 1)] - 2 * a) <= 2 and abs(ends[(1, 1)] - (a + c)) <= 3


def test_a_send_past_the_window_goes_on_when_its_receive_is_there_in_time(tmp_path):
    """With a 40 KiB window and the receive posted at once, the rest follows the window as one
    stream: the message takes its time alone. Posted 50 ms late, the rest crosses after it."""
    size = 256 << 10
    on_time, be = _p2p_ends(tmp_path / "a", {0: [send(1, 2, size)], 2: [recv(1, 0, size)],
                                            1: [comp(1)], 3: [comp(1)]}, window=40 << 10)
    assert abs(on_time[(2, 1)] - be.p2p_ns(0, 2, size)) <= 2
    late, be = _p2p_ends(tmp_path / "b", {0: [send(1, 2, size)], 2: [comp(1, us=50_000), recv(2, 0, size, deps=[1])],
                                          1: [comp(1)], 3: [comp(1)]}, window=40 << 10)
    assert abs(late[(2, 2)] - (50_000_000 + be.p2p_ns(0, 2, size - (40 << 10)))) <= 2
    assert late[(0, 1)] == late[(2, 2)]  # the send is done when its data is through


# -- whose lanes: gloo's worker threads belong to a process group, and sends do not use them -------

#: a slow machine inside, so that calls within it are the long ones
SLOW_INSIDE = Fabric((Level("intra-node", 2, 0.0, 100.0), FABRIC.levels[1]))

def test_a_send_does_not_wait_for_its_ranks_calls(tmp_path):
    """Rank 0 has two 4 MiB all-reduces with rank 1 in flight (gloo's two worker threads busy) and
    sends 128 KiB to rank 2: ProcessGroupGloo::send puts it on the wire from the calling thread at
    once, so it arrives at its time alone, long before the calls end. On the rank's one
    communication lane it waited for the first call (a 2-stage pipeline on 4 machines came out
    +9.5%, its last gradient send behind the stage's gradient all-reduces)."""
    big, small = 4 << 20, 128 << 10
    ranks = {0: [coll(1, big, pg="1"), coll(2, big, pg="1"), send(3, 2, small)],
             1: [coll(1, big, pg="1"), coll(2, big, pg="1")],
             2: [recv(1, 0, small)], 3: [comp(1)]}
    ends, be = _p2p_ends(tmp_path, ranks, {"1": [0, 1]}, fabric=SLOW_INSIDE)
    alone = be.p2p_ns(0, 2, small)
    assert abs(ends[(2, 1)] - alone) <= 2 and ends[(0, 3)] == ends[(2, 1)]
    assert ends[(0, 1)] > 2 * alone  # the calls are the long ones: the send did not wait for them


def test_each_process_group_has_worker_threads_of_its_own(tmp_path):
    """Two 4 MiB all-reduces on group "1" and a 64 KiB one on group "2" (the same two ranks, one
    machine: nothing shared on the way): group 2's call runs at once on its own group's threads
    and takes its time alone; on one lane per rank it waited for group 1's first call."""
    big, small = 4 << 20, 64 << 10
    calls = [coll(1, big, pg="1"), coll(2, big, pg="1"), coll(3, small, pg="2")]
    ends, be = _p2p_ends(tmp_path / "a", {0: calls, 1: calls, 2: [comp(1)], 3: [comp(1)]},
                         {"1": [0, 1], "2": [0, 1]}, fabric=SLOW_INSIDE)
    alone = be._call(int(CommType.ALL_REDUCE), small, (0, 1))[0]
    assert ends[(0, 3)] == ends[(1, 3)] and abs(ends[(0, 3)] - alone) <= 2
    assert ends[(0, 1)] > 10 * alone
    # two calls of one group at a time, as before: the third of group 1 waits for the first
    more = calls[:2] + [coll(3, big, pg="1")]
    ends, _ = _p2p_ends(tmp_path / "b", {0: more, 1: more, 2: [comp(1)], 3: [comp(1)]}, {"1": [0, 1]},
                        fabric=SLOW_INSIDE)
    assert ends[(0, 3)] >= ends[(0, 1)] + 0.9 * ends[(0, 1)]


def test_lanes_of_calls_other_than_a_ranks_or_a_groups_are_refused():
    import pytest

    from chakra_tools.core.errors import InputError
    from chakra_tools.replay.resources import Resources

    with pytest.raises(InputError, match="calls 'thread': use rank or group"):
        Resources(calls="thread")


def test_fit_sharing_reads_each_ranks_own_window_not_the_lag_between_them(tmp_path):
    """Every rank measured exactly the step the lossless replay takes, but ranks 2 and 3 began
    their windows 40% of a step after ranks 0 and 1 (a pipeline's stages start their steps apart):
    nothing is short, so nothing is lost. From the earliest start to the latest end the job read
    40% long, and the fit took the lag for link rate lost to sharing (a 2-stage pipeline on 4
    machines +6.5%, -0.1% without)."""
    from chakra_tools.core.graph import Graph, RankSet
    from chakra_tools.core.measured import Measured
    from chakra_tools.core.model import Metadata
    from chakra_tools.replay.sharefit import fit_sharing

    step = _rs_ag_ns(tmp_path / "lossless", FABRIC)
    lag = round(0.4 * step)
    nodes = [coll(i + 1, size, kind=kind) for i, (kind, size) in enumerate(RS_AG)]
    graphs = {}
    for r in range(4):
        start = 10_000 + (lag if r >= 2 else 0)
        graphs[r] = Graph(nodes, rank=r, metadata=Metadata(attrs=Measured((start, start + step)).attrs()))
    (tmp_path / "cap").mkdir()
    RankSet(graphs, {}).write(tmp_path / "cap", "t")
    _, found = fit_sharing(tmp_path / "cap" / "t", _calibration(FABRIC))
    assert found.efficiency == 1.0 and "not short" in found.reason, found
    assert abs(found.error_before) <= 0.003
