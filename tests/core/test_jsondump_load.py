"""`chakra-tools json load` checks the whole document before it writes anything (issue 32): each
case is a fault the fuzz harness found (a Python exception, not an InputError) or a document whose
.et files their own readers refused (`trace.-1.et`, a hidden `.0.et`, float group members). Each
is exit 2, one line naming the file and the key path, and an output folder never made.

Every document starts as a real `json dump` (through the CLI) of a 4-rank set the generator makes
here (tp=2 x dp=2: 23 nodes a rank, 5 comm groups), then one key is broken.
"""

from __future__ import annotations

import copy
import json

import pytest
from typer.testing import CliRunner

from chakra_tools.cli.jsondump import app as json_app
from chakra_tools.core import jsondump
from chakra_tools.frontends.generate import TransformerConfig, generate

runner = CliRunner()
BIG = "@@big@@"  # a JSON string replaced by a raw number literal json.dumps cannot write


@pytest.fixture(scope="module")
def dumped(tmp_path_factory) -> dict:
    """The document `json dump` writes for the generated set (read fresh by each test)."""
    tmp = tmp_path_factory.mktemp("dumped")
    rs = generate(TransformerConfig(layers=1, hidden=64, heads=2, seq=8, tp=2, dp=2))
    rs.write(tmp / "set", "workload")
    res = runner.invoke(json_app, ["dump", str(tmp / "set"), "-o", str(tmp / "trace.json")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp / "trace.json").read_text())
    assert [len(r["nodes"]) for r in doc["ranks"]] == [23] * 4 and len(doc["comm_groups"]) == 5
    return doc


def _load(tmp_path, doc: dict, *args: str, raw: str | None = None):
    """`json load` of `doc` (with BIG spelled as `raw`) into tmp_path/out: the result."""
    text = json.dumps(doc)
    if raw is not None:
        text = text.replace(json.dumps(BIG), raw)
    (tmp_path / "trace.json").write_text(text)
    return runner.invoke(json_app, ["load", str(tmp_path / "trace.json"), "-o", str(tmp_path / "out"), *args])


def _refused(res, tmp_path, *says: str) -> None:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output, res.output
    assert f"{tmp_path / 'trace.json'}: " in res.output, res.output
    for s in says:
        assert s in res.output, (s, res.output)
    assert not (tmp_path / "out").exists()  # nothing written, not even the folder


def _node(doc, rank=0, j=1):
    return doc["ranks"][rank]["nodes"][j]


def _attr(doc, name, rank=0, j=1):
    """The attribute `name` of a node (the dump lists them sorted: comm_size, comm_type,
    is_cpu_op, pg_name for node 1, a collective)."""
    return next(a for a in _node(doc, rank, j)["attrs"] if a["name"] == name)


