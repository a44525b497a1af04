"""The replay result document: written by a replay, read back typed, refused with the place named."""

from __future__ import annotations

import json

import pytest

from chakra_tools.core.errors import InputError
from chakra_tools.core.replaydoc import FORMAT, VERSION, decode_replay_result, read_replay_result
from chakra_tools.replay import AnalyticalBackend, default_network, replay


@pytest.fixture()
def written(shared_fixtures, tmp_path):
    a = shared_fixtures / "astra-sim" / "all_reduce_4npus_1MB"
    result = replay(a, AnalyticalBackend(default_network(4)))
    result.write(tmp_path / "r.json")
    return tmp_path / "r.json", result


def test_a_written_result_reads_back_typed(written):
    path, result = written
    doc = read_replay_result(path)
    raw = json.loads(path.read_text())
    assert raw["format"] == FORMAT and raw["version"] == VERSION
    assert doc.makespan_ns == result.makespan_ns > 0
    assert [r.finish_ns for r in doc.ranks] == [r["finish_ns"] for r in result.ranks]
    assert len(doc.events) == 4 and all(e.lane == "comm" and e.work == "comm" for e in doc.events)
    assert doc.collectives[0].comm_type == "ALL_REDUCE" and doc.collectives[0].ranks == (0, 1, 2, 3)


def test_a_document_from_before_the_format_key_still_loads(written):
    path, _ = written
    raw = json.loads(path.read_text())
    del raw["format"], raw["version"]
    assert decode_replay_result(raw, "old.json").makespan_ns == raw["makespan_ns"]


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(version=2), "version 2; this chakra-tools reads version 1"),
    (lambda d: d.update(format="something-else"), "not a replay result"),
    (lambda d: d["events"][2].update(lane="gpu"), r"events\[2\].lane is 'gpu'"),
    (lambda d: d["events"][1].update(start_ns="0"), r"events\[1\].start_ns is '0', not an integer"),
    (lambda d: d["ranks"][3].update(finish_ns=1.5), r"ranks\[3\].finish_ns is 1.5"),
    (lambda d: d.update(deps=[[0, 1, 2]]), r"deps\[0\] is \[0, 1, 2\]"),
])
def test_a_damaged_document_is_refused_naming_the_file_and_place(written, change, message):
    path, _ = written
    raw = json.loads(path.read_text())
    change(raw)
    with pytest.raises(InputError, match=message) as e:
        decode_replay_result(raw, str(path))
    assert str(path) in str(e.value)


def test_modes_that_are_no_object_are_dropped_not_trusted(written):
    """A reader acts on config.modes (trace-visualize notes --host-time timeline): a list there
    (fuzz seed 20261204 case 5008) was an AttributeError in the report."""
    doc = json.loads(written[0].read_text())
    doc["config"]["modes"] = [doc["config"].get("modes"), doc["config"].get("modes")]
    got = decode_replay_result(doc, "r.json")
    assert "modes" not in got.config and got.config.keys() == doc["config"].keys() - {"modes"}
