"""FSDP2 (`fully_shard`) over gloo on 2 ranks, captured for real: every unit's all-gather (before
its forward and its backward) and reduce-scatter converted with the sizes FSDP moves, and the
capture replayed as captured."""

from __future__ import annotations

from collections import Counter
from math import ceil

from chakra_tools.convert.run import convert, inputs_from_run
from chakra_tools.core.model import CommType, NodeType
from chakra_tools.replay import AS_CAPTURED, AnalyticalBackend, default_network, replay
from chakra_tools.replay.fidelity import compare_with_manifest
from capture_helpers import EXAMPLES, LAUNCH_2, run_capture

WIDTH, LAYERS, RANKS = 64, 2, 2


def shard_bytes(a: int, b: int) -> int:
    """A Linear(a, b)'s float32 shard: weight and bias split on dim 0, padded to the world."""
    return 4 * ceil(b / RANKS) * (a + 1)


def test_fsdp_collectives_sizes_and_replay(tmp_path):
    run = run_capture(["-o", "run", "--", *LAUNCH_2, str(EXAMPLES / "fsdp.py"), "--steps", "6",
                       "--width", str(WIDTH), "--layers", str(LAYERS)], cwd=tmp_path,
                      folder=tmp_path / "run", timeout=240)
    assert run.code == 0, run.stderr[-3000:]
    steps = len(run.manifest["captured_steps"])
    report = convert(inputs_from_run(run.folder), tmp_path / "et", executor="serial")
    dims = [64] + [WIDTH] * LAYERS + [1]
    shards = Counter(shard_bytes(a, b) for a, b in zip(dims, dims[1:]))
    for g in report.rankset:
        colls = [n for n in g if n.type is NodeType.COMM_COLL_NODE]
        gathers = Counter(n.comm_size for n in colls if n.comm_type is CommType.ALL_GATHER)
        scatters = Counter(n.comm_size for n in colls if n.comm_type is CommType.REDUCE_SCATTER)
        assert gathers == Counter({s: 2 * k * steps for s, k in shards.items()})  # forward and backward
        assert scatters == Counter({RANKS * s: k * steps for s, k in shards.items()})
    result = replay(tmp_path / "et", AnalyticalBackend(default_network(RANKS)), modes=AS_CAPTURED)
    fid = compare_with_manifest(result.to_dict(events=False), run.folder / "manifest.json")
    assert fid["job"]["predicted_ns"] > 0 and len(fid["ranks"]) == RANKS