# (what the fuzzer or a reader met, how to break the document, the key path, what it says)
CASES = [
    ("attrs as a string", lambda d: _node(d).update(attrs="is_cpu_op"),
     "ranks[0].nodes[1].attrs", 'is "is_cpu_op", not a list'),
    ("a null node", lambda d: d["ranks"][0]["nodes"].__setitem__(1, None),
     "ranks[0].nodes[1]", "is null, not an object"),
    ("a null rank", lambda d: d["ranks"][2].update(rank=None), "ranks[2].rank", "is null, not a rank"),
    ("a null rank entry", lambda d: d["ranks"].__setitem__(2, None), "ranks[2]", "is null, not an object"),
    ("metadata as a list", lambda d: d["ranks"][1].update(metadata=[]), "ranks[1].metadata",
     "is a list, not an object"),
    ("comm_groups as a list", lambda d: d.update(comm_groups=[[0, 1]]), "comm_groups", "is a list, not an object"),
    ("ranks as an object", lambda d: d.update(ranks={"0": d["ranks"][0]}), "ranks", "is an object, not a list"),
    ("no ranks at all", lambda d: d.update(ranks=[]), "ranks is empty", "at least one rank"),
    ("an id of 1e400", lambda d: _node(d).update(id=BIG), "ranks[0].nodes[1].id", "is Infinity"),
    ("an id past uint64", lambda d: _node(d).update(id=2**64), "ranks[0].nodes[1].id", "18446744073709551616"),
    ("a negative id", lambda d: _node(d).update(id=-1), "ranks[0].nodes[1].id", "is -1, not a node id"),
    ("a float dependency", lambda d: _node(d).update(data_deps=[0.0]), "ranks[0].nodes[1].data_deps[0]", "is 0.0"),
    ("a negative duration", lambda d: _node(d).update(duration_micros=-5), "ranks[0].nodes[1].duration_micros",
     "not a duration in microseconds"),
    ("a fractional start", lambda d: _node(d).update(start_time_micros=1.5), "ranks[0].nodes[1].start_time_micros",
     "is 1.5"),
    ("an unknown node type", lambda d: _node(d).update(type="GPU_NODE"), "ranks[0].nodes[1].type", "not a node type"),
    ("a name that is a number", lambda d: _node(d).update(name=7), "ranks[0].nodes[1].name", "is 7, not a string"),
    ("a lone surrogate in a name", lambda d: _node(d).update(name="\ud800"), "ranks[0].nodes[1].name",
     "not valid Unicode"),
    ("inputs as a list", lambda d: _node(d).update(inputs=["x"]), "ranks[0].nodes[1].inputs", "not an object"),
    ("an inputs key torch does not have", lambda d: _node(d).update(inputs={"strides": "[]"}),
     "ranks[0].nodes[1].inputs", "'strides'"),
    ("a node key the format does not have", lambda d: _node(d).update(dur=5), "ranks[0].nodes[1]", "'dur'"),
    ("an int64 attribute past int64", lambda d: _attr(d, "comm_size").update(value=2**63),
     "ranks[0].nodes[1].attrs[0].value", "not a value of int64_val"),
    ("a string in an int64 attribute", lambda d: _attr(d, "comm_size").update(value="4096"),
     "ranks[0].nodes[1].attrs[0].value", 'is "4096"'),
    ("a 1 for a bool attribute", lambda d: _attr(d, "is_cpu_op").update(value=1),
     "ranks[0].nodes[1].attrs[2].value", "not a value of bool_val (true or false)"),
    ("an unknown attribute kind", lambda d: _attr(d, "comm_type").update(kind="int128_val"),
     "ranks[0].nodes[1].attrs[1].kind", "not an attribute kind"),
    ("an attribute kind that is a list", lambda d: _attr(d, "comm_type").update(kind=["int64_val"]),
     "ranks[0].nodes[1].attrs[1].kind", "is a list, not an attribute kind"),
    ("an attribute without a value", lambda d: _attr(d, "comm_type").pop("value"),
     "ranks[0].nodes[1].attrs[1]", "has no 'value'"),
    ("an attribute given twice", lambda d: _node(d)["attrs"].append(dict(_attr(d, "comm_type"))),
     "ranks[0].nodes[1].attrs[4].name", "'comm_type' is given twice"),
    ("a float attribute past float32", lambda d: _node(d)["attrs"].append({"name": "x", "kind": "float_val",
                                                                           "value": 1e300}),
     "ranks[0].nodes[1].attrs[4].value", "32-bit float"),
    ("bytes that are not base64", lambda d: _node(d)["attrs"].append({"name": "x", "kind": "bytes_list",
                                                                      "value": [{"base64": "!!"}]}),
     "ranks[0].nodes[1].attrs[4].value[0].base64", "not base64"),
    ("a metadata attribute as a number", lambda d: d["ranks"][0]["metadata"].update(attrs=5),
     "ranks[0].metadata.attrs", "is 5, not a list"),
    ("metadata present as a string", lambda d: d["ranks"][0]["metadata"].update(present="yes"),
     "ranks[0].metadata.present", "not true or false"),
    ("a node id given twice", lambda d: _node(d).update(id=_node(d, j=0)["id"]),
     "ranks[0].nodes[1].id", "also ranks[0].nodes[0]'s"),
    ("an empty node", lambda d: d["ranks"][0]["nodes"].append({"id": 0, "type": "INVALID_NODE"}),
     "ranks[0].nodes[23]", "zero bytes"),
    # outputs their own readers refused: trace.-1.et, a hidden .0.et, float members
    ("rank -1 (wrote trace.-1.et)", lambda d: d["ranks"][3].update(rank=-1), "ranks[3].rank",
     "is -1, not a rank (an integer in 0..2147483647)"),
    ("a rank past int32", lambda d: d["ranks"][3].update(rank=2**31), "ranks[3].rank", "2147483648"),
    ("a float rank", lambda d: d["ranks"][3].update(rank=3.0), "ranks[3].rank", "is 3.0, not a rank"),
    ("a rank given twice", lambda d: d["ranks"][3].update(rank=1), "ranks[3].rank", "rank 1 is also ranks[1]"),
    ("an empty prefix (wrote a hidden .0.et)", lambda d: d.update(prefix=""), "prefix", "it is empty"),
    ("a prefix up a folder", lambda d: d.update(prefix="../x"), "prefix", 'is "../x", not a plain file name'),
    ("an absolute prefix", lambda d: d.update(prefix="/tmp/x"), "prefix", 'holds a "/"'),
    ("a hidden prefix", lambda d: d.update(prefix=".x"), "prefix", 'starts with "."'),
    ("a prefix with a newline", lambda d: d.update(prefix="a\nb"), "prefix", 'holds a "\\n"'),
    ("a prefix that is a number", lambda d: d.update(prefix=7), "prefix", "is 7, not a file name"),
    ("a float group member", lambda d: d["comm_groups"].update({"2": [0, 1.0]}), 'comm_groups: group "2"',
     "member 1.0 is not a rank"),
    ("a group member -1", lambda d: d["comm_groups"].update({"2": [0, -1]}), 'comm_groups: group "2"',
     "member -1 is not a rank"),
    ("a group member twice", lambda d: d["comm_groups"].update({"2": [0, 0]}), 'comm_groups: group "2"',
     "rank 0 listed twice"),
    ("a group as an object", lambda d: d["comm_groups"].update({"2": {"0": 1}}), 'comm_groups: group "2"',
     "expected a list of ranks"),
]


