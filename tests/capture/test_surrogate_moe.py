"""The test bed's mixture-of-experts surrogate (`--moe`: experts over the data-parallel group),
captured on 2 ranks of this machine (no test bed needed) and converted: four all-to-alls of the
activations per layer and step, and `trace-convert scale` refusing to guess what they would be
on more ranks instead of misreading them as another parallelism."""

from __future__ import annotations

import pytest

from capture_helpers import LAUNCH_2, run_capture

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
