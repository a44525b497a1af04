"""The test bed's mixture-of-experts surrogate (`--moe`: experts over the data-parallel group),
captured on 2 ranks of this machine (no test bed needed) and converted: four all-to-alls of the
activations per layer and step; `trace-convert scale` refuses to guess what they would be on
more ranks instead of misreading them as another parallelism, and keeps each rank's buffer where
told (`--all-to-all per-rank`)."""

from __future__ import annotations

import json
import subprocess

import pytest

from capture_helpers import LAUNCH_2, TORCHRUN, run_capture

from chakra_tools.convert.run import convert, inputs_from_run
from chakra_tools.convert.scale import scale
from chakra_tools.core.errors import ChakraToolsError
from chakra_tools.core.graph import RankSet
from chakra_tools.core.model import CommType

LAYERS, ACTIVATION_KIB, BUCKET_KIB = 2, 64, 32


def test_moe_surrogate_all_to_alls_convert_and_scale_refuses_them(tmp_path):
    run = tmp_path / "cap"
    done = run_capture(["--out", str(run), "--wait", "1", "--warmup", "0", "--active", "1", "--",
                        *LAUNCH_2, "-m", "chakra_tools.testbed.surrogate", "--moe", "--layers", str(LAYERS),
                        "--steps", "3", "--warmup", "1", "--activation-kib", str(ACTIVATION_KIB),
                        "--bucket-kib", str(BUCKET_KIB)], cwd=tmp_path, folder=run, timeout=240)
    assert done.code == 0, done.stderr[-2000:]
    et = tmp_path / "et"
    convert(inputs_from_run(run), et)
    rankset = RankSet.load(et)
    for rank, graph in rankset.graphs.items():
        calls = [n for n in graph if n.type.is_comm]
        a2a = [n for n in calls if n.comm_type == CommType.ALL_TO_ALL]
        assert len(a2a) == 4 * LAYERS, rank  # to the experts and back, forward and backward
        assert {n.comm_size for n in a2a} == {ACTIVATION_KIB * 1024}
        assert [n.comm_size for n in calls if n.comm_type == CommType.ALL_REDUCE] == [BUCKET_KIB * 1024] * LAYERS
    with pytest.raises(ChakraToolsError, match="ALL_TO_ALL"):
        scale(et, 4, tmp_path / "et-4")
    assert not (tmp_path / "et-4").exists()
    # experts spread over the larger group, each rank's tokens the same: its buffer kept, re-split
    report = scale(et, 4, tmp_path / "et-4", all_to_all="per-rank")
    assert report.new_ranks == 4 and report.resized["ALL_TO_ALL"] == 4 * 4 * LAYERS
    grown = RankSet.load(tmp_path / "et-4")
    for rank, graph in grown.graphs.items():
        a2a = [n for n in graph if n.type.is_comm and n.comm_type == CommType.ALL_TO_ALL]
        assert len(a2a) == 4 * LAYERS and {n.comm_size for n in a2a} == {ACTIVATION_KIB * 1024}
        assert {tuple(n.attrs["in_split"].value) for n in a2a} == {(ACTIVATION_KIB * 1024 // 4 // 4,) * 4}


def test_moe_surrogate_runs_on_a_group_its_activations_do_not_divide(tmp_path):
    """gloo's all-to-all wants a buffer that splits evenly over the group: on 3 ranks (a 3-node
    what-if of the test bed) 64 KiB of floats does not, and the surrogate rounds its tokens up."""
    result = tmp_path / "result.json"
    done = subprocess.run([*TORCHRUN, "--standalone", "--nproc-per-node", "3", "-m", "chakra_tools.testbed.surrogate",
                           "--moe", "--layers", "1", "--steps", "2", "--warmup", "1", "--activation-kib", "64",
                           "--result", str(result)], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(result.read_text())["dp"] == 3
