"""The JSON dump round-trips losslessly; summaries count what PROVENANCE.md says is there."""

from __future__ import annotations

import json
import math

import pytest

from chakra_tools.core import jsondump
from chakra_tools.core.errors import InputError
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import Attr, IOInfo, Metadata, Node, NodeType
from chakra_tools.core.stats import summarize, summarize_path


def test_json_round_trip_is_byte_identical_on_chakra_feeder_trace(unpack, tmp_path):
    src = unpack("chakra/feeder_tests_trace.tar.gz") / "tests" / "data" / "chakra.0.et"
    Graph.read(src).write(tmp_path / "ours.0.et")
    rs = RankSet.load(tmp_path / "ours.0.et")
    jsondump.dump(rs, tmp_path / "d.json")
    json.loads((tmp_path / "d.json").read_text())  # valid JSON, unlike Chakra's dump
    jsondump.load(tmp_path / "d.json").write(tmp_path / "back", "ours")
    assert (tmp_path / "back" / "ours.0.et").read_bytes() == (tmp_path / "ours.0.et").read_bytes()


def test_json_keeps_values_json_cannot_hold(tmp_path):
    attrs = {"nan": Attr("double_val", math.nan), "inf": Attr("float_list", (math.inf, -math.inf, 1.5)),
             "raw": Attr("bytes_val", b"\x00\xff"), "big": Attr("uint64_val", 2**64 - 1),
             "flag": Attr("bool_list", (True, False)), "bare": Attr(None, None, "doc only")}
    g = Graph([Node(0, "n", NodeType.COMP_NODE, attrs=attrs, inputs=IOInfo("[1]", "[[2]]", "[\"int\"]"))],
              rank=0, metadata=Metadata("1.0.0", {"schema": Attr("string_val", "x")}))
    rs = RankSet({0: g}, {"1": (0,)}, "t")
    jsondump.dump(rs, tmp_path / "d.json")
    back = jsondump.load(tmp_path / "d.json")
    n = back[0][0]
    assert math.isnan(n.attrs["nan"].value)
    assert n.attrs["inf"].value == (math.inf, -math.inf, 1.5)
    assert n.attrs["raw"] == Attr("bytes_val", b"\x00\xff")
    assert n.attrs["big"].value == 2**64 - 1 and n.attrs["bare"] == Attr(None, None, "doc only")
    assert n.inputs == IOInfo("[1]", "[[2]]", "[\"int\"]")
    assert back.comm_groups == {"1": (0,)} and back[0].metadata.version == "1.0.0"


def test_json_load_rejects_other_documents(tmp_path):
    (tmp_path / "x.json").write_text('{"format": "something-else"}')
    with pytest.raises(InputError, match="not a chakra-tools JSON dump"):
        jsondump.load(tmp_path / "x.json")
    (tmp_path / "y.json").write_text('{"format": ')
    with pytest.raises(InputError, match="line 1"):
        jsondump.load(tmp_path / "y.json")


def test_summary_of_astra_sim_custom_ring(shared_fixtures):
    # PROVENANCE.md: 14 SEND, 14 RECV, 7 COMP nodes per rank, 8 ranks; 1 MiB ring all-reduce.
    s = summarize_path(shared_fixtures / "astra-sim" / "custom_ring_allreduce_8npus_1MB")
    assert s["ranks"] == 8 and s["nodes"] == 8 * 35
    for d in s["per_rank"]:
        assert d["nodes_by_type"] == {"COMM_RECV": 14, "COMM_SEND": 14, "COMP": 7}
        assert d["send"]["count"] == d["recv"]["count"] == 14
        # a ring all-reduce moves 2(n-1)/n of the buffer per rank: 14 chunks of 1 MiB / 8
        assert d["send"]["bytes"] == 14 * (1 << 20) // 8


def test_summary_in_memory_matches_streaming(shared_fixtures):
    path = shared_fixtures / "astra-sim" / "all_reduce_4npus_1MB"
    assert summarize(RankSet.load(path)) == summarize_path(path)
    [c] = summarize_path(path)["per_rank"][0]["collectives"]
    assert (c["comm_type"], c["count"], c["bytes"]) == ("ALL_REDUCE", 1, 1 << 20)


def _cli(*args):
    import subprocess
    import sys

    code = "from chakra_tools.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True)


def test_json_cli_round_trip_and_validate_stats(shared_fixtures, tmp_path):
    ring = shared_fixtures / "astra-sim" / "custom_ring_allreduce_8npus_1MB"
    RankSet.load(ring).write(tmp_path / "ours", "ring")  # our bytes, to compare against
    dump = _cli("json", "dump", tmp_path / "ours", "-o", tmp_path / "ring.json")
    assert dump.returncode == 0, dump.stderr
    assert "8 rank(s), 280 nodes" in dump.stdout
    load = _cli("json", "load", tmp_path / "ring.json", "-o", tmp_path / "back")
    assert load.returncode == 0, load.stderr
    for r in range(8):
        assert (tmp_path / "back" / f"ring.{r}.et").read_bytes() == (tmp_path / "ours" / f"ring.{r}.et").read_bytes()
    stats = _cli("validate", tmp_path / "back", "--stats", "--json")
    doc = json.loads(stats.stdout)
    assert stats.returncode == 0 and doc["errors"] == 0
    assert doc["stats"]["nodes_by_type"] == {"COMM_RECV": 112, "COMM_SEND": 112, "COMP": 56}
    bad = _cli("json", "load", tmp_path / "missing.json", "-o", tmp_path / "x")
    assert bad.returncode == 2 and "cannot read" in bad.stderr and not (tmp_path / "x").exists()
