"""The compiled loops change no output: conversions, validation and a replay of the shared
fixtures are the same bytes with the C code and with the Python twins alone.

The compiled loops (core/_hotloops.c, convert/_hotloops.c) are picked once per stage, by a facade
(core/hotloops.py for the core); CHAKRA_TOOLS_PURE_PYTHON=1 makes every facade pick the Python
twin. Each path runs in a process of its own, in a folder of its own with relative output paths,
so the documents name the same files: a PyTorch host + device pair (param), an HTA pair, and an
ASTRA-sim 1.0 text workload are converted and validated, and the pair is replayed as captured.
Nothing here is a stored result: the two paths are compared with each other, and each output is
checked to hold something.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chakra_tools.core import hotloops

#: run in a fresh interpreter: argv = fixtures folder, "1" for the Python twins or "" for C
SCRIPT = r"""
import json, sys
from chakra_tools.core import hotloops
from chakra_tools.convert import hotloops as convert_loops
from chakra_tools.convert.run import convert, inputs_from_files
from chakra_tools.core.validate import validate_path
from chakra_tools.frontends import TextOptions, read_text_workload, text_to_rankset
from chakra_tools.frontends.builder import write_rankset
from chakra_tools.replay import AS_CAPTURED, open_rankset, run_replay
from chakra_tools.replay.spec import SystemSpec

fx, pure = sys.argv[1], bool(sys.argv[2])
assert (hotloops.COMPILED is None) == (convert_loops.COMPILED is None) == pure, "the facades did not pick as asked"
pairs = {"param": ("param/linear_1gpu_host_et.json.gz", "param/linear_1gpu_kineto.json.gz"),
         "hta": ("hta/simple_add_host_et.json.gz", "hta/simple_add_kineto.json.gz")}
for name, (host, device) in pairs.items():
    convert(inputs_from_files([f"{fx}/{host}"], [f"{fx}/{device}"], []), name, executor="serial")
wl = read_text_workload(f"{fx}/astra-sim/text_workloads/MLP_HybridParallel_Data_Model.txt")
write_rankset(text_to_rankset(wl, TextOptions(8, (4, 2)))[0], "text", "mlp")
for name in (*pairs, "text"):
    with open(f"{name}.validation.json", "w") as f:
        json.dump(validate_path(name, target="astra-sim").to_dict(), f, indent=1)
feeders, groups = open_rankset("param")
result = run_replay("param", feeders, SystemSpec().backend(max(feeders) + 1, "param"), groups=groups,
                    modes=AS_CAPTURED)
result.write("param.replay.json")
"""


def _run(fixtures: Path, folder: Path, pure: bool) -> dict[str, bytes]:
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "CHAKRA_TOOLS_PURE_PYTHON"}
    if pure:
        env["CHAKRA_TOOLS_PURE_PYTHON"] = "1"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(fixtures), "1" if pure else ""], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.skipif(hotloops.COMPILED is None, reason="core/_hotloops.c not built: nothing to compare")
def test_the_compiled_loops_and_the_python_twins_write_the_same_bytes(shared_fixtures, tmp_path):
    compiled = _run(shared_fixtures, tmp_path / "c", pure=False)
    python = _run(shared_fixtures, tmp_path / "py", pure=True)
    assert sorted(compiled) == sorted(python)
    differ = [name for name in compiled if compiled[name] != python[name]]
    assert not differ, f"the compiled loops change {differ}"
    # and there was something to compare: every set converted, validated clean, replayed
    assert {"param/trace.0.et", "hta/trace.0.et", "text/mlp.7.et", "text/comm_group.json"} <= set(compiled)
    for name in ("param", "hta", "text"):
        report = json.loads(compiled[f"{name}.validation.json"])
        assert report["nodes"] > 0 and report["errors"] == 0, (name, report["counts"])
    assert json.loads(compiled["param.replay.json"])["events"]


def test_the_core_facade_twins_encode_and_validate_a_rank_set_alike(shared_fixtures, tmp_path):
    """In one process: the core's facade switched to its Python twins (`python_twins`) writes and
    validates a rank set in memory as the picked loops do."""
    from chakra_tools.core.validate import validate_rankset
    from chakra_tools.frontends import TextOptions, read_text_workload, text_to_rankset

    wl = read_text_workload(shared_fixtures / "astra-sim/text_workloads/DLRM_HybridParallel.txt")
    rs, _ = text_to_rankset(wl, TextOptions(8))
    rs.write(tmp_path / "picked", "dlrm", record_world=True)
    picked = [d.to_dict() for d in validate_rankset(rs, target=None)]
    with hotloops.python_twins():
        rs.write(tmp_path / "twin", "dlrm", record_world=True)
        twin = [d.to_dict() for d in validate_rankset(rs, target=None)]
    files = sorted(p.name for p in (tmp_path / "picked").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "twin").iterdir()) and "dlrm.7.et" in files
    for name in files:
        assert (tmp_path / "twin" / name).read_bytes() == (tmp_path / "picked" / name).read_bytes(), name
    assert twin == picked
