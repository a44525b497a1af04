"""Inputs that do not belong together are refused where they are paired, naming both: a host
trace with another process's device trace, rank files that name another rank or came from
another conversion, a manifest of another run. Made from a real 2-rank run (`raw_run`)."""

from __future__ import annotations

import json
import shutil

import pytest

from chakra_tools.convert.run import ConversionCheckError, convert, inputs_from_files
from chakra_tools.core.errors import InputError
from chakra_tools.core.validate import validate_path
from chakra_tools.replay.fidelity import compare_with_manifest


def _shifted_device(raw_run, tmp_path):
    """device-0.json as another process would have written it: its record-function ids are
    that process's own counter (here: the same ops, numbered from elsewhere)."""
    doc = json.loads((raw_run / "device-0.json").read_text())
    for e in doc["traceEvents"]:
        args = e.get("args") or {}
        if args.get("Record function id"):
            args["Record function id"] += 1_000_003
    out = tmp_path / "device-other.json"
    out.write_text(json.dumps(doc))
    return out


def test_a_device_trace_of_another_process_is_refused(raw_run, tmp_path):
    other = _shifted_device(raw_run, tmp_path)
    inputs = inputs_from_files([str(raw_run / "host-0.json")], [str(other)], [0])
    with pytest.raises(ConversionCheckError, match=r"host-0.json and .*device-other.json look like traces of "
                                                   r"different processes.*\[unpaired-traces\]"):
        convert(inputs, tmp_path / "out", executor="serial")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    convert(inputs, tmp_path / "forced", executor="serial", force=True)  # a user who knows better
    assert (tmp_path / "forced" / "trace.0.et").exists()


def test_rank_files_swapped_or_from_another_conversion_fail_validation(raw_run, tmp_path):
    hosts = [str(raw_run / f"host-{r}.json") for r in (0, 1)]
    devs = [str(raw_run / f"device-{r}.json") for r in (0, 1)]
    convert(inputs_from_files(hosts, devs, []), tmp_path / "et", executor="serial")
    assert not validate_path(tmp_path / "et").errors

    swapped = tmp_path / "swapped"
    shutil.copytree(tmp_path / "et", swapped)
    (swapped / "trace.0.et").rename(swapped / "tmp")
    (swapped / "trace.1.et").rename(swapped / "trace.0.et")
    (swapped / "tmp").rename(swapped / "trace.1.et")
    codes = {d.code for d in validate_path(swapped).errors}
    assert "rank-mismatch" in codes

    convert(inputs_from_files([hosts[1]], [], [1]), tmp_path / "host-only", executor="serial", force=True)
    mixed = tmp_path / "mixed"
    shutil.copytree(tmp_path / "et", mixed)
    shutil.copy(tmp_path / "host-only" / "trace.1.et", mixed / "trace.1.et")
    errors = [d for d in validate_path(mixed).errors if d.code == "mixed-conversions"]
    assert errors and "rank 1" in str(errors[0])
    again = tmp_path / "again"  # the same inputs converted again: one conversion, byte-stable
    convert(inputs_from_files(hosts, devs, []), again, executor="serial")
    assert (again / "trace.1.et").read_bytes() == (tmp_path / "et" / "trace.1.et").read_bytes()


def test_a_manifest_of_another_run_is_refused():
    result = {"ranks": [{"rank": 0, "finish_ns": 2000}, {"rank": 1, "finish_ns": 2100}]}
    one_rank = {"world_size": 1, "captured_steps": [0], "ranks": [{"rank": 0, "step_times_ns": [1000]}]}
    with pytest.raises(InputError, match=r"a run of 1 rank\(s\), but the replay has 2 \(ranks 1 are not in it\)"):
        compare_with_manifest(result, one_rank)


