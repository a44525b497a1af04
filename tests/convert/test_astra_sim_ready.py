"""What trace-convert writes runs in ASTRA-sim 2.0: captures checked with `--for astra-sim`
(core/consumers.py), by default, with `trace-convert --for astra-sim` and, keeping every
recorded kind, `--for exact`."""

from __future__ import annotations

from collections import Counter

from chakra_tools.convert.run import convert, inputs_from_run
from chakra_tools.core.graph import RankSet
from chakra_tools.core.model import CommType, NodeType
from chakra_tools.core.validate import validate_path


def _codes(folder) -> Counter:
    return Counter(d.code for d in validate_path(folder, target="astra-sim").diagnostics)


def test_ddp_capture_has_nothing_astra_sim_flags(ddp_run, tmp_path):
    """By default process-group setup is a COMP node and a barrier (if the captured steps hold
    one, the only kind ASTRA-sim cannot simulate) a 4-byte all-reduce; `--for exact` keeps it."""
    convert(inputs_from_run(ddp_run), tmp_path / "plain", executor="serial")
    rs = RankSet.load(tmp_path / "plain")
    assert not [n for g in rs for n in g if n.type is NodeType.METADATA_NODE]
    assert [n.name for g in rs for n in g if n.name == "process_group:init"] == ["process_group:init"] * 2
    assert _codes(tmp_path / "plain") == Counter()
    convert(inputs_from_run(ddp_run), tmp_path / "exact", executor="serial", adapt=None)
    rs = RankSet.load(tmp_path / "exact")
    barriers = sum(n.comm_type is CommType.BARRIER for g in rs for n in g if n.type is NodeType.COMM_COLL_NODE)
    assert _codes(tmp_path / "exact") == Counter({"astra-unsupported-collective": barriers} if barriers else {})
    convert(inputs_from_run(ddp_run), tmp_path / "astra", executor="serial", target="astra-sim")
    assert _codes(tmp_path / "astra") == Counter()


def test_every_collective_kind_for_astra_sim(collectives_run, tmp_path):
    convert(inputs_from_run(collectives_run), tmp_path, executor="serial")  # the default adapts too
    codes = _codes(tmp_path)
    assert not [c for c in codes if c.startswith("astra-") and c != "astra-broadcast"], codes
    rs = RankSet.load(tmp_path)
    recorded = {n.attr("recorded_comm_type") for g in rs for n in g} - {None}
    assert recorded == {"REDUCE", "GATHER", "SCATTER", "BARRIER"}
    was_barrier = [n for g in rs for n in g if n.attr("recorded_comm_type") == "BARRIER"]
    assert {(n.comm_type, n.comm_size) for n in was_barrier} == {(CommType.ALL_REDUCE, 4)}
