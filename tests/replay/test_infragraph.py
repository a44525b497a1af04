"""InfraGraph documents read as links (chakra_tools/replay/infragraph.py), built with the package's
own blueprints: a 2-tier Clos of DGX H100s (16 hosts, 128 GPUs), a generic server with a switch,
and a fitted cluster written and read back."""

import doctest
import json

import pytest

infragraph = pytest.importorskip("infragraph")

from infragraph.blueprints.devices.generic.generic_switch import Switch  # noqa: E402
from infragraph.blueprints.devices.generic.server import Server  # noqa: E402
from infragraph.blueprints.devices.nvidia.dgx import NvidiaDGX  # noqa: E402
from infragraph.blueprints.fabrics.clos_fat_tree_fabric import ClosFatTreeFabric  # noqa: E402
from infragraph.blueprints.fabrics.single_tier_fabric import SingleTierFabric  # noqa: E402

from chakra_tools.core.errors import InputError  # noqa: E402
from chakra_tools.replay import infrawrite  # noqa: E402
from chakra_tools.replay.fabric import Fabric, Level  # noqa: E402
from chakra_tools.replay.infragraph import is_infragraph, read_infragraph, to_network  # noqa: E402
from chakra_tools.replay.infrawrite import fabric_infragraph, write_infragraph  # noqa: E402


def _dgx_clos():
    """16 DGX H100 under a 2-tier Clos of 16-port switches: 400 Gbit/s host links, 800 spine."""
    return ClosFatTreeFabric(Switch(port_count=16), NvidiaDGX("dgx_h100"), 2, [400, 800])


def _annotations():
    """What the blueprints leave without a bandwidth and the table does not know: the switches'
    'ic' and the DGX's CPU fabric (Infinity Fabric)."""
    ann = infragraph.Annotation()
    ann.links.add(name="ic").attributes.add(attribute="bandwidth", value="12800 Gbps")
    cpu = ann.links.add(name="cpu_fabric")
    cpu.attributes.add(attribute="bandwidth", value="64 GBps")
    cpu.attributes.add(attribute="latency", value="0.1 us")
    return ann


def _write_annotated(infra, path, encoding):
    doc = {"infrastructure": infra.serialize("dict"), "annotations": _annotations().serialize("dict")}
    path.write_text(json.dumps(doc) if encoding == "json" else _yaml(doc))
    return path


def _yaml(doc):
    import yaml

    return yaml.safe_dump(doc)


@pytest.fixture(scope="module")
def dgx_docs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dgx")
    infra = _dgx_clos()
    return {enc: _write_annotated(infra, folder / f"dgx.{enc}", enc) for enc in ("yaml", "json")}


@pytest.mark.parametrize("encoding", ["yaml", "json"])
def test_dgx_clos_npus_in_rank_order(dgx_docs, encoding):
    net = read_infragraph(dgx_docs[encoding])
    assert len(net.npus) == 128
    # instance order, then the instance's index, then the component's index
    assert net.npus[:2] == ("dgx_h100.0.xpu.0", "dgx_h100.0.xpu.1")
    assert net.npus[7:9] == ("dgx_h100.0.xpu.7", "dgx_h100.1.xpu.0")
    assert net.npus[-1] == "dgx_h100.15.xpu.7"


def test_yaml_and_json_read_the_same(dgx_docs):
    a, b = read_infragraph(dgx_docs["yaml"]), read_infragraph(dgx_docs["json"])
    assert a.npus == b.npus
    assert sorted((e.a, e.b, e.bytes_per_ns) for e in a.edges) == sorted((e.a, e.b, e.bytes_per_ns) for e in b.edges)


def test_dgx_clos_bandwidths_and_their_sources(dgx_docs):
    net = read_infragraph(dgx_docs["yaml"])
    by_link = {}
    for e in net.edges:
        by_link.setdefault((e.source, e.bytes_per_ns), 0)
        by_link[(e.source, e.bytes_per_ns)] += 1
    assert by_link == {
        ("table: NVLink 4", 450 / 4): 512,        # 8 GPUs x 4 NVSwitch chips x 16 hosts, 450 GB/s per GPU over 4
        ("table: PCIe Gen 5 x16", 63.0): 464,     # the description names Gen 5: 504 Gbit/s
        ("annotation", 1600.0): 384,             # 'ic' 12800 Gbps
        ("annotation", 64.0): 16,                # 'cpu_fabric' 64 GBps
        ("document", 50.0): 128,                 # tier_0_link 400 Gbit/s
        ("document", 100.0): 128,                # tier_1_link 800 Gbit/s
    }
    cpu = next(e for e in net.edges if e.a.endswith("cpu.0") and e.b.endswith("cpu.1"))
    assert cpu.latency_ns == 100.0
    notes = "\n".join(net.notes)
    assert "link 'xpu_fabric' (512 edges)" in notes and "NVLink 4" in notes
    assert "link 'pcie' (464 edges)" in notes and "PCIe Gen 5 x16" in notes
    assert not any(n.startswith(("link 'ic'", "link 'cpu_fabric'")) for n in net.notes)  # annotated


