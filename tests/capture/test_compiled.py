"""A torch.compile'd model (Inductor on CPU) is captured, converted, validated and replayed: the
compiled regions and their graphs are in the trace, forward and backward."""

from __future__ import annotations

from chakra_tools.convert.run import convert, inputs_from_run
from chakra_tools.core.validate import validate_path
from chakra_tools.replay import AS_CAPTURED, AnalyticalBackend, default_network, replay
from chakra_tools.replay.fidelity import compare_with_manifest
from capture_helpers import EXAMPLES, run_capture


def test_a_compiled_model_captures_converts_and_replays(tmp_path):
    run = run_capture(["-o", "run", "--", str(EXAMPLES / "compiled.py"), "--steps", "6"], cwd=tmp_path,
                      folder=tmp_path / "run", timeout=300)
    assert run.code == 0, run.stderr[-3000:]
    report = convert(inputs_from_run(run.folder), tmp_path / "et", executor="serial")
    names = [n.name for n in report.rankset[0]]
    assert sum(n.startswith("Torch-Compiled Region") for n in names) >= 2  # a region per captured step
    graphs = [n for n in names if n.startswith("## Call CompiledFxGraph")]
    assert len(graphs) >= 4  # the forward and the backward graph, each captured step
    assert not validate_path(tmp_path / "et").errors
    result = replay(tmp_path / "et", AnalyticalBackend(default_network(1)), modes=AS_CAPTURED)
    fid = compare_with_manifest(result.to_dict(events=False), run.folder / "manifest.json")
    assert fid["ranks"][0]["predicted_ns"] > 0
