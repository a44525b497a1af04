"""`replay_rankset`: what trace-replay does, as one call of the public API.

The command parses its options into a `SystemSpec`, `CaptureModes` (merged over AS_CAPTURED for
`--as-captured`), limits and the feeder's settings, calls `replay_rankset`, and prints; so its
`--out`, `--timeline` and `--json` are the API's result written, whichever options are given,
and a rank set validation refuses is an error the API raises, with the report the command
prints from. Input: an ASTRA-sim 1.0 text workload from the shared fixtures (PROVENANCE.md),
converted by the front end into 8 ranks with collectives on two dimensions.
"""

from __future__ import annotations

import doctest
import json

import pytest
from typer.testing import CliRunner

from chakra_tools.cli.replay import app
from chakra_tools.core.errors import InputError
from chakra_tools.feed import DeadlockError
from chakra_tools.replay import (AS_CAPTURED, CaptureModes, RanksetRefused, Replayer, Scales, Staggered,
                                 SystemSpec, api, open_rankset, parse_limits, replay_rankset)

from _util import backend, coll, comp, write_rankset
from test_replay_validates_first import unsized_all_reduce

runner = CliRunner()


def test_merged_with_puts_the_chosen_modes_over_these():
    assert AS_CAPTURED.merged_with(comm="model", lanes=None) == CaptureModes("model", "timeline", "recorded", "stream")
    assert CaptureModes().merged_with(host_time=None, align="", coll_start="last") == CaptureModes(coll_start="last")
    with pytest.raises(InputError, match="--align 'late'"):
        AS_CAPTURED.merged_with(align="late")
    assert doctest.testmod(api).failed == 0


CASES = {  # command-line options -> the same as API arguments
    "model": ([], {}),
    "what-if": (["--collective-start", "last", "--limits", "compute=2,comm=0", "--scale", "compute=0.5,comm=2",
                 "--memory-slot", "own", "--resolve", "data", "--window", "64"],
                dict(spec=SystemSpec(scales=Scales(compute=0.5, comm=2.0)), modes=CaptureModes(coll_start="last"),
                     limits=parse_limits("compute=2,comm=0"), memory_on_comm=False, resolve=("data",), window=64)),
    "as captured, one mode changed": (["--as-captured", "--lanes", "kind", "--offload", "0", "--no-validate"],
                                      dict(spec=SystemSpec(offload=(0,)), modes=AS_CAPTURED.merged_with(lanes="kind"),
                                           validate=False)),
}


@pytest.mark.parametrize("case", CASES)
def test_the_command_writes_what_the_call_returns(mlp, tmp_path, case):
    options, kwargs = CASES[case]
    res = runner.invoke(app, [str(mlp), *options, "--out", str(tmp_path / "cli.json"),
                              "--timeline", str(tmp_path / "cli.json.gz")])
    assert res.exit_code == 0, res.output
    printed = runner.invoke(app, [str(mlp), *options, "--json"])
    result = replay_rankset(mlp, **kwargs)
    result.write(tmp_path / "api.json")
    result.timeline().write(tmp_path / "api.json.gz")
    assert (tmp_path / "api.json").read_bytes() == (tmp_path / "cli.json").read_bytes()
    assert (tmp_path / "api.json.gz").read_bytes() == (tmp_path / "cli.json.gz").read_bytes()
    assert json.loads(printed.stdout) == json.loads((tmp_path / "api.json").read_text())


def test_the_cases_differ(mlp):
    """The cases above test something: each set of options gives another replay."""
    makespans = {replay_rankset(mlp, **kw, record_events=False).makespan_ns for _, kw in CASES.values()}
    assert len(makespans) == len(CASES)


def test_a_rank_set_with_errors_is_refused_with_its_report(tmp_path):
    ranks = {r: [comp(1, us=5), unsized_all_reduce(2, deps=[1]), unsized_all_reduce(3, deps=[2])] for r in range(4)}
    prefix = write_rankset(tmp_path, ranks)
    with pytest.raises(RanksetRefused, match="8 validation error") as refused:
        replay_rankset(prefix)
    assert refused.value.exit_code == 1
    assert {d.code for d in refused.value.report.errors} == {"missing-comm-size"}
    assert replay_rankset(prefix, validate=False).makespan_ns > 0


def test_a_group_missing_ranks_is_refused_or_heard_before_the_replay(tmp_path):
    prefix = write_rankset(tmp_path, {0: [comp(1, us=5), coll(2, 1024, deps=[1], pg="1")]}, {"1": (0, 1, 2, 3)})
    with pytest.raises(RanksetRefused) as refused:
        replay_rankset(prefix)
    assert [d.extra["missing_rank"] for d in refused.value.report.errors] == [1, 2, 3]
    heard = []
    assert replay_rankset(prefix, on_warning=heard.append, absent_peers=True).makespan_ns > 0
    assert [d.code for d in heard] == ["partial-group"] and "[1, 2, 3]" in str(heard[0])
    with pytest.raises(DeadlockError):
        replay_rankset(prefix, validate=False)


def test_a_plain_backend_replays_staggered(tmp_path):
    prefix = write_rankset(tmp_path, {r: [comp(1, us=1 + 4 * r), coll(2, 1 << 20, deps=[1])] for r in range(4)})
    feeders, groups = open_rankset(prefix)
    assert isinstance(Replayer(feeders, backend(), groups=groups).timing, Staggered)
