"""The compiled event loop (`replay/_kernel.c`) against the Python loop it was written from
(engine.py, the reference): every event, its start, end, lane and what held it back, every
send/receive pair, collective, rank row and diagnostic the same, and the same error where the
input is bad; on generated jobs over random networks and algorithms, ASTRA-sim's and the text
workloads' sets, a real 8-GPU capture as captured, and small sets made for each path of the loop.
Where the compiled loop does not apply, the Python one runs and says so."""

from __future__ import annotations

import random

import pytest
from _util import backend, coll, comp, network_file, random_gpt_case, recv, ring_net, run, send, write_rankset

from chakra_tools.core.errors import InputError
from chakra_tools.core.model import CommType, Node, NodeType, make_attrs
from chakra_tools.feed import DeadlockError
from chakra_tools.frontends import TransformerConfig, generate
from chakra_tools.replay import AS_CAPTURED, SystemSpec, api, engine, parse_limits, replay_rankset
from chakra_tools.replay.api import open_rankset
from chakra_tools.replay.modes import recorded_starts
from chakra_tools.replay.timing import Captured

pytestmark = pytest.mark.skipif(engine.COMPILED is None, reason="the compiled kernel is not built (no C compiler)")

COLUMNS = ("rank", "node", "type", "lane", "start", "end", "pred", "name")


def same(python, compiled) -> None:
    assert python.config["kernel"] == "python" and compiled.config["kernel"] == "compiled"
    for column in COLUMNS:
        assert list(getattr(compiled, f"ev_{column}")) == list(getattr(python, f"ev_{column}")), column
    assert compiled.pairs == python.pairs
    assert compiled.cross == python.cross
    assert compiled.collectives == python.collectives
    assert compiled.ranks == python.ranks
    assert compiled.critical_path == python.critical_path
    assert [str(d) for d in compiled.diagnostics] == [str(d) for d in python.diagnostics]
    docs = [r.to_dict() for r in (python, compiled)]
    for doc in docs:
        del doc["config"]["kernel"]  # which loop ran: the one difference
    assert docs[1] == docs[0]


def both(replay):
    """`replay(kernel)` under each loop, compared; the compiled result."""
    python, compiled = replay("python"), replay("compiled")
    same(python, compiled)
    return compiled


def test_random_jobs_networks_and_algorithms(tmp_path):
    """Generated GPT layouts (tp, dp, pp, ZeRO stages: all-reduces, all-gathers, reduce-scatters
    and pipeline sends) on networks of 1-4 dimensions of every topology, every collective
    algorithm and both start rules."""
    rng = random.Random(11)
    kinds = set()
    for case in range(10):
        work, spec, modes, *_ = random_gpt_case(rng, tmp_path, case)
        result = both(lambda k: replay_rankset(work, spec, replicas="off", modes=modes, kernel=k))
        kinds |= {c["comm_type"] for c in result.collectives}
        kinds |= {"p2p"} if result.pairs else set()
    assert {"ALL_REDUCE", "p2p"} <= kinds and kinds & {"ALL_GATHER", "REDUCE_SCATTER"}, kinds


def test_a_policy_that_runs_its_own_events(tmp_path):
    """The congestion-aware network: its messages and phases are events on the loop's heap
    between the nodes' (the compiled loop keeps its entries on the engine's heap then); on
    generated jobs with pipeline sends over one and two dimensions (and a real capture, below)."""
    cases = [(2, 2, 2, ["Switch"], [8]), (2, 4, 1, ["Ring", "Switch"], [2, 4]), (1, 2, 2, ["FullyConnected"], [4])]
    for case, (tp, dp, pp, topology, npus) in enumerate(cases):
        work = tmp_path / f"c{case}"
        generate(TransformerConfig(layers=1, hidden=256, heads=4, seq=128, batch=8 * dp, vocab=1024, tp=tp, dp=dp,
                                   pp=pp, microbatches=2)).write(work)
        net = network_file(tmp_path, topology, npus, f"n{case}.yml")
        spec = SystemSpec(network=net, network_model="congestion-aware")
        result = both(lambda k: replay_rankset(work, spec, replicas="off", kernel=k))
        assert result.collectives and (result.pairs or pp == 1)


