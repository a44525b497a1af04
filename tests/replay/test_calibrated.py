"""`--comm calibrated` and `--host-time timeline` on tiny hand-built captures, against hand-computed
times (µs in the traces, ns in the replay).

Recorded intervals are on one clock, as a capture's ranks on one host: a member's share of a
collective is its recorded end minus the latest recorded start.
"""

from __future__ import annotations

import pytest

from chakra_tools.core.errors import InputError
from chakra_tools.core.graph import Graph
from chakra_tools.core.model import Node, NodeType, make_attrs
from chakra_tools.replay.api import open_rankset
from chakra_tools.replay.engine import Replayer
from chakra_tools.replay.recorded import read_rankset, read_timeline
from chakra_tools.replay.timing import Captured, Modelled

from _util import backend, coll, comp, events, recv, ring_net, run, send, write_rankset


def finish(result) -> dict[int, int]:
    return {r["rank"]: r["finish_ns"] for r in result.ranks}


def two_ranks_all_reduce(start0=1100, us0=900, start1=1600, us1=500):
    """Rank 0 computes 100 µs, rank 1 600 µs, then one all-reduce; the record says rank 0 called
    at `start0` and waited, rank 1 called at `start1`."""
    return {0: [comp(1, us=100), coll(2, 4096, deps=(1,), start=start0, us=us0)],
            1: [comp(1, us=600), coll(2, 4096, deps=(1,), start=start1, us=us1)]}


def test_calibrated_collective_charges_each_member_its_time_after_the_last_arrival(tmp_path):
    # recorded: rank 0 1100..2000, rank 1 1600..2100 -> shares 400 and 500 µs after 1600
    r = run(tmp_path, two_ranks_all_reduce(), comm="calibrated")
    assert finish(r) == {0: 600_000 + 400_000, 1: 600_000 + 500_000}
    (c,) = r.collectives
    assert (c["start_ns"], c["end_ns"]) == (600_000, 1_100_000)


def test_measured_charges_everyone_the_shortest_and_model_ignores_the_record(tmp_path):
    assert finish(run(tmp_path, two_ranks_all_reduce(), comm="measured")) == {0: 1_100_000, 1: 1_100_000}
    model = finish(run(tmp_path, two_ranks_all_reduce()))
    assert model[0] <= model[1] < 610_000  # a 4 KiB all-reduce on a 50 GB/s ring: a few µs
    # (rank 0 arrived first and, as in ASTRA-sim, leaves up to one message earlier: test_skew.py)


def test_calibrated_falls_back_to_the_shortest_when_the_clocks_disagree(tmp_path):
    # rank 0 ended (2000) before rank 1 began (5000): no common clock, so 500 µs for both
    r = run(tmp_path, two_ranks_all_reduce(start1=5000), comm="calibrated")
    assert finish(r) == {0: 1_100_000, 1: 1_100_000}


def test_calibrated_without_recorded_durations_is_the_network_model(tmp_path):
    """From the last arrival on, every member: the model as `Modelled` (--collective-start last)
    times it; the staggered default lets the early rank 0 leave earlier."""
    plain = {r: [comp(1, us=100 * (r + 1)), coll(2, 1 << 20, deps=(1,))] for r in (0, 1)}
    feeders, groups = open_rankset(write_rankset(tmp_path, plain))
    together = finish(Replayer(feeders, Modelled(backend(ring_net(2))), groups=groups).run())
    assert finish(run(tmp_path, plain, comm="calibrated")) == together
    staggered = finish(run(tmp_path, plain))
    assert staggered[1] == together[1] and staggered[0] < together[0]


def test_calibrated_send_is_a_rendezvous_with_recorded_shares(tmp_path):
    """Recorded: rank 0's send 1000..1500 µs waited for rank 1's receive, posted at 1450 and done
    at 1520: after the later arrival (1450) the send took 50 µs, the receive 70 µs. Replayed, the
    send is issued at 10 µs, the receive at 400 µs."""
    ranks = {0: [comp(1, us=10), send(2, dst=1, size=64, deps=(1,), start=1000, us=500),
                 comp(3, us=5, deps=(2,))],
             1: [comp(1, us=400), recv(2, src=0, size=64, deps=(1,), start=1450, us=70)]}
    cal = run(tmp_path, ranks, comm="calibrated")
    ev = events(cal)
    assert ev[(0, 2)] == (10_000, 450_000)  # held until the receive was posted
    assert ev[(0, 3)] == (450_000, 455_000)
    assert ev[(1, 2)] == (400_000, 470_000)
    measured = events(run(tmp_path, ranks, comm="measured"))  # eager, its whole recorded 500 µs
    assert measured[(0, 2)] == (10_000, 510_000) and measured[(1, 2)] == (400_000, 510_000)
    model = events(run(tmp_path, ranks))  # eager, the network's ~0.5 µs
    assert model[(0, 2)][1] < 11_000 and model[(1, 2)] == (400_000, 400_000)


