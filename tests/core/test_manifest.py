"""The run manifest: one typed reader for convert, replay fidelity and visualize, which names the
file and the place of what is wrong."""

from __future__ import annotations

import json

import pytest

from chakra_tools.convert.run import inputs_from_run
from chakra_tools.core.errors import InputError
from chakra_tools.core.manifest import FORMAT, read_manifest
from chakra_tools.replay.fidelity import compare_with_manifest
from chakra_tools.visualize.captured import capture_files


def manifest(**over):
    doc = {"format": FORMAT, "status": "ok", "world_size": 2, "captured_steps": [1],
           "process_groups": [{"name": "0", "ranks": [0, 1], "desc": "default_pg"}],
           "ranks": [{"rank": r, "status": "ok", "host_trace": f"rank-{r}.host.json",
                      "device_trace": f"rank-{r}.device.json", "captured_steps": [1],
                      "step_times_ns": [900, 100 + r], "step_starts_unix_ns": [0, 1000 + r]} for r in (0, 1)]}
    doc.update(over)
    return doc


def write(tmp_path, doc):
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    return tmp_path


def test_every_reader_sees_the_same_typed_manifest(tmp_path):
    run = write(tmp_path, manifest())
    m = read_manifest(run)
    assert [r.step_times_ns for r in m.ranks] == [(900, 100), (900, 101)]
    assert m.trace_path(m.ranks[1].device_trace) == run / "rank-1.device.json"
    assert capture_files(run) == {0: run / "rank-0.device.json", 1: run / "rank-1.device.json"}
    inputs = inputs_from_run(run)
    assert [s.rank for s in inputs.ranks] == [0, 1] and inputs.groups["0"].ranks == (0, 1)
    cmp = compare_with_manifest({"makespan_ns": 110, "ranks": [{"rank": 0, "finish_ns": 110},
                                                               {"rank": 1, "finish_ns": 110}]}, run / "manifest.json")
    assert [r["measured_ns"] for r in cmp["ranks"]] == [100, 101]


@pytest.mark.parametrize("doc, place", [
    (manifest(format="chakra-tools-capture/9"), "format 'chakra-tools-capture/9'"),
    (manifest(ranks={"0": {}}), "'ranks' is dict"),
    (manifest(world_size="2"), "world_size is '2'"),
    (manifest(world_size=2**63), "world_size is 9223372036854775808, not 1.."),
    (manifest(captured_steps=[1, "2"]), "captured_steps is"),
    ({**manifest(), "ranks": [{"rank": "x"}]}, r"ranks\[0\].rank is 'x'"),
    ({**manifest(), "ranks": [{"rank": 0, "step_times_ns": [1, None]}]}, r"ranks\[0\].step_times_ns"),
    ({**manifest(), "ranks": [{"rank": 0, "device_trace": 7}]}, r"ranks\[0\].device_trace is 7"),
    (manifest(process_groups=[{"ranks": [0]}]), r"process_groups\[0\] is not a process group"),
    ([1, 2], "a manifest is a JSON object"),
])
def test_a_damaged_manifest_is_refused_by_every_reader_naming_the_place(tmp_path, doc, place):
    run = write(tmp_path, doc)
    for read in (read_manifest, inputs_from_run, capture_files):
        with pytest.raises(InputError, match=place) as e:
            read(run)
        assert "manifest.json" in str(e.value)


def test_a_manifest_that_is_not_json_is_named(tmp_path):
    (tmp_path / "manifest.json").write_text('{"ranks": [')
    with pytest.raises(InputError, match="manifest.json: not valid JSON"):
        read_manifest(tmp_path)
