"""The real step the benchmark compares predictions with: a run's median step, its slowest rank's,
so that a step the shared host stalled does not move it (testbed/jobs.py)."""

import json

from chakra_tools.testbed.jobs import measured_step_ns, stalled_steps

MS = 1_000_000


def _result(tmp_path, steps):
    """A --result file as the surrogate writes it: the slowest rank's mean step and every rank's steps."""
    path = tmp_path / "real.json"
    doc = {"step_ns": int(max(sum(r) / len(r) for r in steps)), "steps_ns": steps}
    path.write_text(json.dumps(doc))
    return path


def test_a_stalled_step_does_not_move_the_step_but_is_counted(tmp_path):
    steady = [200 * MS, 197 * MS, 203 * MS, 199 * MS, 201 * MS, 198 * MS, 202 * MS]
    stalled = [198 * MS, 325 * MS, 199 * MS, 202 * MS, 197 * MS, 200 * MS, 201 * MS]
    path = _result(tmp_path, [steady, stalled])
    assert json.loads(path.read_text())["step_ns"] > 215 * MS  # the mean the stall moved
    assert measured_step_ns(path) == 200 * MS
    assert stalled_steps(path) == 1


def test_the_slowest_ranks_median_is_the_step(tmp_path):
    path = _result(tmp_path, [[100 * MS, 102 * MS, 101 * MS], [110 * MS, 111 * MS, 109 * MS]])
    assert measured_step_ns(path) == 110 * MS
    assert stalled_steps(path) == 0


def test_a_result_without_the_ranks_steps_gives_its_mean_span(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"step_ns": 123 * MS}))
    assert measured_step_ns(path) == 123 * MS
    assert stalled_steps(path) == 0