@pytest.mark.parametrize("options", [
    dict(),
    dict(modes=api.CaptureModes(coll_start="last")),
    dict(limits=parse_limits("compute=2,comm=0"), memory_on_comm=False, window=64),
    dict(modes=AS_CAPTURED.merged_with(lanes="kind")),
], ids=["model", "from the last arrival", "limits and a small window", "as captured"])
def test_a_text_workload_under_each_mode(mlp, options):
    both(lambda k: replay_rankset(mlp, replicas="off", kernel=k, **options))


@pytest.mark.parametrize("name, npus", [("all_reduce_4npus_1MB", 4), ("custom_ring_allreduce_8npus_1MB", 8)])
def test_astra_sims_own_sets(shared_fixtures, name, npus):
    """ASTRA-sim's examples: one all-reduce; a ring made of sends, receives and reductions."""
    result = both(lambda k: replay_rankset(shared_fixtures / "astra-sim" / name, validate=False, kernel=k))
    assert result.pairs or result.collectives


@pytest.fixture(scope="module")
def dlrm(shared_fixtures, unpack, tmp_path_factory):
    """PARAM's 8-GPU DLRM run (host and device traces), converted."""
    from chakra_tools.convert.run import convert as convert_pairs, inputs_from_files

    hosts, devs = unpack("param/dlrm_8rank_host_et.tar.gz"), unpack("param/dlrm_8rank_kineto.tar.gz")
    out = tmp_path_factory.mktemp("dlrm")
    report = convert_pairs(inputs_from_files([str(next(hosts.rglob(f"dlrm_eg_{r}.json"))) for r in range(8)],
                                             [str(next(devs.rglob(f"worker{r}_*.json"))) for r in range(8)], []),
                           out, executor="serial")
    assert not report.errors, report.errors[:3]
    return out


@pytest.mark.parametrize("modes, model", [(AS_CAPTURED.merged_with(lanes="kind"), "congestion-unaware"),
                                         (api.CaptureModes(), "congestion-unaware"),
                                         (api.CaptureModes(), "congestion-aware")],
                         ids=["as captured", "model", "congestion-aware"])
def test_a_real_gpu_capture(dlrm, modes, model):
    """Recorded durations, gaps and starts (ranks that begin late), NCCL collectives (DLRM's
    all_to_alls), host and device work side by side."""
    spec = SystemSpec(network_model=model)
    result = both(lambda k: replay_rankset(dlrm, spec, replicas="off", modes=modes, kernel=k))
    assert result.collectives and len(result.ev_node) > 1000


# -- each path of the loop, on sets made for it ---------------------------------------------------

def load(i, us=10, deps=()):
    return Node(i, f"load{i}", NodeType.MEM_LOAD_NODE, tuple(deps), duration_micros=us)


SETS = {
    "sends paired on tags, a receive posted late": (
        {0: [send(1, dst=1, size=4096, tag=7), comp(2, us=5), send(3, dst=1, size=64, tag=8, deps=(2,))],
         1: [comp(1, us=20), recv(2, src=0, size=64, tag=8, deps=(1,)), recv(3, src=0, size=4096, tag=7)]}, {}),
    "a window smaller than the dependency distance": (
        {0: [recv(1, src=1, size=8, tag=1), comp(2, deps=(1,)), comp(3, deps=(1,)), comp(4, deps=(1,)),
             send(5, dst=1, size=8, tag=2)],
         1: [recv(1, src=0, size=8, tag=2), send(2, dst=0, size=8, tag=1, deps=(1,))]}, dict(window=2)),
    "memory nodes and a collective on one slot": (
        {0: [load(1), load(2), coll(3, 1 << 20)], 1: [coll(3, 1 << 20)]}, {}),
    "memory nodes on a lane of their own, two compute ops at once": (
        {0: [load(1), load(2), coll(3, 1 << 20), comp(4), comp(5), comp(6, deps=(4, 5))], 1: [coll(3, 1 << 20)]},
        dict(limits={"compute": 2, "mem": 0})),
    "node ids past int64": (
        {0: [comp(2**63 + 5, us=3), comp(2**63 + 6, us=2, deps=(2**63 + 5,))]}, {}),
    "groups without a group file, sizes that differ": (
        {r: [coll(1, 4096, pg="1.0"), coll(2, 4096 * (r + 1), deps=(1,), pg="2.0")] for r in (0, 1)}, {}),
    "two groups, k-th meets k-th, host and device work side by side": (
        {r: [comp(1, cpu=True), coll(2, 1024, pg="a", deps=(1,)), comp(3, us=4), coll(4, 2048, pg="b"),
             coll(5, 512, pg="a", deps=(3,), kind=CommType.ALL_GATHER)] for r in range(4)},
        dict(groups={"a": [0, 1, 2, 3], "b": [3, 2, 1, 0]})),
}