def test_routes_through_switches_and_over_nvlink(dgx_docs):
    net = to_network(read_infragraph(dgx_docs["yaml"]))
    inside = [net.name(d) for d in net.route(0, 1)]
    assert inside[0] == "dgx_h100.0.xpu.0" and inside[-1] == "dgx_h100.0.xpu.1"
    assert len(inside) == 3 and inside[1].startswith("dgx_h100.0.nvsw.")
    across = [net.name(d) for d in net.route(0, 8)]
    assert across == ["dgx_h100.0.xpu.0", "dgx_h100.0.pciesl.0", "dgx_h100.0.cx7.0",
                      "tier_0.0.port.0", "tier_0.0.asic.0", "tier_0.0.port.8",
                      "tier_1.0.port.0", "tier_1.0.asic.0", "tier_1.0.port.1",
                      "tier_0.1.port.8", "tier_0.1.asic.0", "tier_0.1.port.0",
                      "dgx_h100.1.cx7.0", "dgx_h100.1.pciesl.0", "dgx_h100.1.xpu.0"]
    # over NVLink alone: 1 MB at 112.5 GB/s, twice (GPU -> NVSwitch -> GPU), no latency stated
    assert net.alone_ns(0, 1, 1_000_000) == 2 * int(1_000_000 / 112.5)


def test_link_without_bandwidth_or_known_kind_is_refused_by_name_where_a_message_crosses_it(tmp_path):
    """The blueprints leave the switches' 'ic' and the DGX's CPU fabric without a bandwidth. The
    document still reads (the notes name both); GPUs of one DGX talk over NVLink, which the table
    knows; a message between DGXs crosses a switch's 'ic' and is refused by name. The CPU fabric,
    which no GPU-to-GPU route takes, never matters."""
    path = tmp_path / "clos.yaml"
    path.write_text(_dgx_clos().serialize("yaml"))
    infra = read_infragraph(path)
    assert any("'cpu_fabric'" in n and "'ic'" in n for n in infra.notes)
    net = to_network(infra)
    assert net.alone_ns(0, 1, 1_000_000) > 0  # within one DGX
    for _ in range(2):  # refused the second time it is asked for too
        with pytest.raises(InputError) as e:
            net.alone_ns(0, 8, 1_000_000)  # the next DGX, through the Clos
    text = str(e.value)
    assert text.startswith(str(path)) and "link 'ic' has no bandwidth" in text and "rank 0 to rank 8" in text


def test_generic_server_takes_default_generations_from_the_table(tmp_path):
    """The generic server's links are named 'nvlink' and 'pcie' with no generation: NVLink 4 and
    PCIe Gen 4, and the note says so; its one edge per GPU to the NVLink switch gets all 450 GB/s."""
    infra = SingleTierFabric(Server(), 2, bandwidth=100)
    for device in infra.devices:
        for link in device.links:
            if link.name in ("fabric", "ic"):
                link.physical.bandwidth.gigabits_per_second = 1000
    path = tmp_path / "single.json"
    path.write_text(infra.serialize("json"))
    net = read_infragraph(path)
    assert net.npus == ("server.0.xpu.0", "server.0.xpu.1", "server.1.xpu.0", "server.1.xpu.1")
    rates = {(e.source, e.bytes_per_ns) for e in net.edges}
    assert ("table: NVLink 4", 450.0) in rates and ("table: PCIe Gen 4 x16", 31.5) in rates
    notes = [n for n in net.notes if "no generation named" in n]
    assert sorted(n.split(" (")[0] for n in notes) == ["link 'nvlink'", "link 'pcie'"]
    route = [to_network(net).name(d) for d in to_network(net).route(0, 2)]
    assert route[0] == "server.0.xpu.0" and "switch.0.asic.0" in route and route[-1] == "server.1.xpu.0"


def test_stated_bandwidth_wins_over_an_annotation(tmp_path):
    infra = SingleTierFabric(Server(), 1, bandwidth=100)
    ann = infragraph.Annotation()
    for name, value in (("switch-link", "1 Gbps"), ("fabric", "8 Gbps"), ("ic", "8 Gbps")):
        ann.links.add(name=name).attributes.add(attribute="bandwidth", value=value)
    path = tmp_path / "doc.yaml"
    path.write_text(_yaml({"infrastructure": infra.serialize("dict"), "annotations": ann.serialize("dict")}))
    edges = read_infragraph(path).edges
    uplinks = [e for e in edges if "switch.0.port" in e.a + e.b and "nic" in e.a + e.b]
    assert uplinks and {(e.bytes_per_ns, e.source) for e in uplinks} == {(100 / 8, "document")}