def test_rendezvous_send_left_without_its_receive_is_reported_as_a_deadlock(tmp_path):
    from chakra_tools.feed import DeadlockError

    ranks = {0: [send(1, dst=1, size=8, tag=4, start=10, us=5)], 1: [comp(1, us=1)]}
    with pytest.raises(DeadlockError, match="send waits for a recv on rank 1 tag 4"):
        run(tmp_path, ranks, comm="calibrated")


def test_unknown_comm_mode_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="calibrated"):
        run(tmp_path, {0: [comp(1)]}, comm="guessed")


# -- host time from the recorded timeline -----------------------------------------------------

T0 = 1000  # recorded starts are µs on the capture's clock; 0 means "not recorded"


def host(i, start, us, deps=()):
    return comp(i, us=us, deps=deps, cpu=True, start=T0 + start)


def pipeline_stage_ranks():
    """Rank 1's step (exclusive 305 µs: its untraced time, really after op 3) is recorded first;
    its receive, posted at 5 µs, waited until rank 0 sent at 300 µs; op 3 ran 310..320, op 4
    620..630. Rank 0 computed 300 µs, then sent (300..310)."""
    return {0: [host(1, 0, 300), send(2, dst=1, size=64, deps=(1,), start=T0 + 300, us=10)],
            1: [host(1, 0, 305), recv(2, src=0, size=64, deps=(1,), start=T0 + 5, us=300),
                host(3, 310, 10, deps=(2,)), host(4, 620, 10, deps=(3,))]}


def test_timeline_moves_a_parents_untraced_time_to_where_it_happened():
    t = read_timeline(Graph(pipeline_stage_ranks()[1]).nodes.values())
    # step: until the receive began; the receive blocked 5..310 (op 3 waited for it); op 3: to
    # op 4's start; op 4, the last: its own 10 µs
    assert t.host_ns == {1: 5_000, 3: 310_000, 4: 10_000}
    assert t.comm_end_ns == {2: (T0 + 310) * 1000}


def test_timeline_with_calibrated_reproduces_the_recorded_step(tmp_path):
    prefix = write_rankset(tmp_path, pipeline_stage_ranks())
    timelines = read_rankset(prefix)
    host_ns = {r: t.host_ns for r, t in timelines.items()}
    ends = {r: t.comm_end_ns for r, t in timelines.items()}

    def replay(**kw):
        feeders, groups = open_rankset(prefix)
        timing = Captured(backend(ring_net(2)), **kw) if kw else backend(ring_net(2))
        return finish(Replayer(feeders, timing, groups=groups).run())[1]

    # ops: the step's 305 µs first, by then the data is there: 305 + 10 + 10, the wait is lost
    assert replay() == 325_000
    assert replay(comm="calibrated", comm_end_ns=ends) == 335_000  # + the send's 10 µs share
    # timeline: 5 µs, wait for the send (300), 10 µs share, 310 µs, 10 µs: the recorded 630 µs
    assert replay(comm="calibrated", comm_end_ns=ends, host_ns=host_ns) == 630_000


def test_timeline_async_call_with_host_ops_under_it_blocks_only_the_wait_before_its_waiter():
    """Op 3 runs under the call (20..70); op 4 needs the call, which ended at 110, and began at
    120: 70..110 was the wait for it (the replay re-creates it from op 4's edge), 110..120 came
    after it (op 4's), and 10..20, after the call was issued, is op 3's. Replayed: op 1 0..10,
    the call 10..110, op 3 10..70, op 4 110..125, as recorded."""
    nodes = [host(1, 0, 10), coll(2, 64, deps=(1,), start=T0 + 10, us=100), host(3, 20, 50, deps=(1,)),
             host(4, 120, 5, deps=(2, 3))]
    t = read_timeline(nodes)
    assert t.host_ns == {1: 10_000, 3: 60_000, 4: 15_000}
    assert t.comm_end_ns == {2: (T0 + 110) * 1000}


