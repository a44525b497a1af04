"""The short fuzz run of `make test`: a few hundred mutated inputs of every kind through the
commands (about a minute). It asserts no failure in the kinds listed in harness.FIXED_KINDS;
the others are run and reported (pytest -s shows the table) until their fixes land.
The long run is `make fuzz` (bench/fuzz.py; docs/robustness.md)."""

from __future__ import annotations

import random

from . import harness
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
