"""The report's "Network links" section: a congestion-aware replay's busiest links, drawn and
tabled from the replay result itself; no section for a replay that kept no links.

Every rank set here is written inline and replayed for real (`replay_rankset`), so the numbers
the report shows are checked against the result it read, not against copied figures."""

from __future__ import annotations

import doctest
import json
import re
import xml.etree.ElementTree as ET
from html import unescape
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chakra_tools.cli.visualize import app as visualize_app
from chakra_tools.core.errors import InputError
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.linkusage import LINKS_KEPT
from chakra_tools.core.model import CommType, Node, NodeType as T, make_attrs
from chakra_tools.replay import SystemSpec, replay_rankset
from chakra_tools.visualize import links
from chakra_tools.visualize.report import report_data, write_report
from chakra_tools.visualize.sources import load_events

from .conftest import ARTIFACTS

MIB = 1 << 20
SVG = "{http://www.w3.org/2000/svg}"


# --------------------------------------------------------------------------------------------
# tiny rank sets, replayed
# --------------------------------------------------------------------------------------------

def _send(i: int, dst: int, size: int, tag: int) -> Node:
    return Node(i, f"send{i}", T.COMM_SEND_NODE, (), attrs=make_attrs(comm_dst=dst, comm_size=size, comm_tag=tag,
                                                                       is_cpu_op=False))


def _recv(i: int, src: int, size: int, tag: int) -> Node:
    return Node(i, f"recv{i}", T.COMM_RECV_NODE, (), attrs=make_attrs(comm_src=src, comm_size=size, comm_tag=tag,
                                                                       is_cpu_op=False))


def _all_reduce(i: int, size: int) -> Node:
    return Node(i, f"all_reduce{i}", T.COMM_COLL_NODE, (), attrs=make_attrs(
        comm_type=CommType.ALL_REDUCE, comm_size=size, pg_name="1", is_cpu_op=False))


def _write(tmp: Path, ranks: dict[int, list[Node]], groups: dict | None = None) -> Path:
    RankSet({r: Graph(nodes, rank=r) for r, nodes in ranks.items()}, groups or {}).write(tmp / "et", "t")
    return tmp / "et" / "t"


