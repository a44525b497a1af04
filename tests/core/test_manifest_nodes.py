"""A job captured one `trace-capture` per node: each node's manifest lists its own ranks and its
place in the launch; `read_manifest` of the run folder (or `read_job` of the node folders) is the
whole job, or an InputError naming what does not fit. The test bed's real multi-node capture is
in tests/testbed."""

from __future__ import annotations

import json

import pytest

from chakra_tools.capture.command import launcher_nodes
from chakra_tools.core.errors import InputError
from chakra_tools.core.manifest import read_job, read_manifest


def node_manifest(node: int, *, count: int = 2, per_node: int = 2, job: str = "10.0.0.1:29500",
                  world: int = 4) -> dict:
    host = f"host{node}"
    ranks = [node * per_node + i for i in range(per_node)]
    return {"format": "chakra-tools-capture/1", "host": host, "status": "ok", "exit_code": 0,
            "world_size": world, "backend": "gloo", "captured_steps": [2, 3],
            "process_groups": [{"name": "0", "desc": "default_pg", "ranks": list(range(world))}],
            "ranks": [{"rank": r, "host": host, "node_rank": node, "host_trace": f"rank-{r}.host.json.gz",
                       "device_trace": f"rank-{r}.device.json.gz", "captured_steps": [2, 3],
                       "step_times_ns": [5, 5, 5, 5], "status": "ok"} for r in ranks],
            "node": {"rank": node, "count": count, "host": host, "ranks": ranks, "expected_ranks": per_node},
            "job_id": job}


def write(folder, doc):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(doc))
    return folder


def test_node_folders_of_one_run_folder_are_one_job(tmp_path):
    for k in (0, 1):
        write(tmp_path / "run" / f"node-{k}", node_manifest(k))
    man = read_manifest(tmp_path / "run")
    assert [r.rank for r in man.ranks] == [0, 1, 2, 3]
    assert [r.host for r in man.ranks] == ["host0", "host0", "host1", "host1"]
    assert man.trace_path(man.ranks[3].host_trace) == tmp_path / "run" / "node-1" / "rank-3.host.json.gz"
    assert len(man.nodes) == 2 and man.job_id == "10.0.0.1:29500"


def test_one_folder_per_node_anywhere(tmp_path):
    a = write(tmp_path / "a", node_manifest(0))
    b = write(tmp_path / "elsewhere" / "b", node_manifest(1))
    man = read_job([a, b])
    assert [r.rank for r in man.ranks] == [0, 1, 2, 3]
    assert man.trace_path(man.ranks[2].host_trace) == b / "rank-2.host.json.gz"


def test_a_node_missing_or_read_alone_is_named(tmp_path):
    write(tmp_path / "run" / "node-0", node_manifest(0))
    with pytest.raises(InputError, match=r"ran 2 nodes but node\(s\) \[1\] left no capture"):
        read_manifest(tmp_path / "run")
    with pytest.raises(InputError, match="node 0 of a 2-node launch, not the whole job"):
        read_manifest(tmp_path / "run" / "node-0")


@pytest.mark.parametrize("docs, message", [
    ([node_manifest(0), node_manifest(1, job="10.0.0.1:29501")], "different launches"),
    ([node_manifest(0), node_manifest(0)], "node 0 was captured twice"),
])
def test_what_does_not_make_one_job_is_named(tmp_path, docs, message):
    folders = [write(tmp_path / f"n{i}", d) for i, d in enumerate(docs)]
    with pytest.raises(InputError, match=message):
        read_job(folders)


def test_the_node_of_a_launch_is_read_off_torchrun():
    assert launcher_nodes(["torchrun", "--nnodes", "4", "--node-rank=3", "train.py"]).rank == 3
    assert launcher_nodes(["torchrun", "--nnodes=1:4", "--node_rank", "2", "t.py"]).count == 4
    assert launcher_nodes(["python", "train.py", "--nnodes", "2"]) is None


def test_a_failed_runs_conversion_names_the_cause_trace_capture_found(tmp_path):
    """Rank 1 raised before the window; rank 0 then lost its peer. Converting the run names rank
    1's exception (the manifest's run error), not rank 0's connection error."""
    from chakra_tools.convert.run import inputs_from_run

    doc = {"format": "chakra-tools-capture/1", "host": "h", "status": "rank-failed", "exit_code": 1,
           "error": "rank 1: RuntimeError: rank 1 failing on purpose", "world_size": 2, "backend": "gloo",
           "captured_steps": [], "process_groups": [],
           "ranks": [{"rank": 0, "status": "script-error", "error": "RuntimeError: Connection closed by peer",
                      "host_trace": None, "device_trace": None, "captured_steps": [], "step_times_ns": []},
                     {"rank": 1, "status": "script-error", "error": "RuntimeError: rank 1 failing on purpose",
                      "host_trace": None, "device_trace": None, "captured_steps": [], "step_times_ns": []}]}
    with pytest.raises(InputError, match="the run failed \\(rank-failed\\): rank 1: RuntimeError: rank 1 failing"):
        inputs_from_run(write(tmp_path / "run", doc))
