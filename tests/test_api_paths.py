"""Each command's main path through the public Python API alone.

For trace-convert (a PyTorch host + device pair, a run folder, text, onnx, generate),
trace-validate, trace-replay (--as-captured --manifest, --out, --timeline), trace-visualize
(summary, timeline, report, graph) and trace-capture, a test runs the command and then the same
work through the API, and checks that the API wrote the same files byte for byte, or printed the
same JSON (the command's `--json` document; a capture's manifest less its times, pids and
paths). What a command does that the API cannot do without copying CLI code shows up here as a
test that cannot be written.

Inputs are the shared fixtures (../shared/fixtures/external: PROVENANCE.md) and, for the run
folder, the replay as captured and the report, a capture of examples/mlp.py made by the capture
API in this module (slow: it needs torch).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chakra_tools.cli import convert as convert_cli
from chakra_tools.cli import replay as replay_cli
from chakra_tools.cli import validate as validate_cli
from chakra_tools.cli import visualize as visualize_cli

REPO = Path(__file__).resolve().parent.parent
runner = CliRunner()


def cli(app, *args) -> str:
    """Run a command in-process; its stdout (exit status 0 asserted)."""
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, (res.output, res.exception)
    return res.stdout


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def assert_same_files(a: Path, b: Path) -> None:
    fa, fb = files_of(a), files_of(b)
    assert sorted(fa) == sorted(fb) and fa, (sorted(fa), sorted(fb))
    for name in fa:
        assert fa[name] == fb[name], f"{name} differs between the command and the API"


# --------------------------------------------------------------------------------------------
# trace-convert
# --------------------------------------------------------------------------------------------

def test_convert_a_pytorch_pair(shared_fixtures, tmp_path):
    from chakra_tools.convert.run import convert, inputs_from_files

    host = shared_fixtures / "param/linear_1gpu_host_et.json.gz"
    device = shared_fixtures / "param/linear_1gpu_kineto.json.gz"
    cli(convert_cli.app, "pytorch", "--host", host, "--device", device, "-o", tmp_path / "cli",
        "--executor", "serial", "--quiet")
    report = convert(inputs_from_files([str(host)], [str(device)], []), tmp_path / "api", executor="serial")
    assert_same_files(tmp_path / "cli", tmp_path / "api")
    assert sorted(p.name for p in report.files) == sorted(files_of(tmp_path / "api"))


def test_convert_json_and_for_exact_are_the_apis(shared_fixtures, tmp_path):
    """`--json` prints `ConvertReport.to_dict()`; `--for exact` is `consumer_options("exact")`."""
    from chakra_tools.convert.run import consumer_options, convert, inputs_from_files

    host = shared_fixtures / "param/linear_1gpu_host_et.json.gz"
    device = shared_fixtures / "param/linear_1gpu_kineto.json.gz"
    out = cli(convert_cli.app, "pytorch", "--host", host, "--device", device, "-o", tmp_path / "cli",
              "--executor", "serial", "--for", "exact", "--json")
    report = convert(inputs_from_files([str(host)], [str(device)], []), tmp_path / "cli", executor="serial",
                     **consumer_options("exact"))
    def untimed(doc):  # parse_s, build_s: how long each run took
        doc["ranks"] = {r: {k: v for k, v in st.items() if not k.endswith("_s")} for r, st in doc["ranks"].items()}
        return doc

    assert untimed(json.loads(out)) == untimed(json.loads(json.dumps(report.to_dict())))
    assert report.to_dict()["files"] and report.out == tmp_path / "cli"


def test_convert_a_text_workload(shared_fixtures, tmp_path):
    from chakra_tools.frontends import TextOptions, read_text_workload, text_to_rankset
    from chakra_tools.frontends.builder import write_rankset

    wl_path = shared_fixtures / "astra-sim/text_workloads/MLP_HybridParallel_Data_Model.txt"
    cli(convert_cli.app, "text", wl_path, "--npus", 8, "--dims", "4,2", "-o", tmp_path / "cli")
    rs, _ = text_to_rankset(read_text_workload(wl_path), TextOptions(8, (4, 2)))
    info = write_rankset(rs, tmp_path / "api", wl_path.stem)
    assert_same_files(tmp_path / "cli", tmp_path / "api")
    assert info["ranks"] == 8


def test_generate_a_workload(tmp_path):
    from chakra_tools.frontends.builder import write_rankset
    from chakra_tools.frontends.generate import TransformerConfig, generate

    config = REPO / "examples/workloads/gpt_8rank.yml"
    cli(convert_cli.app, "generate", "--config", config, "--layers", 2, "-o", tmp_path / "cli")
    cfg = TransformerConfig.from_mapping({**TransformerConfig.from_file(config).to_dict(), "layers": 2})
    write_rankset(generate(cfg), tmp_path / "api", "workload")
    assert_same_files(tmp_path / "cli", tmp_path / "api")


def test_convert_an_onnx_model(shared_fixtures, tmp_path):
    pytest.importorskip("onnx")
    from chakra_tools.frontends.builder import write_rankset
    from chakra_tools.frontends.onnx_model import summarize
    from chakra_tools.frontends import onnx_workload as ow
    from chakra_tools.frontends.costs import device
    from chakra_tools.frontends.textwl import write_text_workload

    model = shared_fixtures / "onnx/light_squeezenet.onnx"
    table = json.loads(cli(convert_cli.app, "onnx", model, "--json"))
    summary = summarize(model)
    assert table == json.loads(json.dumps(summary.to_dict()))

    cli(convert_cli.app, "onnx", model, "--emit", "text", "--policy", "HYBRID_DATA_MODEL", "--tp", 2,
        "-o", tmp_path / "cli.txt")
    layers = ow.fold(summary, device("H100", 1.0))
    write_text_workload(ow.to_text_workload(layers, "HYBRID_DATA_MODEL", model_parallel=2, source=model.name),
                        tmp_path / "api.txt")
    assert (tmp_path / "api.txt").read_bytes() == (tmp_path / "cli.txt").read_bytes()

    cli(convert_cli.app, "onnx", model, "--emit", "et", "--strategy", "hybrid", "--npus", 4, "--tp", 2,
        "-o", tmp_path / "cli")
    strategy = ow.strategy_for("hybrid", 4, tp=2)
    write_rankset(ow.onnx_rankset(layers, strategy, source=model.name), tmp_path / "api", model.stem)
    assert_same_files(tmp_path / "cli", tmp_path / "api")


# --------------------------------------------------------------------------------------------
# trace-validate, trace-visualize on a rank set
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rankset(shared_fixtures, tmp_path_factory) -> Path:
    """A 16-rank set from a text workload, with collectives on two dimensions."""
    from chakra_tools.frontends import TextOptions, read_text_workload, text_to_rankset

    out = tmp_path_factory.mktemp("rankset")
    wl = read_text_workload(shared_fixtures / "astra-sim/text_workloads/MLP_HybridParallel_Data_Model.txt")
    rs, _ = text_to_rankset(wl, TextOptions(8, (4, 2)))
    rs.write(out, "mlp", record_world=True)
    return out


def test_validate(rankset):
    from chakra_tools.core.stats import summarize_path
    from chakra_tools.core.validate import validate_path

    printed = json.loads(cli(validate_cli.app, rankset, "--json", "--stats", "--for", "astra-sim"))
    doc = validate_path(rankset, target="astra-sim").to_dict(stats=summarize_path(rankset))
    assert printed == json.loads(json.dumps(doc))
    assert printed["ranks"] == list(range(8)) and "stats" in printed


def test_visualize_summary_graph_and_timeline(rankset, tmp_path):
    from chakra_tools.core.model import NodeType
    from chakra_tools.core.stats import summarize_path
    from chakra_tools.visualize.drawing import write_graph
    from chakra_tools.visualize.select import Selection
    from chakra_tools.visualize.sources import load_events
    from chakra_tools.visualize.timeline import write_timeline

    assert json.loads(cli(visualize_cli.app, "summary", rankset, "--json")) == \
        json.loads(json.dumps(summarize_path(rankset)))

    cli(visualize_cli.app, "graph", rankset, "-o", tmp_path / "cli.dot", "--rank", "1", "--kind", "coll",
        "--no-progress")
    write_graph(rankset, tmp_path / "api.dot", Selection(ranks=(1,), kinds=(NodeType.COMM_COLL_NODE,)))
    assert (tmp_path / "api.dot").read_bytes() == (tmp_path / "cli.dot").read_bytes()
    assert b"ALL_REDUCE" in (tmp_path / "api.dot").read_bytes() or b"COLL" in (tmp_path / "api.dot").read_bytes()

    cli(visualize_cli.app, "timeline", rankset, "-o", tmp_path / "cli.json.gz", "--rank", "0-1",
        "--flows", "cross-rank", "--no-progress")
    write_timeline(load_events(rankset).narrow((0, 1), "cross-rank"), tmp_path / "api.json.gz")
    assert (tmp_path / "api.json.gz").read_bytes() == (tmp_path / "cli.json.gz").read_bytes()


# --------------------------------------------------------------------------------------------
# trace-capture, and what reads a capture: convert RUN_FOLDER, replay --as-captured, report
# --------------------------------------------------------------------------------------------

#: what differs between two captures of the same script: times, process ids, where it ran
VOLATILE = {"started", "finished", "pid", "step_times_ns", "step_starts_unix_ns", "cwd", "host"}


def _stable(doc):
    if isinstance(doc, dict):
        return {k: _stable(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [_stable(v) for v in doc]
    return doc


MLP = [str(REPO / "examples/mlp.py"), "--steps", "5", "--width", "16"]


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    """examples/mlp.py captured through the capture API (steps 2 and 3)."""
    pytest.importorskip("torch")
    from chakra_tools.capture.launch import capture

    run = tmp_path_factory.mktemp("capture") / "api"
    code, doc, folder = capture(MLP, out=run, force=False, wait=1, warmup=1, active=2)
    assert code == 0 and doc["status"] == "ok" and folder == run
    return run


@pytest.mark.slow
def test_capture(captured, tmp_path):
    from chakra_tools.cli import capture as capture_cli

    res = runner.invoke(capture_cli.app, ["-o", str(tmp_path / "cli"), "--", *MLP])
    assert res.exit_code == 0, res.output
    cli_doc = json.loads((tmp_path / "cli/manifest.json").read_text())
    api_doc = json.loads((captured / "manifest.json").read_text())
    assert _stable(cli_doc) == _stable(api_doc)
    assert api_doc["captured_steps"] == [2, 3]
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == sorted(p.name for p in captured.iterdir())


@pytest.fixture(scope="module")
def converted(captured) -> Path:
    from chakra_tools.convert.run import convert_run

    convert_run(captured, captured / "api-et", executor="serial")
    return captured / "api-et"


@pytest.mark.slow
def test_convert_a_run_folder(captured, converted, tmp_path):
    cli(convert_cli.app, "pytorch", captured, "-o", tmp_path / "cli", "--executor", "serial", "--quiet")
    assert_same_files(tmp_path / "cli", converted)


@pytest.mark.slow
def test_replay_as_captured_and_the_report(captured, converted, tmp_path):
    from chakra_tools.replay import AS_CAPTURED, replay_rankset
    from chakra_tools.visualize.report import write_report
    from chakra_tools.visualize.sources import load_events

    manifest = captured / "manifest.json"
    cli(replay_cli.app, converted, "--as-captured", "--manifest", manifest, "--out", tmp_path / "cli.json",
        "--timeline", tmp_path / "cli-timeline.json.gz")
    result = replay_rankset(converted, modes=AS_CAPTURED, manifest=manifest)
    result.write(tmp_path / "api.json")
    result.timeline().write(tmp_path / "api-timeline.json.gz")
    assert (tmp_path / "api.json").read_bytes() == (tmp_path / "cli.json").read_bytes()
    assert (tmp_path / "api-timeline.json.gz").read_bytes() == (tmp_path / "cli-timeline.json.gz").read_bytes()
    assert result.fidelity, "a replay as captured with its manifest compares with the measured step"

    cli(visualize_cli.app, "report", captured, tmp_path / "cli.json", "-o", tmp_path / "cli.html")
    write_report([load_events(captured), load_events(tmp_path / "cli.json")], tmp_path / "api.html")  # it names its sources
    assert (tmp_path / "api.html").read_bytes() == (tmp_path / "cli.html").read_bytes()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
