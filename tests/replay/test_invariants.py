"""Invariants over random DAGs and rank sets (hypothesis)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings, strategies as st

from chakra_tools.core.model import CommType
from chakra_tools.feed.info import NodeInfo
from chakra_tools.replay.api import open_rankset
from chakra_tools.replay.engine import Replayer
from chakra_tools.replay.timing import Modelled

from _util import backend, coll, comp, recv, ring_net, send, write_rankset


@st.composite
def ranksets(draw):
    """2-4 ranks; each a random DAG of compute nodes (GPU and host) with the same sequence of
    communication steps (chained, as a training step issues them): collectives, and ring exchanges
    (send to the next rank, receive from the previous one, same tag); ids shuffled within each rank."""
    nranks = draw(st.integers(2, 4))
    ncoll = draw(st.integers(0, 3))
    sizes = [draw(st.sampled_from([1024, 65536, 1 << 20])) for _ in range(ncoll)]
    kinds = [draw(st.sampled_from([CommType.ALL_REDUCE, CommType.ALL_GATHER, CommType.REDUCE_SCATTER,
                                   "exchange"])) for _ in range(ncoll)]
    ranks = {}
    for r in range(nranks):
        ncomp = draw(st.integers(1, 12))
        total = ncomp + ncoll
        ids = draw(st.permutations(range(1, total + 1)))
        nodes, prev_coll = [], None
        coll_at = sorted(draw(st.lists(st.integers(0, total - 1), min_size=ncoll, max_size=ncoll, unique=True)))
        k = 0
        for pos in range(total):
            nid = ids[pos]
            earlier = [x.id for x in nodes]
            deps = draw(st.lists(st.sampled_from(earlier), max_size=2, unique=True)) if earlier else []
            if k < ncoll and pos == coll_at[k]:
                if prev_coll is not None and prev_coll not in deps:
                    deps.append(prev_coll)
                if kinds[k] == "exchange":
                    nodes.append(send(nid, dst=(r + 1) % nranks, size=sizes[k], tag=k, deps=deps))
                    rid = max(ids) + 1 + k  # receive ids come after every shuffled id
                    nodes.append(recv(rid, src=(r - 1) % nranks, size=sizes[k], tag=k, deps=[nid]))
                    prev_coll = rid
                else:
                    nodes.append(coll(nid, sizes[k], deps=deps, kind=kinds[k]))
                    prev_coll = nid
                k += 1
            else:
                nodes.append(comp(nid, us=draw(st.integers(0, 20)), deps=deps, cpu=draw(st.booleans())))
        ranks[r] = nodes
    return ranks


def _replay(prefix, staggered: bool = False):
    """Replayed with every member of a collective from the last arrival (`Modelled`), where a
    rank's longest path with each collective's full time is a lower bound; `Staggered` (the
    default) lets a late member leave after less, as ASTRA-sim does."""
    feeders, groups = open_rankset(prefix)
    be = backend(ring_net(4), splits=2)
    return Replayer(feeders, be if staggered else Modelled(be), groups=groups).run(), be


def _longest_path(nodes, be, nranks) -> int:
    """Longest path through one rank's DAG, each node weighted by its own cost (a lower bound of
    any schedule)."""
    by_id = {n.id: n for n in nodes}
    memo: dict[int, int] = {}

    def cost(n):
        if n.type.name in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
            return 0  # a lower bound: the transfer may overlap anything
        if n.type.name == "COMM_COLL_NODE":
            return be.collective_ns(n.comm_type, n.comm_size, list(range(nranks)))
        return be.compute_ns(0, NodeInfo(n.id, n.name, int(n.type), n.duration_micros, n.is_cpu_op,
                                         0, 0, None, 0, None, None, None, "", None))

    def finish(i):
        if i not in memo:
            n = by_id[i]
            memo[i] = max((finish(d) for d in n.deps), default=0) + cost(n)
        return memo[i]

    return max(finish(i) for i in by_id)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(ranksets())
def test_replay_invariants(tmp_path_factory, ranks):
    prefix = write_rankset(tmp_path_factory.mktemp("rs"), ranks)
    r, be = _replay(prefix)
    ev = {(r.ev_rank[i], r.ev_node[i]): (r.ev_start[i], r.ev_end[i]) for i in range(len(r.ev_node))}
    # every node issued exactly once
    assert len(ev) == len(r.ev_node) == sum(len(v) for v in ranks.values())
    nsend = sum(n.type.name == "COMM_SEND_NODE" for v in ranks.values() for n in v)
    assert len(r.pairs) == nsend  # every send met its receive
    # none before its dependencies finish
    for rank, nodes in ranks.items():
        for n in nodes:
            for d in n.deps:
                assert ev[(rank, n.id)][0] >= ev[(rank, d)][1], (rank, n.id, d)
    # makespan at least the critical path (per-rank longest path, and our own critical path)
    lower = max(_longest_path(nodes, be, len(ranks)) for nodes in ranks.values())
    assert r.makespan_ns >= lower
    assert r.makespan_ns >= r.critical_path_ns()
    assert r.critical_path and r.ev_end[r.critical_path[-1]] == r.makespan_ns
    # the same input gives the same timeline, byte for byte, either way of starting collectives
    for staggered in (False, True):
        r1, _ = _replay(prefix, staggered)
        r2, _ = _replay(prefix, staggered)
        assert r1.timeline().dumps() == r2.timeline().dumps()
        assert json.dumps(r1.to_dict()) == json.dumps(r2.to_dict())
    # staggered too: every node once, none before its dependencies finish
    st_, _ = _replay(prefix, True)
    sev = {(st_.ev_rank[i], st_.ev_node[i]): (st_.ev_start[i], st_.ev_end[i]) for i in range(len(st_.ev_node))}
    assert sev.keys() == ev.keys()
    assert all(sev[(rank, n.id)][0] >= sev[(rank, d)][1] for rank, nodes in ranks.items() for n in nodes for d in n.deps)