@pytest.mark.parametrize("what, damage, key, says", CASES, ids=[c[0] for c in CASES])
def test_json_load_refuses_a_damaged_document_naming_the_key(dumped, tmp_path, what, damage, key, says):
    doc = copy.deepcopy(dumped)
    damage(doc)
    res = _load(tmp_path, doc, raw="1e400")
    _refused(res, tmp_path, key, says)


def test_json_load_refuses_a_number_too_long_to_read(dumped, tmp_path):
    doc = copy.deepcopy(dumped)
    _node(doc).update(duration_micros=BIG)
    res = _load(tmp_path, doc, raw="9" * 5000)
    _refused(res, tmp_path, "cannot read a number", "5000 digits")


@pytest.mark.parametrize("prefix, says", [("../x", 'holds a "/"'), ("", "it is empty"), (".x", 'starts with "."')])
def test_json_load_refuses_a_prefix_option_that_is_no_plain_file_name(dumped, tmp_path, prefix, says):
    res = _load(tmp_path, copy.deepcopy(dumped), "--prefix", prefix)
    assert res.exit_code == 2 and f"--prefix is {json.dumps(prefix)}, not a plain file name" in res.output, res.output
    assert says in res.output and not (tmp_path / "out").exists() and not (tmp_path / "x.0.et").exists()


def test_json_load_of_an_undamaged_dump_writes_the_set_back(dumped, tmp_path):
    """The checks refuse nothing a dump writes: the set round-trips byte for byte, groups too."""
    rs = generate(TransformerConfig(layers=1, hidden=64, heads=2, seq=8, tp=2, dp=2))
    rs.write(tmp_path / "orig", "workload")
    res = _load(tmp_path, copy.deepcopy(dumped))
    assert res.exit_code == 0, res.output
    for name in [f"workload.{r}.et" for r in range(4)] + ["comm_group.json"]:
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "orig" / name).read_bytes(), name


def test_a_hand_written_document_may_leave_out_what_the_dump_writes_empty(tmp_path):
    doc = {"format": jsondump.FORMAT, "ranks": [{"rank": 0, "nodes": [{"id": 1, "type": "COMP_NODE"}]}]}
    rs = jsondump.rankset_from_json(doc, "t.json")
    assert rs.prefix == "trace" and rs.comm_groups == {} and rs[0][1].name == "" and rs[0][1].attrs == {}


def test_every_attribute_kind_round_trips(tmp_path):
    """Lists of every kind (the fuzz harness found int64_list refused on a dump of a real set)."""
    from chakra_tools.core.graph import Graph, RankSet
    from chakra_tools.core.model import LIST_KINDS, SCALAR_KINDS, Attr, Node, NodeType

    sample = {"int": 7, "sint": -7, "sfixed": -7, "uint": 7, "fixed": 7, "double": 0.5, "float": 0.5,
              "bool": True, "string": "s", "bytes": b"\x00\x01"}
    attrs = {}
    for kind in [*SCALAR_KINDS, *LIST_KINDS]:
        value = next(v for k, v in sample.items() if kind.startswith(k))
        attrs[kind] = Attr(kind, (value, value) if kind.endswith("_list") else value)
    rs = RankSet({0: Graph([Node(1, "n", NodeType.COMP_NODE, attrs=attrs)], rank=0)})
    rs.write(tmp_path / "a", "t")
    jsondump.dump(RankSet.load(tmp_path / "a"), tmp_path / "t.json")
    jsondump.load(tmp_path / "t.json").write(tmp_path / "b", "t")
    assert (tmp_path / "a" / "t.0.et").read_bytes() == (tmp_path / "b" / "t.0.et").read_bytes()
