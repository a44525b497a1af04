"""A script that starts its own workers (`torch.multiprocessing.spawn`, or forked
`multiprocessing.Process`es; no rank in the environment) is captured on every worker, converts
and replays, as under torchrun."""

from __future__ import annotations

import pytest

from chakra_tools.convert.run import convert, inputs_from_run
from chakra_tools.core.model import CommType, NodeType
from chakra_tools.replay import AS_CAPTURED, AnalyticalBackend, default_network, replay
from capture_helpers import EXAMPLES, run_capture


@pytest.mark.parametrize("how", [[], ["--fork"]], ids=["torch.multiprocessing.spawn", "Process, forked"])
def test_workers_the_script_starts_capture_themselves(how, tmp_path):
    run = run_capture(["-o", "run", "--", str(EXAMPLES / "spawn_ddp.py"), "--steps", "6", *how], cwd=tmp_path,
                      folder=tmp_path / "run", timeout=240)
    assert run.code == 0, run.stderr[-3000:]
    m = run.manifest
    assert m["status"] == "ok" and m["world_size"] == 2 and m["captured_steps"] == [2, 3]
    assert [(r["rank"], r["status"], r["host_trace"]) for r in m["ranks"]] == [
        (0, "ok", "rank-0.host.json.gz"), (1, "ok", "rank-1.host.json.gz")]
    assert len({r["pid"] for r in m["ranks"]}) == 2  # two workers, not the script's own process
    report = convert(inputs_from_run(run.folder), tmp_path / "et", executor="serial")
    for g in report.rankset:
        reduces = [n for n in g if n.type is NodeType.COMM_COLL_NODE and n.comm_type is CommType.ALL_REDUCE]
        assert len(reduces) >= 2  # DDP's gradient bucket, each captured step
    result = replay(tmp_path / "et", AnalyticalBackend(default_network(2)), modes=AS_CAPTURED)
    assert len(result.ranks) == 2 and result.makespan_ns > 0