def _network(tmp: Path, topology: str, npus: int) -> Path:
    p = tmp / f"{topology.lower()}{npus}.yml"
    p.write_text(f"topology: [ {topology} ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    return p


def _fan_in(tmp: Path) -> Path:
    """4 ranks on a Switch: a 1 MiB all-reduce of all four, and ranks 0 and 1 sending rank 2
    2 MiB and 1 MiB: the switch's link to NPU 2 carries the most."""
    ranks = {r: [_all_reduce(1, MIB)] for r in range(4)}
    ranks[0].append(_send(2, 2, 2 * MIB, tag=1))
    ranks[1].append(_send(2, 2, MIB, tag=2))
    ranks[2] += [_recv(2, 0, 2 * MIB, tag=1), _recv(3, 1, MIB, tag=2)]
    return _write(tmp, ranks, {"1": [0, 1, 2, 3]})


def _replay(tmp: Path, prefix: Path, network: Path, model: str) -> Path:
    out = tmp / f"{model}.json"
    replay_rankset(prefix, SystemSpec(network=network, network_model=model)).write(out)
    return out


@pytest.fixture
def aware(tmp_path) -> Path:
    """The fan-in set replayed congestion-aware on a 4-NPU Switch; the result file."""
    return _replay(tmp_path, _fan_in(tmp_path), _network(tmp_path, "Switch", 4), "congestion-aware")


def _result(path: Path) -> dict:
    return json.loads(path.read_text())


def _table(html: str) -> list[list[str]]:
    body = re.search(r'<table data-chart="links-busy">(.*?)</table>', html).group(1)
    rows = re.findall(r"<tr>(.*?)</tr>", body)[1:]  # the header row first
    return [[unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td>(.*?)</td>", r)] for r in rows]


def _drawing(html: str) -> ET.Element:
    return ET.fromstring(re.search(r'<svg class="network".*?</svg>', html, re.S).group(0))


# --------------------------------------------------------------------------------------------
# the section
# --------------------------------------------------------------------------------------------

def test_the_section_tables_the_busiest_links_with_their_share_of_the_makespan(aware, tmp_path):
    doc = _result(aware)
    busy, makespan = doc["config"]["links_busy"], doc["makespan_ns"]
    # 4 NPUs, each linked both ways to the switch, all used by the all-reduce
    assert len(busy) == 8 and doc["config"]["network_model"] == "congestion-aware"
    top = busy[0]
    assert (top["from"], top["to"]) == ("switch 0", "npu 2")  # both sends and the all-reduce cross it

    html = write_report([load_events(aware)], tmp_path / "report.html").read_text()
    assert '<h2 id="network-links">Network links</h2>' in html
    rows = _table(html)
    assert len(rows) == len(busy)
    assert rows[0] == [top["from"], top["to"], str(top["messages"]), f'{top["busy_ns"] / 1e6:.3f}',
                       f'{100 * top["busy_ns"] / makespan:.1f}%']
    assert [r[:2] for r in rows] == [[b["from"], b["to"]] for b in busy]  # busiest first, as replayed
    assert "network model <b>congestion-aware</b>" in html
    assert "the time the link spent serializing messages" in html and "over the replay's makespan" in html
    assert "busiest link directions are kept" not in html  # 8 listed: nothing was left out


def test_report_data_carries_each_links_share(aware):
    doc = _result(aware)
    data = report_data([load_events(aware)])["sources"][0]["links"]
    assert data["network_model"] == "congestion-aware" and data["makespan_ns"] == doc["makespan_ns"]
    assert data["truncated"] is False and data["notes"] == doc["config"]["link_notes"]
    for got, want in zip(data["links"], doc["config"]["links_busy"], strict=True):
        assert (got["from"], got["to"], got["messages"], got["busy_ns"]) == \
               (want["from"], want["to"], want["messages"], want["busy_ns"])
        assert got["share"] == want["busy_ns"] / doc["makespan_ns"]
        assert 0 < got["share"] <= 1  # congestion-aware: a link serializes one message at a time


def test_the_drawing_has_every_listed_link_once_npus_below_the_switch(aware, tmp_path):
    doc = _result(aware)
    html = write_report([load_events(aware)], tmp_path / "report.html").read_text()
    svg = _drawing(html)
    drawn = {(p.get("data-from"), p.get("data-to")): float(p.get("data-share")) for p in svg.iter(f"{SVG}path")}
    assert len(drawn) == len(doc["config"]["links_busy"]) == len(list(svg.iter(f"{SVG}path")))
    for b in doc["config"]["links_busy"]:
        assert drawn[(b["from"], b["to"])] == pytest.approx(b["busy_ns"] / doc["makespan_ns"], abs=1e-6)
    where = {g.get("data-name"): g for g in svg.iter(f"{SVG}g") if g.get("class") == "device"}
    npus = [where[f"npu {r}"].find(f"{SVG}circle") for r in range(4)]
    switch = where["switch 0"].find(f"{SVG}rect")
    assert all(float(c.get("cy")) > float(switch.get("y")) for c in npus)  # NPUs on the row below
    assert [float(c.get("cx")) for c in npus] == sorted(float(c.get("cx")) for c in npus)  # rank order
    # the busiest link is the widest line and the darkest
    top = doc["config"]["links_busy"][0]
    widths = {(p.get("data-from"), p.get("data-to")): float(p.get("stroke-width")) for p in svg.iter(f"{SVG}path")}
    assert widths[(top["from"], top["to"])] == max(widths.values())
    assert 'class="heat-legend"' in html and "0%" in html and "100%" in html


def test_a_congestion_unaware_replay_of_an_astra_sim_file_has_no_section(tmp_path, replay_json):
    """No links kept: no section, and nothing else changes (nor for a result from before)."""
    result = _replay(tmp_path, _fan_in(tmp_path), _network(tmp_path, "Switch", 4), "congestion-unaware")
    assert "links_busy" not in _result(result)["config"]
    for path in (result, replay_json):
        es = load_events(path)
        assert es.links is None
        assert "links" not in report_data([es])["sources"][0]
        html = write_report([es], tmp_path / "report.html").read_text()
        assert "network-links" not in html and "Network links" not in html
        assert 'id="critical-path"' in html


def test_only_the_kept_busiest_links_are_listed_and_the_section_says_so(tmp_path):
    """9 ranks on a FullyConnected, each sending each other one message of its own size: 72
    link directions carry one message each; the replay keeps the 64 busiest (the largest)."""
    ranks: dict[int, list[Node]] = {r: [] for r in range(9)}
    size = {(s, d): (1 + 9 * s + d) * 64 * 1024 for s in range(9) for d in range(9) if s != d}
    for (s, d), n in size.items():
        ranks[s].append(_send(len(ranks[s]) + 1, d, n, tag=16 * s + d))
        ranks[d].append(_recv(len(ranks[d]) + 1, s, n, tag=16 * s + d))
    result = _replay(tmp_path, _write(tmp_path, ranks), _network(tmp_path, "FullyConnected", 9), "congestion-aware")
    busy = _result(result)["config"]["links_busy"]
    assert len(busy) == LINKS_KEPT == 64
    smallest_kept = sorted(size.values())[len(size) - 64]
    assert all(size[(int(b["from"][4:]), int(b["to"][4:]))] >= smallest_kept for b in busy)

    html = write_report([load_events(result)], tmp_path / "report.html").read_text()
    assert "only the 64 busiest link directions are kept in the replay result" in html
    assert len(_table(html)) == 64
    assert report_data([load_events(result)])["sources"][0]["links"]["truncated"] is True


def test_the_cli_report_json_and_page_carry_the_links(aware, tmp_path):
    out = tmp_path / "cli.html"
    run = CliRunner().invoke(visualize_app, ["report", str(aware), "-o", str(out), "--json"])
    assert run.exit_code == 0, run.output
    got = json.loads(run.output)["sources"][0]["links"]["links"][0]
    top = _result(aware)["config"]["links_busy"][0]
    assert (got["from"], got["to"], got["busy_ns"]) == (top["from"], top["to"], top["busy_ns"])
    assert 'id="network-links"' in out.read_text()


def test_the_report_renders_the_drawing_in_chromium(aware, tmp_path, chromium):
    out = write_report([load_events(aware)], tmp_path / "report.html")
    html = out.read_text()
    assert not re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)""", html)  # self-contained
    dom = chromium(out, ARTIFACTS / "report-network-links.png", size="1400,2400")
    chart = re.search(r'<div data-chart="network-links" data-links="(\d+)">', dom)
    assert chart and int(chart.group(1)) == len(_result(aware)["config"]["links_busy"])
    assert dom.count('class="link"') == int(chart.group(1))
    assert (ARTIFACTS / "report-network-links.png").stat().st_size > 10_000


def test_an_infragraph_clos_draws_its_nics_below_the_leaves_below_the_spines(tmp_path):
    """16 ranks on two DGX H100s under a 2-tier Clos of 16-port switches (the `infragraph`
    package's blueprints, 4:1 oversubscribed), GPU i of each DGX all-reducing 1 MiB with its
    peer: the busiest links are the NICs' and the tiers' ports, drawn by class in rows."""
    infragraph = pytest.importorskip("infragraph")
    from infragraph.blueprints.devices.generic.generic_switch import Switch
    from infragraph.blueprints.devices.nvidia.dgx import NvidiaDGX
    from infragraph.blueprints.fabrics.clos_fat_tree_fabric import ClosFatTreeFabric

    infra = ClosFatTreeFabric(Switch(port_count=16), NvidiaDGX("dgx_h100"), 2, [400, 100])
    ann = infragraph.Annotation()
    ann.links.add(name="ic").attributes.add(attribute="bandwidth", value="12800 Gbps")
    ann.links.add(name="cpu_fabric").attributes.add(attribute="bandwidth", value="512 Gbps")
    clos = tmp_path / "clos.json"
    clos.write_text(json.dumps({"infrastructure": infra.serialize("dict"), "annotations": ann.serialize("dict")}))
    ranks = {r: [Node(1, "all_reduce", T.COMM_COLL_NODE, (), attrs=make_attrs(
        comm_type=CommType.ALL_REDUCE, comm_size=MIB, pg_name=str(r % 8 + 1), is_cpu_op=False))] for r in range(16)}
    prefix = _write(tmp_path, ranks, {str(i + 1): [i, i + 8] for i in range(8)})
    result = _replay(tmp_path, prefix, clos, "congestion-aware")
    config = _result(result)["config"]

    html = write_report([load_events(result)], tmp_path / "report.html").read_text()
    assert f"links of {clos}" in html
    assert all(f'<p class="note">{n}</p>' in unescape(html) for n in config["link_notes"])
    assert _table(html)[0][:2] == [config["links_busy"][0]["from"], config["links_busy"][0]["to"]]
    ys: dict[str, set[float]] = {}
    for g in _drawing(html).iter(f"{SVG}g"):
        if g.get("class") == "device":
            dot = g.find(f"{SVG}rect")
            ys.setdefault(links.device_class(g.get("data-name")), set()).add(float(dot.get("y")))
    assert set(ys) == {"dgx_h100.cx7", "tier_0.port", "tier_1.port"}
    assert all(len(v) == 1 for v in ys.values())  # one row each
    nic, leaf, spine = (ys[c].pop() for c in ("dgx_h100.cx7", "tier_0.port", "tier_1.port"))
    assert nic > leaf > spine  # y grows downwards


# --------------------------------------------------------------------------------------------
# decoding and layout
# --------------------------------------------------------------------------------------------

def test_a_malformed_links_busy_names_the_file_and_the_field(aware, tmp_path):
    doc = _result(aware)
    doc["config"]["links_busy"][1]["messages"] = "194"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"bad\.json: config\.links_busy\[1\]\.messages is '194', not an integer"):
        load_events(bad)


def test_infragraph_names_lay_out_by_class_even_when_the_busiest_links_do_not_join_up():
    """The busiest links of a Clos are often NIC to leaf port and leaf port to spine port only
    (the switches' insides carried little): each class still gets its row, the NICs at the
    bottom, and each switch's ports stay together."""
    pairs = [("dgx_h100.1.cx7.0", "tier_0.1.port.0"), ("dgx_h100.0.cx7.0", "tier_0.0.port.0"),
             ("tier_0.0.port.8", "tier_1.0.port.0"), ("tier_0.1.port.8", "tier_1.0.port.1")]
    assert links.rows_of(pairs) == [["dgx_h100.0.cx7.0", "dgx_h100.1.cx7.0"],
                                    ["tier_0.0.port.0", "tier_0.0.port.8", "tier_0.1.port.0", "tier_0.1.port.8"],
                                    ["tier_1.0.port.0", "tier_1.0.port.1"]]
    # with the GPUs listed, they are the bottom row, in rank order
    gpus = [("dgx_h100.0.xpu.10", "dgx_h100.0.nvsw.0"), ("dgx_h100.0.xpu.2", "dgx_h100.0.nvsw.0")]
    assert links.rows_of(gpus)[0] == ["dgx_h100.0.xpu.2", "dgx_h100.0.xpu.10"]


def test_a_ring_is_one_row_of_npus_drawn_with_arcs():
    shape = links.layout([("npu 0", "npu 1"), ("npu 1", "npu 2"), ("npu 2", "npu 0")])
    assert {d[2] for d in shape.devices} == {shape.devices[0][2]}  # one row
    assert [d[0] for d in shape.devices] == ["npu 0", "npu 1", "npu 2"]


def test_docstring_examples():
    from chakra_tools.core import linkusage

    for module in (links, linkusage):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0