def test_timeline_time_after_an_async_call_is_issued_does_not_hold_the_call_back():
    """DDP's last bucket (seed 110 of bench/fidelity_fuzz.py, +17.7%): the reducer's copy (0..4)
    issues the all-reduce at 170, then the caller stalls until backward goes on at 5,600. Given to
    the copy, the stall delayed the call by 5.4 ms in the replay; it came after the call."""
    nodes = [host(1, 0, 4), coll(2, 64, deps=(1,), start=T0 + 170, us=9000), host(3, 5600, 8, deps=(1,))]
    t = read_timeline(nodes)
    assert t.host_ns == {1: 170_000, 3: 5_438_000}


def test_timeline_wait_for_an_earlier_call_before_its_waiter_is_blocked_time():
    """DDP's finalize: bucket 0's all-reduce (0..9,000) runs while the last bucket's call is
    issued at 300; the reducer waits (untraced) for bucket 0 and copies it back at 9,100, an op
    that needs bucket 0. 300..9,000 was that wait, the replay's to re-create; 9,000..9,100 is the
    copy's."""
    nodes = [coll(1, 64, start=T0, us=9000), host(2, 10, 5), coll(3, 64, deps=(2,), start=T0 + 300, us=9000),
             host(4, 9100, 5, deps=(1, 2))]
    t = read_timeline(nodes)
    assert t.host_ns == {2: 290_000, 4: 105_000}


def test_timeline_worker_end_after_the_caller_resumed_is_cut_to_the_resume():
    """gloo's worker closed its range at 900 µs; the op that needed the result began at 300."""
    nodes = [host(1, 0, 10), coll(2, 64, deps=(1,), start=T0 + 100, us=800), host(3, 300, 5, deps=(2,))]
    t = read_timeline(nodes)
    assert t.comm_end_ns == {2: (T0 + 300) * 1000} and t.host_ns == {1: 100_000, 3: 5_000}


def test_a_call_issued_after_a_blocking_call_shows_the_rank_back_from_it():
    """A mixture of experts' backward (seed of bench/whatif_check.py's --job moeC): an async
    gradient all-reduce (100..700), an all-to-all the rank blocks in (200..300), a second
    all-reduce issued at 310, then the wait for the first at 700, an op that needs both. The
    all-to-all ended at 300, not at the wait: taken to the wait, it held every rank of the
    replay 28 ms past its end (+4.6% on the step)."""
    nodes = [host(1, 0, 10), coll(2, 64, deps=(1,), start=T0 + 100, us=600),
             coll(3, 64, deps=(1,), start=T0 + 200, us=100), coll(4, 64, deps=(3,), start=T0 + 310, us=300),
             host(5, 700, 5, deps=(2, 3))]
    t = read_timeline(nodes)
    assert t.comm_end_ns[3] == (T0 + 300) * 1000


def test_timeline_untraced_wait_for_an_async_call_is_blocked_time():
    """`work.wait()` is not traced and not linked: no host op ran during the call, the last one
    had ended, so the rank was waiting for it."""
    nodes = [host(1, 0, 10), coll(2, 64, deps=(1,), start=T0 + 50, us=400), host(3, 500, 5, deps=(1,))]
    assert read_timeline(nodes).host_ns == {1: 50_000, 3: 55_000}  # 50..450 blocked, 450..500 after it


def test_timeline_traced_wait_beside_its_call_keeps_the_time():
    """A `wait_tensor` that starts before its call and spans it, with no edge from the call:
    the replay re-creates that wait only through the op's own time, so nothing is removed."""
    nodes = [host(1, 0, 10), host(2, 40, 500, deps=(1,)), coll(3, 64, deps=(1,), start=T0 + 50, us=400),
             host(4, 600, 5, deps=(2,))]
    assert read_timeline(nodes).host_ns == {1: 40_000, 2: 560_000, 4: 5_000}


def test_timeline_traced_wait_with_its_edge_loses_the_blocked_part():
    nodes = [host(1, 0, 10), coll(3, 64, deps=(1,), start=T0 + 50, us=400), host(2, 40, 500, deps=(1, 3)),
             host(4, 600, 5, deps=(2,))]
    assert read_timeline(nodes).host_ns == {1: 40_000, 2: 160_000, 4: 5_000}


