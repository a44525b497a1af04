"""trace-convert on the command line, the executors, and failure behaviour (all or nothing)."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from chakra_tools.cli.convert import app, prepare_argv
from chakra_tools.convert.run import convert, inputs_from_files
from chakra_tools.core.errors import ChakraToolsError

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, prepare_argv([str(a) for a in args]))


def test_run_folder_json_report(collectives_run, tmp_path):
    res = invoke(collectives_run, "-o", tmp_path / "out", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert sorted(p.rsplit("/", 1)[1] for p in doc["files"]) == ["comm_group.json", "trace.0.et", "trace.1.et"]
    assert doc["comm_groups"]["1"] == [0, 1]
    assert json.loads((tmp_path / "out" / "comm_group.json").read_text())["1"] == [0, 1]


def test_host_device_rank_options(raw_run, tmp_path):
    res = invoke("--host", raw_run / "host-1.json", "--device", raw_run / "device-1.json", "--rank", 1,
                 "--host", raw_run / "host-0.json", "--device", raw_run / "device-0.json", "--rank", 0,
                 "-o", tmp_path, "--prefix", "wl", "-q")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["comm_group.json", "wl.0.et", "wl.1.et"]


def test_a_failing_rank_names_its_file_and_writes_nothing(raw_run, tmp_path):
    bad = tmp_path / "in"
    shutil.copytree(raw_run, bad)
    text = (bad / "device-1.json").read_text()
    (bad / "device-1.json").write_text(text[: len(text) // 2])
    out = tmp_path / "out"
    res = invoke("--host", bad / "host-0.json", "--device", bad / "device-0.json",
                 "--host", bad / "host-1.json", "--device", bad / "device-1.json",
                 "-o", out, "-j", 2)
    assert res.exit_code == 2
    assert "rank 1" in res.stderr and "device-1.json" in res.stderr
    assert not out.exists() or not any(out.iterdir())


def test_validation_errors_stop_the_write_unless_forced(raw_run, tmp_path):
    # rank 0's trace given as both ranks: rank "1" sends to itself... and rank 1 never receives
    h0, d0 = raw_run / "host-0.json", raw_run / "device-0.json"
    args = ["--host", h0, "--device", d0, "--host", h0, "--device", d0, "--executor", "serial"]
    res = invoke(*args, "-o", tmp_path / "a")
    assert res.exit_code == 3
    assert "unmatched-send" in res.stderr and "nothing written" in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert all(ln.startswith("error: ") for ln in lines[-2:])  # each finding an error: line of its own
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").iterdir())
    res = invoke(*args, "-o", tmp_path / "b", "--force", "-q")
    assert res.exit_code == 0 and (tmp_path / "b" / "trace.1.et").exists()


def test_bad_invocations():
    assert invoke().exit_code != 0
    res = invoke("/nonexistent/run")
    assert res.exit_code == 2 and "/nonexistent/run: no such folder" in res.stderr


def test_process_pool_output_equals_serial(raw_run, tmp_path):
    hosts = [str(raw_run / f"host-{r}.json") for r in (0, 1)]
    devs = [str(raw_run / f"device-{r}.json") for r in (0, 1)]
    convert(inputs_from_files(hosts, devs, []), tmp_path / "s", executor="serial")
    convert(inputs_from_files(hosts, devs, []), tmp_path / "p", executor="process", jobs=2)
    for name in ("trace.0.et", "trace.1.et", "comm_group.json"):
        assert (tmp_path / "s" / name).read_bytes() == (tmp_path / "p" / name).read_bytes()


def test_dask_executor_on_a_local_cluster(raw_run, tmp_path):
    distributed = pytest.importorskip("distributed")
    hosts = [str(raw_run / f"host-{r}.json") for r in (0, 1)]
    devs = [str(raw_run / f"device-{r}.json") for r in (0, 1)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        done = []
        convert(inputs_from_files(hosts, devs, []), tmp_path / "d", executor="dask",
                scheduler=cluster.scheduler_address, on_rank_done=done.append)
    convert(inputs_from_files(hosts, devs, []), tmp_path / "s", executor="serial")
    assert sorted(done) == [0, 1]
    for name in ("trace.0.et", "trace.1.et"):
        assert (tmp_path / "d" / name).read_bytes() == (tmp_path / "s" / name).read_bytes()


def test_dask_needs_a_scheduler(raw_run):
    with pytest.raises(ChakraToolsError, match="--scheduler"):
        convert(inputs_from_files([str(raw_run / "host-0.json")], [], []), None, executor="dask")


def test_for_exact_keeps_every_recorded_kind_and_the_default_adapts_them(collectives_run, tmp_path):
    from chakra_tools.core.graph import RankSet
    from chakra_tools.core.model import CommType

    def kinds(folder):
        return {n.comm_type for g in RankSet.load(folder) for n in g if n.type.is_comm and n.comm_type}

    assert invoke(collectives_run, "-o", tmp_path / "default", "-q").exit_code == 0
    assert invoke(collectives_run, "-o", tmp_path / "exact", "--for", "exact", "-q").exit_code == 0
    unsupported = {CommType.BARRIER, CommType.REDUCE, CommType.GATHER, CommType.SCATTER}
    assert unsupported <= kinds(tmp_path / "exact")
    assert not unsupported & kinds(tmp_path / "default")
    res = invoke(collectives_run, "-o", tmp_path / "x", "--for", "simulator9000")
    assert res.exit_code != 0 and "exact" in res.output
