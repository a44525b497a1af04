"""Calls in flight at once share a machine's uplink (replay/sharing.py), by hand: what the test
bed measured for gloo over a tbf-shaped uplink (a 512 KiB reduce-scatter and a 128 KiB
all-gather started together end at 95 and 64 ms, 63 and 31 ms alone)."""

from __future__ import annotations

from chakra_tools.core.model import CommType
from chakra_tools.replay.api import CaptureModes, open_rankset, run_replay
from chakra_tools.replay.fabric import Fabric, Level
from chakra_tools.replay.library import LibraryBackend

from _util import backend, coll, write_rankset

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


def test_calls_that_cross_no_shared_link_do_not_slow_each_other(tmp_path):
    """Groups within one machine each: their rings never leave it."""
    prefix = write_rankset(tmp_path, {r: [coll(1, 1 << 20, pg="1" if r < 2 else "2")] for r in range(4)},
                           {"1": [0, 1], "2": [2, 3]})
    be = LibraryBackend(backend(), FABRIC)
    feeders, groups = open_rankset(prefix)
    result = run_replay(prefix, feeders, be, groups=groups, modes=CaptureModes())
    alone = be._call(int(CommType.ALL_REDUCE), 1 << 20, (0, 1))[0]
    assert [c["end_ns"] for c in result.collectives] == [alone, alone]