def test_the_tail_after_the_last_traced_op_is_kept_up_to_the_measured_window():
    """A parent (`aten::mul`, 1000..1400) whose last child ends at 1030: its 370 µs after the
    child end the recorded window and were dropped; on a CPU rank they now stay with the last
    host op. A rank with device compute keeps the old rule (its window may end in a kernel)."""
    mul = host(1, 0, 370)              # exclusive: 400 - 30
    child = host(2, 10, 20, deps=(1,))  # the last host op to start
    window_end = (T0 + 400) * 1000
    assert read_timeline([mul, child]).host_ns[2] == 20_000
    assert read_timeline([mul, child], window_end).host_ns[2] == 390_000  # 1010..1400
    kernel = comp(3, us=5, deps=(2,), start=T0 + 30)
    assert read_timeline([mul, child, kernel], window_end).host_ns[2] == 20_000


def test_the_untraced_wait_before_a_wait_mark_is_the_replays_to_re_create():
    """An async all-reduce (1100..1480) overlapped by compute (1150..1200), then Work.wait()
    (untraced) until 1500, where trace-capture marked its return: the wait leaves the compute
    op's re-timed time (the replay re-creates it from the call the mark depends on)."""
    from chakra_tools.core.model import make_attrs

    ar = coll(1, 4096, start=T0 + 100, us=380)
    compute = host(2, 150, 50)
    mark = Node(3, "wait", NodeType.COMP_NODE, (1, 2), start_time_micros=T0 + 500, duration_micros=1,
                attrs=make_attrs(is_cpu_op=True, wait_mark=True))
    after = host(4, 510, 10, deps=(3,))
    t = read_timeline([ar, compute, mark, after])
    assert t.host_ns[2] == 50_000  # was 350 µs: the wait charged as compute
    assert t.comm_end_ns[1] == (T0 + 480) * 1000  # its recorded end, before the mark
    unmarked = mark._replace(attrs=make_attrs(is_cpu_op=True))  # any op that needs the call
    assert read_timeline([ar, compute, unmarked, after]).host_ns[2] == 50_000
    no_edge = mark._replace(data_deps=(2,), attrs=make_attrs(is_cpu_op=True))
    assert read_timeline([ar, compute, no_edge, after]).host_ns[2] == 350_000  # nothing says it waited


def _called(node, call_us, worker=None):
    """`node` as the converter writes a gloo call its worker took up after the rank called it."""
    attrs = dict(node.attrs)
    attrs.update(make_attrs(call_start_us=T0 + call_us, **({} if worker is None else {"stream": worker})))
    return node._replace(attrs=attrs)


def test_a_call_arrives_when_its_rank_called_it_not_when_gloos_worker_took_it_up():
    """Seed 120 of bench/fidelity_fuzz.py (-23%): an async barrier called at 100 µs, taken up by
    gloo's worker at 6,100 (a loaded host), compute from 150 on. Its arrival is 100: the replay
    issues it there, and the calibrated share counts from the last arrival, so the wake-up is
    the call's; before, the share began at 6,100 and the replay finished it 6 ms early."""
    barrier = _called(coll(2, 4, deps=(1,), start=T0 + 6100, us=500), 100, worker=7)
    t = read_timeline([host(1, 0, 100), barrier, host(3, 150, 40, deps=(1,))])
    assert t.comm_start_ns[2] == (T0 + 100) * 1000 and t.comm_end_ns[2] == (T0 + 6600) * 1000
    assert t.host_ns == {1: 100_000, 3: 90_000}  # 100..150, after the call, is op 3's


def test_a_call_queued_behind_its_workers_previous_call_arrives_when_the_worker_was_free():
    """Two async all-reduces on one gloo worker (7): the second, called at 200, waited in the
    queue until the first ended at 1,000, which the replay re-creates on the worker's lane."""
    first = _called(coll(2, 64, deps=(1,), start=T0 + 110, us=890), 100, worker=7)
    second = _called(coll(3, 64, deps=(1,), start=T0 + 1050, us=400), 200, worker=7)
    t = read_timeline([host(1, 0, 100), first, second, host(4, 1500, 5, deps=(2, 3))])
    assert t.comm_start_ns == {2: (T0 + 100) * 1000, 3: (T0 + 1000) * 1000}