def test_a_host_trace_covering_part_of_its_device_trace_is_said(shared_fixtures, tmp_path):
    """PARAM's ResNet pair: the host trace stops about a third into what its Kineto trace records;
    the work after it is kept from the Kineto trace alone (convert/extend.py), which the
    conversion says, and the measured window is then the device trace's whole span."""
    from chakra_tools.core.measured import Measured
    from chakra_tools.core.graph import Graph

    pair = shared_fixtures / "param"
    inputs = inputs_from_files([str(pair / "resnet_1gpu_host_et.json.gz")],
                               [str(pair / "resnet_1gpu_kineto.json.gz")], [0])
    report = convert(inputs, tmp_path / "out", executor="serial")
    (found,) = [d for d in report.diagnostics if d.code == "device-work-kept"]
    assert found.severity == "warning" and "resnet_1gpu_host_et.json.gz" in str(found.file)
    assert "are kept from the device trace alone" in found.message
    assert not [d for d in report.diagnostics if d.code == "host-trace-partial"]
    graph = Graph.read(tmp_path / "out" / "trace.0.et")
    window = Measured.from_metadata(graph.metadata, "trace.0.et")
    assert 14.4e9 < window.duration_ns < 14.6e9  # Kineto's 14.5 s, not the host trace's 4.8 s


def test_a_pair_of_one_capture_says_nothing_about_coverage(raw_run, tmp_path):
    inputs = inputs_from_files([str(raw_run / "host-0.json")], [str(raw_run / "device-0.json")], [0])
    report = convert(inputs, tmp_path / "out", executor="serial")
    assert not [d for d in report.diagnostics if d.code == "host-trace-partial"]


def test_as_captured_on_host_only_ranks_says_there_is_nothing_recorded(raw_run, tmp_path):
    """A host trace converted alone carries no time: `--as-captured` on it would print a replay
    of nothing (13.9 us for a step) as the capture's. It warns; the pair converted whole does not."""
    from chakra_tools.replay import AS_CAPTURED, replay_rankset

    def warnings(files: dict) -> set[str]:
        out = tmp_path / f"out-{len(files)}"
        convert(inputs_from_files([str(raw_run / f"host-{r}.json") for r in (0, 1)],
                                  [str(raw_run / f"device-{r}.json") for r in (0, 1)] if files else [], [0, 1]),
                out, executor="serial", force=True)
        said = []
        replay_rankset(out, modes=AS_CAPTURED, on_warning=said.append, record_events=False)
        return {d.code for d in said}

    assert "nothing-recorded" in warnings({})
    assert "nothing-recorded" not in warnings({"device": True})


def _without_rf_ids(raw_run, tmp_path, pid_shift: int = 0):
    """device-0.json with no record-function ids (as traces from before torch recorded them), its
    host events' pid moved by `pid_shift` (another process's)."""
    doc = json.loads((raw_run / "device-0.json").read_text())
    for e in doc["traceEvents"]:
        (e.get("args") or {}).pop("Record function id", None)
        if pid_shift and e.get("cat") in ("cpu_op", "user_annotation") and isinstance(e.get("pid"), int):
            e["pid"] += pid_shift
    out = tmp_path / f"device-norf-{pid_shift}.json"
    out.write_text(json.dumps(doc))
    return out


def test_without_record_function_ids_the_pids_pair_the_traces(raw_run, tmp_path):
    host = json.loads((raw_run / "host-0.json").read_text())
    assert isinstance(host.get("pid"), int)
    other = _without_rf_ids(raw_run, tmp_path, pid_shift=7)
    inputs = inputs_from_files([str(raw_run / "host-0.json")], [str(other)], [0])
    with pytest.raises(ConversionCheckError, match=rf"written by pid {host['pid']}, the device trace's host "
                                                   rf"events by pid {host['pid'] + 7}.*\[unpaired-traces\]"):
        convert(inputs, tmp_path / "out", executor="serial")
    impossible = tmp_path / "host-pid-2**64.json"  # no kernel's pid: read as none, so no check, no refusal
    impossible.write_text(json.dumps({**host, "pid": 2 ** 64 + 1}))
    convert(inputs_from_files([str(impossible)], [str(other)], [0]), tmp_path / "nopid", executor="serial")
    same = _without_rf_ids(raw_run, tmp_path)  # its own process's: linked by op order, no complaint
    convert(inputs_from_files([str(raw_run / "host-0.json")], [str(same)], [0]), tmp_path / "ok", executor="serial")
    assert (tmp_path / "ok" / "trace.0.et").exists()
