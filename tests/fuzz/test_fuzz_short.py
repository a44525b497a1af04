"""The short fuzz run of `make test`: a few hundred mutated inputs of every kind through the
commands (under half a minute). It asserts no failure in the kinds listed in harness.FIXED_KINDS;
the others are run and reported (pytest -s shows the table) until their fixes land. Beside it,
checks of the harness itself: deterministic mutators, the cuts, and what it classifies as a
write outside the output folder, a staging file left behind, an API call's error.
The long run is `make fuzz` (bench/fuzz.py; docs/robustness.md)."""

from __future__ import annotations

import copy
import json
import random
from types import SimpleNamespace

from . import cases, harness
from . import mutators as mu

SEED = 20261201
PER_KIND = 30


def test_mutators_are_deterministic():
    doc = {"a": [1, 2, {"b": "c"}], "d": 1.5}
    outs = {mu.mutate_json_bytes(random.Random("s-1"), __import__("copy").deepcopy(doc), gz=True)[0]
            for _ in range(3)}
    assert len(outs) == 1
    text = "MICRO\n1\nconv1 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1048576 5\n"
    assert len({mu.mutate_text_workload(random.Random("s-2"), text) for _ in range(3)}) == 1


def test_targeted_mutators_are_deterministic():
    host = {"nodes": [{"id": 1, "parent": 0, "name": "root", "inputs": [[1, 2]]},
                      {"id": 2, "parent": 1, "name": "aten::mm", "inputs": [[3, 4], 1.5]},
                      {"id": 3, "parent": 2, "name": "aten::mul", "inputs": []}]}
    kineto = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2,
                               "args": {"External id": 7, "Input Dims": [[2, 2]]}}]}
    doc = {"format": "chakra-tools-json/1", "prefix": "t", "comm_groups": {"1": [0, 1]},
           "ranks": [{"rank": 0, "metadata": {"version": "0.0.4", "attrs": []},
                      "nodes": [{"id": 1, "name": "a", "attrs": [{"name": "x", "kind": "int64_val", "value": 1}]}]}]}
    legacy = mu.write_frames([bytes([0x08, 0x00, 0x12, 0x01, 0x61, 0x5a, 0x02, 0x0a, 0x00]),
                              bytes([0x08, 0x01, 0x12, 0x01, 0x62, 0x20, 0x00, 0x5a, 0x02, 0x0a, 0x00])])
    for i in range(20):
        def once():
            rng = random.Random(f"t-{i}")
            h, k, d = copy.deepcopy(host), copy.deepcopy(kineto), copy.deepcopy(doc)
            notes = (mu.mutate_host_trace(rng, h), mu.mutate_kineto_trace(rng, k), mu.mutate_rankset_doc(rng, d, "/o"))
            return notes, mu.dump_json(rng, [h, k, d]), mu.mutate_legacy(rng, legacy)
        assert once() == once()


def test_parent_cycle_points_a_node_at_its_descendant():
    nodes = [{"id": 1, "parent": 0}, {"id": 2, "parent": 1}, {"id": 3, "parent": 2}, {"id": 4, "parent": 1}]
    for i in range(10):
        ns = copy.deepcopy(nodes)
        mu.parent_cycle(random.Random(i), ns)
        parent = {n["id"]: n["parent"] for n in ns}
        assert any(_on_cycle(parent, n) for n in parent), ns


def _on_cycle(parent: dict, start: int) -> bool:
    seen, p = set(), parent.get(start)
    while p in parent and p not in seen:
        if p == start:
            return True
        seen.add(p)
        p = parent[p]
    return False


def test_bare_tokens_reach_the_json_text():
    data = mu.dump_json(random.Random(1), {"rank": mu.raw("1e400"), "ts": [mu.raw("NaN"), mu.raw("-Infinity")]})
    assert data == b'{"rank": 1e400, "ts": [NaN, -Infinity]}'
    assert json.loads(data)["rank"] == float("inf")


def test_cut_points_visit_every_byte_offset_of_every_small_file():
    sets = [cases.RankSetSeed("a", "a", {"a.0.et": b"xyz", "a.1.et": b"pq", "comm_group.json": b"{}"}),
            cases.RankSetSeed("b", "b", {"b.0.et": b"k" * (cases.SMALL_ET + 1), "b.1.et": b"m"})]
    seen = [cases._cut_point(sets, n) for n in range(6)]
    assert [(rs.name, name, at) for rs, name, at in seen] == [
        ("a", "a.0.et", 0), ("a", "a.0.et", 1), ("a", "a.0.et", 2), ("a", "a.1.et", 0), ("a", "a.1.et", 1),
        ("b", "b.1.et", 0)]
    assert cases._cut_point(sets, 6)[1:] == ("a.0.et", 0)  # and round again