def test_a_synchronous_call_queued_behind_an_async_one_blocks_its_rank_from_the_call():
    """FSDP's backward (bench/whatif_check.py, +7.6% as captured): a reduce-scatter runs on gloo's
    worker 7 (110..1,000) under a layer's compute (op 2); the next one goes to worker 8 (450);
    the next layer's all-gather, synchronous, is called at 500 but worker 7 takes it up at 1,000;
    op 4 follows its return at 1,400. The rank was blocked in the all-gather from 500 on, and the
    replay re-creates the queue wait on worker 7's lane, so 500..1,000 is no host op's time.
    Before, it went to op 4 as untraced time and was waited for twice."""
    rs0 = _called(coll(10, 64, deps=(1,), start=T0 + 110, us=890), 100, worker=7)
    rs1 = _called(coll(11, 64, deps=(2,), start=T0 + 460, us=2000), 450, worker=8)
    ag = _called(coll(12, 64, deps=(2,), start=T0 + 1000, us=390), 500, worker=7)
    t = read_timeline([host(1, 0, 100), rs0, host(2, 300, 100, deps=(1,)), rs1, ag,
                       host(4, 1400, 5, deps=(12,)), host(5, 2500, 5, deps=(4, 10, 11))])
    assert t.comm_start_ns[12] == (T0 + 1000) * 1000  # the replay starts it when its worker was free
    assert t.comm_end_ns[12] == (T0 + 1400) * 1000
    assert t.host_ns[2] == 350_000  # 100..450: after rs0 was issued, its own time, Python until rs1
    assert t.host_ns[4] == 55_000  # 450..500 (after rs1 was issued) and its own 5 µs


def test_an_op_of_the_call_that_ran_before_the_worker_took_it_up_does_not_unblock_it():
    """funcol's `_wrap_tensor_autograd` (3, part of the call, after it in the graph) began at 300,
    between the rank's arrival (200) and the worker's start (400); the rank then waited until
    1,400. The wait is the replay's to re-create, not the wrapper's time."""
    gather = _called(coll(2, 64, deps=(1,), start=T0 + 400, us=1000), 200, worker=7)
    t = read_timeline([host(1, 0, 100), gather, host(3, 300, 20, deps=(2,)), host(4, 1450, 5, deps=(3,))])
    assert t.host_ns == {1: 200_000, 3: 50_000, 4: 5_000}  # 200..1,400 blocked; 1,400..1,450 op 3's


def test_the_calls_own_ops_after_its_start_do_not_unblock_it_through_a_chain():
    """FSDP's synchronous all-gather on gloo (bench/whatif_check.py, +3.7% as captured): gloo
    splits the output into a view per rank before its worker takes the call up — `aten::chunk`
    reads the output (so depends on the call), then `narrow`, `as_strided`, `empty`, each after
    the op before. None of them is independent of the call: the rank was blocked from 200 to
    1,400, not busy in `empty` for 1.2 ms (which the replay ran after the call, waiting twice)."""
    gather = _called(coll(2, 64, deps=(1,), start=T0 + 400, us=1000), 200, worker=7)
    t = read_timeline([host(1, 0, 100), gather, host(3, 210, 5, deps=(2,)), host(4, 220, 5, deps=(3,)),
                       host(5, 230, 5, deps=(4,)), host(6, 1450, 5, deps=(5,))])
    # 200..1,400 blocked; the call's ops hold none of it, the last of them 1,400..1,450 after it
    assert (t.host_ns[3], t.host_ns[4], t.host_ns[5], t.host_ns[6]) == (0, 0, 50_000, 5_000)
    assert t.comm_end_ns[2] == (T0 + 1400) * 1000
    unrelated = read_timeline([host(1, 0, 100), gather, host(3, 210, 5, deps=(2,)), host(4, 220, 5, deps=(1,)),
                               host(6, 1450, 5, deps=(3, 4))])
    assert unrelated.host_ns[4] > 1_000_000  # an op of its own inside the call: the rank was busy there


