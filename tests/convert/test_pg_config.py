"""A process group that lists a rank twice (issue 32): the converter wrote it into a
comm_group.json that trace-validate then refused. Now the repeat is dropped with a warning naming
the trace and the group when what is left is the group its size says (or no size is given), and
the conversion is refused, naming the trace and the group, when it is not (which member the
repeat stands for is unknown).

The inputs are two ranks' Kineto traces made here, in the layout PyTorch writes
(`distributedInfo.pg_config`, an NCCL kernel with `Process Group Ranks`), converted as device
traces alone through the CLI.
"""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from chakra_tools.cli.convert import app as convert_app
from chakra_tools.cli.validate import app as validate_app

runner = CliRunner()


def _device_doc(rank: int, groups: list[dict], kernel_ranks: str = "[0, 1]") -> dict:
    return {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 2, "pg_config": groups},
            "traceEvents": [
                {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 100, "dur": 10,
                 "args": {"Record function id": 5}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                 "ts": 102, "dur": 3, "args": {"correlation": 7}},
                {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 8,
                 "ts": 120, "dur": 4, "args": {"correlation": 7, "stream": 8, "Collective name": "allreduce",
                                               "In msg nelems": 4, "Process Group Ranks": kernel_ranks}},
                {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}]}


WORLD = {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}


def _convert(tmp_path, groups: list[dict], kernel_ranks: str = "[0, 1]"):
    args = ["pytorch"]
    for r in range(2):
        path = tmp_path / f"rank{r}.kineto.json"
        path.write_text(json.dumps(_device_doc(r, groups, kernel_ranks)))
        args += ["--device", str(path)]
    return runner.invoke(convert_app, [*args, "-o", str(tmp_path / "out")])


def _groups(tmp_path) -> dict:
    return json.loads((tmp_path / "out" / "comm_group.json").read_text())


def test_a_repeated_rank_in_a_group_without_a_size_is_dropped_with_a_warning(tmp_path):
    res = _convert(tmp_path, [WORLD, {"pg_name": "1", "pg_desc": "tp", "ranks": [0, 1, 1]}])
    assert res.exit_code == 0, res.output
    assert (f"warning: {tmp_path / 'rank0.kineto.json'}: rank 0: distributedInfo.pg_config[1]: process group "
            "'1' lists rank 1 twice ([0, 1, 1]); the repeat is dropped: [0, 1] [group-rank-repeated]") in res.output
    assert sorted(map(tuple, _groups(tmp_path).values())) == [(0, 1), (0, 1)]
    check = runner.invoke(validate_app, [str(tmp_path / "out")])
    assert check.exit_code == 0 and "0 error(s)" in check.output, check.output


def test_a_repeated_rank_that_its_size_also_counts_is_kept_out_with_a_warning(tmp_path):
    """pg_size 2 and ranks [1, 0, 1]: without the repeat the group is the 2 ranks it says."""
    res = _convert(tmp_path, [WORLD, {"pg_name": "1", "pg_size": 2, "ranks": [1, 0, 1]}])
    assert res.exit_code == 0, res.output
    assert "process group '1' lists rank 1 twice ([1, 0, 1]); the repeat is dropped: [1, 0]" in res.output
    assert [1, 0] in _groups(tmp_path).values()


def test_a_repeated_rank_that_leaves_the_group_short_of_its_size_is_refused(tmp_path):
    res = _convert(tmp_path, [WORLD, {"pg_name": "1", "pg_size": 3, "ranks": [0, 1, 1]}])
    assert res.exit_code == 2, res.output
    # both ranks' traces list the group: the one whose conversion ends first is named
    assert re.search(re.escape(str(tmp_path)) + r"/rank[01]\.kineto\.json: " + re.escape(
        "distributedInfo.pg_config[1]: process group '1' lists rank 1 twice ([0, 1, 1]), and without the "
        "repeat it has 2 ranks, not the 3 its size says"), res.output), res.output
    assert "Traceback" not in res.output and not (tmp_path / "out").exists()


def test_a_repeated_rank_in_a_kernels_process_group_ranks_is_dropped_too(tmp_path):
    """No pg_config: the group's ranks come from the kernel's `Process Group Ranks`."""
    res = _convert(tmp_path, [], kernel_ranks="[0, 1, 0]")
    assert res.exit_code == 0, res.output
    assert "process group '0' lists rank 0 twice ([0, 1, 0]); the repeat is dropped: [0, 1]" in res.output
    assert list(_groups(tmp_path).values()) == [[0, 1]]