@pytest.mark.parametrize("bad, message", [
    ("40 GT/s", "needs a lane count"),
    ("fast", "not a positive number"),
    ("0 Gbps", "not a positive number"),
])
def test_bad_bandwidths_are_refused(tmp_path, bad, message):
    infra = SingleTierFabric(Server(), 1, bandwidth=100)
    ann = infragraph.Annotation()
    for name in ("fabric", "ic", "nvlink", "pcie"):
        ann.links.add(name=name).attributes.add(attribute="bandwidth", value=bad)
    path = tmp_path / "doc.json"
    path.write_text(json.dumps({"infrastructure": infra.serialize("dict"), "annotations": ann.serialize("dict")}))
    with pytest.raises(InputError, match=message):
        read_infragraph(path)


def test_not_an_infragraph(tmp_path):
    astra = tmp_path / "net.yml"
    astra.write_text("topology: [Switch]\nnpus_count: [4]\nbandwidth: [50]\nlatency: [500]\n")
    assert not is_infragraph(astra)
    assert not is_infragraph(tmp_path / "missing.yaml")
    with pytest.raises(InputError, match="not an InfraGraph document"):
        read_infragraph(astra)
    broken = tmp_path / "broken.yaml"
    broken.write_text("devices: 5\ninstances: []\n")
    assert is_infragraph(broken)
    with pytest.raises(InputError, match="not a valid InfraGraph document"):
        read_infragraph(broken)


@pytest.mark.parametrize("shared", [(False, True), (False, False), (True, True), (True, False)])
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_fitted_fabric_round_trip(tmp_path, shared, suffix):
    fabric = Fabric((Level("intra-node", 2, 1000, 0.01, shared=shared[0]),
                     Level("inter-node", 4, 20000, 80.0, shared=shared[1])))
    path = tmp_path / f"cluster{suffix}"
    write_infragraph(fabric_infragraph(fabric, "fitted"), path)
    assert is_infragraph(path)
    back = read_infragraph(path)
    # rank r on host r // 2, xpu r % 2: the fabric's address (r % k, r // k)
    assert back.npus == tuple(f"host.{r // 2}.xpu.{r % 2}" for r in range(8))
    assert {round(e.bytes_per_ns, 9) for e in back.edges} == {100.0, 0.0125}  # 1 / ns_per_byte
    assert all(e.source == "document" for e in back.edges)
    net = to_network(back)
    assert net.alone_ns(0, 1, 0) == 1000                       # the intra-node latency
    assert net.alone_ns(0, 2, 0) == 20000 + 1000 * all(shared)  # inter-node (plus lsw's where both are shared)
    path_0_2 = [net.name(d) for d in net.route(0, 2)]
    assert path_0_2[0] == "host.0.xpu.0" and "switch.0.asic.0" in path_0_2 and path_0_2[-1] == "host.1.xpu.0"
    uplinks = [e for e in back.edges if "switch.0.asic.0" in (e.a, e.b)]
    assert len(uplinks) == 4 * (1 if shared[1] else 2)  # one uplink per machine where shared


def test_shared_uplink_queues_the_flows_of_one_machine(tmp_path):
    """Two ranks of host 0 send to host 1 at once: with one uplink per machine the second waits."""
    from chakra_tools.replay.linknet import run_alone

    def ends(shared):
        fabric = Fabric((Level("intra-node", 2, 0, 0.01), Level("inter-node", 2, 0, 80.0, shared=shared)))
        path = tmp_path / f"c{shared}.yaml"
        write_infragraph(fabric_infragraph(fabric), path)
        return run_alone(to_network(read_infragraph(path)), [(0, 0, 2, 1000), (0, 1, 3, 1000)])

    assert max(ends(True)) > max(ends(False))


def test_write_refuses_an_unknown_suffix_and_deep_fabrics(tmp_path):
    fabric = Fabric((Level("a", 2, 1, 0.1), Level("b", 2, 1, 1.0)))
    with pytest.raises(InputError, match=".yaml, .yml or .json"):
        write_infragraph(fabric_infragraph(fabric), tmp_path / "x.txt")
    assert not (tmp_path / "x.txt").exists()
    with pytest.raises(InputError, match="1 or 2 levels"):
        fabric_infragraph(Fabric(fabric.levels * 2))


def test_doctests():
    result = doctest.testmod(infrawrite)
    assert result.attempted > 0 and result.failed == 0


def test_an_empty_infrastructure_is_refused_by_name(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"devices": [], "instances": [], "edges": [], "links": []}))
    with pytest.raises(InputError, match=r"empty\.json: not a valid InfraGraph document"):
        read_infragraph(path)