def test_calibrated_shares_count_from_the_arrivals_given():
    from chakra_tools.feed.info import NodeInfo
    from chakra_tools.replay.calibrate import calibrated_ns

    def info(i, start, us):
        return NodeInfo(i, f"coll{i}", int(NodeType.COMM_COLL_NODE), us, False, 0, 0, 0, 64, None, None, None,
                        "", None, T0 + start)

    a, b = info(1, 100, 900), info(2, 700, 400)
    assert calibrated_ns([a, b]) == [300_000, 400_000]  # from the last start, 700
    assert calibrated_ns([a, b], starts_ns=[None, (T0 + 300) * 1000]) == [700_000, 800_000]  # from 300


def test_a_call_recorded_as_its_launch_alone_lasts_as_long_as_its_peers_say():
    """Seed 218 (-37.5%): rank 0's bucket all-reduce took 31 ms (a stalled peer), rank 1's
    record holds only its launch (80 µs, backend op lost). Its end is unknown, not 80 µs: the
    share is rank 0's, where before every member got the 80 µs (the shortest recorded)."""
    from chakra_tools.replay.recorded import UNKNOWN_END

    launch = coll(2, 64, deps=(1,), start=T0 + 100, us=80)
    launch = launch._replace(attrs={**launch.attrs, **make_attrs(launch_only=True)})
    t = read_timeline([host(1, 0, 100), launch, host(3, 190, 10, deps=(1,))])
    assert t.comm_end_ns == {2: UNKNOWN_END}
    waited = read_timeline([host(1, 0, 100), launch, host(3, 5000, 10, deps=(1, 2))])
    assert waited.comm_end_ns == {2: (T0 + 5000) * 1000}  # the next op needed it: it says when
    assert waited.host_ns == {1: 100_000, 3: 10_000}  # and the rank waited for it, no op's time
    later = read_timeline([host(1, 0, 100), launch, host(3, 190, 10, deps=(1,)), host(4, 5000, 10, deps=(2, 3))])
    assert later.comm_end_ns == {2: UNKNOWN_END}  # op 3 ran in between: done some time before op 4


def test_an_op_inside_the_call_is_not_what_waited_for_it():
    """Seed 315 (+10.4%): funcol's all-gather, taken up by gloo's worker at 400, returned to the
    script at 460 (`call_end_us`) after `_wrap_tensor_autograd` (3, 402..452, chained after the
    call); the script then waited inside `wait()` until 3,400. The wrapper did not wait: the call
    completed at its end, not at 402, and 460..3,400 is the wait the replay re-creates."""
    gather = _called(coll(2, 64, deps=(1,), start=T0 + 400, us=3000), 200, worker=7)
    gather = gather._replace(attrs={**gather.attrs, **make_attrs(call_end_us=T0 + 460)})
    t = read_timeline([host(1, 0, 100), gather, host(3, 402, 50, deps=(2,)), host(4, 3450, 5, deps=(3,))])
    assert t.comm_end_ns == {2: (T0 + 3400) * 1000}
    assert t.host_ns == {1: 200_000, 3: 50_000, 4: 5_000}


@pytest.mark.parametrize("is_async, rank0_ends_us", [(False, 710), (True, 325)])
def test_a_blocking_send_keeps_its_time_after_its_receive_and_an_isend_does_not(tmp_path, is_async, rank0_ends_us):
    """Rank 0 sent at 300 µs; rank 1's receive, posted at 5, was done at 315; rank 0's blocking
    `send` returned only at 700 (its process descheduled on a busy machine), and its next op ran
    then: replayed as captured, it still does. An `isend`'s record stays open until the script
    waits for it, so its end is taken no later than its receive's (rank 0's next op at 315)."""
    from chakra_tools.replay import AS_CAPTURED, replay_rankset

    sent = send(2, dst=1, size=64, deps=(1,), start=T0 + 300, us=400)
    sent = sent.replace(attrs={**sent.attrs, **make_attrs(is_async=is_async)})
    prefix = write_rankset(tmp_path, {
        0: [host(1, 0, 300), sent, host(3, 700 if not is_async else 315, 10, deps=(2,))],
        1: [host(1, 0, 5), recv(2, src=0, size=64, deps=(1,), start=T0 + 5, us=310), host(3, 315, 10, deps=(2,))]})
    ranks = {r["rank"]: r["finish_ns"] for r in replay_rankset(prefix, modes=AS_CAPTURED).to_dict()["ranks"]}
    assert ranks[0] == pytest.approx(rank0_ends_us * 1000, abs=2_000)
    assert ranks[1] == pytest.approx(325_000, abs=2_000)