@pytest.mark.parametrize("name", SETS)
def test_made_sets(tmp_path, name):
    ranks, kw = SETS[name]
    both(lambda k: run(tmp_path / k, ranks, kernel=k, **kw))


def test_ranks_that_begin_late_as_recorded(tmp_path):
    def k(i, start, deps=()):
        return Node(i, f"k{i}", NodeType.COMP_NODE, deps, start_time_micros=start, duration_micros=10,
                    attrs=make_attrs(is_cpu_op=False))

    prefix = write_rankset(tmp_path, {0: [k(1, 100), coll(2, 4096, deps=(1,))],
                                      1: [k(1, 150), coll(2, 4096, deps=(1,))]})

    def replay(kernel):
        feeders, groups = open_rankset(prefix)
        timing = Captured(backend(ring_net(2)), comm="model", start_ns=recorded_starts(feeders))
        return engine.Replayer(feeders, timing, groups=groups, kernel=kernel).run()

    assert both(replay).ranks[1]["start_ns"] == 50_000


# -- bad input: the same error from either loop ----------------------------------------------------

BAD = {
    "a group the file does not name": ({0: [coll(1, 8, pg="9")], 1: [coll(1, 8, pg="9")]}, {"1": [0, 1]},
                                       InputError),
    "a rank outside its group": ({0: [coll(1, 8, pg="1")], 1: [coll(1, 8, pg="1")]}, {"1": [1]}, InputError),
    "no collective kind": ({0: [Node(1, "c", NodeType.COMM_COLL_NODE, attrs=make_attrs(comm_type=99, comm_size=8))]},
                           None, InputError),
    "a send without a destination": ({0: [Node(1, "s", NodeType.COMM_SEND_NODE, attrs=make_attrs(comm_size=8))]},
                                     None, InputError),
    "a finish past the 64-bit clock": ({0: [comp(1, us=2**62), comp(2, us=2**62, deps=(1,))]}, None, InputError),
    "groups issued in different orders": ({0: [coll(1, 8, pg="a"), coll(2, 8, pg="b", deps=(1,))],
                                           1: [coll(1, 8, pg="b"), coll(2, 8, pg="a", deps=(1,))]},
                                          {"a": [0, 1], "b": [0, 1]}, DeadlockError),
    "a receive nobody sends": ({0: [recv(1, src=1, size=8, tag=3)], 1: [comp(1)]}, None, DeadlockError),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_input_gives_the_same_error(tmp_path, name):
    ranks, groups, error = BAD[name]
    messages = []
    for kernel in engine.KERNELS[1:]:
        with pytest.raises(error) as caught:
            run(tmp_path / kernel, ranks, groups=groups, kernel=kernel)
        messages.append(str(caught.value).replace(f"/{kernel}/", "/"))
    assert messages[0] == messages[1]


# -- where it does not run -------------------------------------------------------------------------

def test_where_the_compiled_loop_does_not_apply_the_python_one_runs_and_says_why(tmp_path):
    ranks = {r: [comp(1, tid=1), coll(2, 4096, deps=(1,))] for r in (0, 1)}
    assert run(tmp_path / "a", ranks, lanes="stream").config["kernel"] == "python"
    assert run(tmp_path / "b", ranks).config["kernel"] == "compiled"
    with pytest.raises(InputError, match="does not run this replay: lanes are split per thread and stream"):
        run(tmp_path / "c", ranks, lanes="stream", kernel="compiled")
    prefix = write_rankset(tmp_path / "d", {0: ranks[0]}, {"0": [0, 1]})
    with pytest.raises(InputError, match="absent peers are assumed"):
        replay_rankset(prefix, absent_peers=True, kernel="compiled")
    with pytest.raises(InputError, match="kernel 'fast': use auto, compiled, python"):
        run(tmp_path / "e", ranks, kernel="fast")


# -- the ranks' figures: compiled (`_kernel.rank_stats`) and the Python reference -------------------

def python_rows(result, world, starts=None):
    from chakra_tools.replay.result import ReplayResult

    lanes: dict = {r: {} for r in world}
    for rank, lane, start, end in zip(result.ev_rank, result.ev_lane, result.ev_start, result.ev_end):
        lanes[rank].setdefault(lane, []).append((start, end))
    return [ReplayResult._rank_stats(r, lanes[r], (starts or {}).get(r, 0)) for r in world]


def test_rank_figures_compiled_and_python_agree_on_random_spans():
    """Spans that nest, touch, repeat and have no length, on every lane, sparse ranks, a rank
    with no event: compute, communication, their overlap, idle time and finish alike."""
    from array import array

    from chakra_tools.replay.result import ReplayResult

    rng, idle = random.Random(5), 0
    for case in range(30):
        world = sorted(rng.sample(range(40), rng.randint(1, 8)))
        result = ReplayResult()
        for _ in range(rng.randint(0, 300)):
            s = rng.choice([0, 5, 10]) + rng.randint(0, 200)
            result.add(rng.choice(world), 0, "", 4, rng.randint(0, 5), s, -1)
            result.ev_end[-1] = s + rng.choice([0, 0, 1, rng.randint(0, 80)])
        starts = {r: rng.randint(0, 20) for r in world}
        result.finalize(world, {}, result.diagnostics, starts)
        assert result.ranks == python_rows(result, world, starts), case
        idle += sum(r["idle_ns"] for r in result.ranks)
        assert isinstance(result.ev_lane, array)
    assert idle


def test_rank_figures_of_a_real_replay(dlrm):
    rows = []
    for modes in (AS_CAPTURED, api.CaptureModes()):
        result = replay_rankset(dlrm, replicas="off", modes=modes)
        assert result.ranks == python_rows(result, [r["rank"] for r in result.ranks],
                                           {r["rank"]: r["start_ns"] for r in result.ranks})
        rows += result.ranks
    assert [k for k in ("overlap_ns", "exposed_comm_ns", "compute_ns") if not any(r[k] for r in rows)] == []


@pytest.mark.parametrize("kernel, model", [("compiled", "congestion-unaware"), ("python", "congestion-unaware"),
                                           ("compiled", "congestion-aware")])
def test_a_finished_replay_lets_go_of_what_it_held(tmp_path, kernel, model):
    """With the collector off, the engine, its feeders and the policy are freed as soon as the
    replay returns: nothing of it waits for a full collection (a sweep of replays in one process
    grew by a replay each before: the engine's handlers, its kernel and a scheduling policy
    held it)."""
    import gc
    import weakref

    prefix = write_rankset(tmp_path, {r: [comp(1), coll(2, 1 << 16, deps=(1,)), send(3, dst=1 - r, size=64),
                                          recv(4, src=1 - r, size=64)] for r in (0, 1)})
    backend_ = SystemSpec(network_model=model).backend(2)
    feeders, groups = open_rankset(prefix)
    timing = api.CaptureModes().timing(prefix, feeders, backend_)
    replayer = engine.Replayer(feeders, timing, groups=groups, kernel=kernel)
    held = [weakref.ref(x) for x in (replayer, timing, feeders[0])]
    del feeders, timing
    gc.disable()
    try:
        result = replayer.run()
        del replayer
        assert [ref() for ref in held] == [None] * 3
    finally:
        gc.enable()
    assert result.collectives and result.pairs