def _box(tmp_path):
    box = tmp_path / "case7"
    for sub in ("outside", "case/cwd", "case/in", "case/out"):
        (box / sub).mkdir(parents=True)
    (box / "case/in/t.0.et").write_bytes(b"")
    case = cases.Case("jsondoc", "", "json", ["load"], [box / "case/out/rs"], ["t.0.et"])
    return box, box / "case", case


def _result(rc=0, stderr=""):
    return SimpleNamespace(exit_code=rc, stderr=stderr, stdout="", stderr_bytes=stderr.encode(), exception=None)


def test_a_file_written_outside_the_output_folder_is_a_failure(tmp_path):
    box, d, case = _box(tmp_path)
    before = set(box.rglob("*"))
    (d / "out/rs").mkdir()
    (d / "out/rs/t.0.et").write_bytes(b"")  # where the command was told to write
    for stray in ("case/t.0.et", "outside/abs.0.et", "case/cwd/t.1.et", "case/in/t.2.et"):
        (box / stray).write_bytes(b"")
    strays = harness._strays(box, before, d / "out")
    assert strays == ["case/t.0.et", "outside/abs.0.et", "case/cwd/t.1.et", "case/in/t.2.et"]
    assert harness.classify(case, d, _result(), strays)[:2] == (
        "FAILURE", "write outside the output folder: case/t.0.et")
    assert harness._strays(box, set(box.rglob("*")), d / "out") == []


def test_a_write_beside_the_boxes_is_a_failure(tmp_path):
    (tmp_path / "seeds").mkdir()
    for name in ("case3", "case3.json", "case3.log", "case3.pre.json"):
        (tmp_path / name).write_bytes(b"")
    rep = {"kind": "jsondoc", "outcome": "error", "signature": None}
    assert harness._climbed(tmp_path, rep) == rep
    (tmp_path / "x.0.et").write_bytes(b"")
    assert harness._climbed(tmp_path, rep)["signature"] == "write outside the output folder: ../x.0.et"
    assert not (tmp_path / "x.0.et").exists()  # not blamed on the next case


def test_staging_files_and_folders_left_behind_are_failures(tmp_path):
    box, d, case = _box(tmp_path)
    (d / "out/rs/.chakra-writing-7-k2j4").mkdir(parents=True)
    assert harness.classify(case, d, _result(2, "error: x"))[1] == "temporary file left behind (.writing-*)"
    (d / "out/rs/.chakra-writing-7-k2j4").rmdir()
    (d / "out/.r.json.chakra-tmp-4242").write_bytes(b"")
    assert harness.classify(case, d, _result())[1] == "temporary file left behind (.tmp-*)"


def test_an_api_call_is_classified_like_a_command():
    from chakra_tools.core.errors import InputError

    def refused():
        raise InputError("in/t.0.et: byte 3: truncated")

    def broken():
        raise ValueError("a bug")

    harness.UNEXPECTED.clear()
    res = harness._call(refused)
    assert (res.exit_code, res.stderr, harness.UNEXPECTED) == (2, "error: in/t.0.et: byte 3: truncated\n", [])
    res = harness._call(broken)
    assert res.exit_code == 70 and harness.UNEXPECTED[0][0] == "ValueError"
    harness.UNEXPECTED.clear()


def test_deep_nesting_is_written_without_recursing():
    data = mu.dump_json(random.Random(1), {"a": mu.DEEP})
    assert data.count(b"[") + data.count(b"{") >= 2000


def test_short_fuzz_run_has_no_failures_in_fixed_kinds(shared_fixtures):
    # the seeds are the shared fixtures: the fixture skips where ../shared is absent
    report = harness.run(SEED, PER_KIND * len(harness.KINDS), quick=True, jobs=2, timeout=30)
    print("\n" + report.text())
    assert set(report.by_kind) == set(harness.KINDS)
    assert all(sum(c.values()) == PER_KIND for c in report.by_kind.values())
    assert not any(c["harness-error"] for c in report.by_kind.values()), report.text()
    broken = report.failing_kinds() & set(harness.FIXED_KINDS)
    assert not broken, f"failures in kinds listed as fixed ({sorted(broken)}):\n{report.text()}"
    # the mutations are neither all harmless nor all fatal
    total = sum((c for c in report.by_kind.values()), __import__("collections").Counter())
    assert total["clean"] > 0 and total["error"] > 0
