"""Replays on InfraGraph documents built from the `infragraph` package's own blueprints: a real
8-rank GPU capture on DGX H100s under a 2-tier Clos, and an oversubscribed Clos changing an
all-reduce across DGXs by exactly what the hand calculation gives."""

from __future__ import annotations

import json

import pytest

infragraph = pytest.importorskip("infragraph")

from infragraph.blueprints.devices.generic.generic_switch import Switch  # noqa: E402
from infragraph.blueprints.devices.nvidia.dgx import NvidiaDGX  # noqa: E402
from infragraph.blueprints.fabrics.clos_fat_tree_fabric import ClosFatTreeFabric  # noqa: E402

from chakra_tools.replay import SystemSpec, replay_rankset  # noqa: E402

from _util import coll, write_rankset  # noqa: E402

MIB = 1 << 20


def dgx_clos(path, tier_gbit: tuple[int, int]):
    """16 DGX H100 (8 GPUs, a 400 Gbit/s NIC each) under a 2-tier Clos of 16-port switches,
    written with the annotations the blueprints need: a rate for the switches' internal 'ic'
    link (non-blocking: far above the ports') and for the DGX's CPU fabric."""
    infra = ClosFatTreeFabric(Switch(port_count=16), NvidiaDGX("dgx_h100"), 2, list(tier_gbit))
    ann = infragraph.Annotation()
    ann.links.add(name="ic").attributes.add(attribute="bandwidth", value="12800 Gbps")
    ann.links.add(name="cpu_fabric").attributes.add(attribute="bandwidth", value="512 Gbps")
    path.write_text(json.dumps({"infrastructure": infra.serialize("dict"), "annotations": ann.serialize("dict")}))
    return path


def test_oversubscription_slows_an_all_reduce_across_dgxs_as_the_hand_calculation_says(tmp_path):
    """GPU i of DGX 0 and GPU i of DGX 1 all-reduce 1 MiB, the eight pairs at once (data
    parallel across two DGXs). Destination-mod-k routing gives each pair its own tier-0 uplink,
    so only the rate of the two tier hops changes between a 1:1 Clos (400 Gbit/s up) and a 4:1
    one (100 Gbit/s up): the 2-member ring sends two 512 KiB messages one after the other, each
    over two tier hops, each hop int(m / rate) longer (the blueprint's links have no latency)."""
    groups = {str(i + 1): [i, i + 8] for i in range(8)}
    prefix = write_rankset(tmp_path / "set", {r: [coll(1, MIB, pg=str(r % 8 + 1))] for r in range(16)}, groups)
    makespan = {}
    for up in (400, 100):
        doc = dgx_clos(tmp_path / f"clos{up}.json", (400, up))
        said = []
        result = replay_rankset(prefix, SystemSpec(network=doc, network_model="congestion-aware"), record_events=False,
                                on_warning=said.append)
        makespan[up] = result.makespan_ns
        # the replay says which links took a rate from the table of known kinds; a job on some of
        # an InfraGraph's GPUs is no "network larger than the rank set"
        assert any(d.code == "link-rates" and "'xpu_fabric'" in d.message for d in said)
        assert not any(d.code == "network-larger" for d in said)
    m = MIB // 2
    hand = 2 * 2 * (int(m / (100 / 8)) - int(m / (400 / 8)))
    assert makespan[100] - makespan[400] == hand


def test_an_8_rank_gpu_capture_replays_on_dgx_h100s_in_a_clos(tmp_path, shared_fixtures, unpack):
    """The public 8-rank DLRM capture (PARAM; NCCL all-to-all and all-reduce) on one DGX H100 of
    the Clos: its messages take NVLink through the NVSwitches, and queueing there can only add
    time to the congestion-unaware replay on the same graph."""
    from chakra_tools.convert.run import convert, inputs_from_files

    hosts, devs = unpack("param/dlrm_8rank_host_et.tar.gz"), unpack("param/dlrm_8rank_kineto.tar.gz")
    report = convert(inputs_from_files([str(next(hosts.rglob(f"dlrm_eg_{r}.json"))) for r in range(8)],
                                       [str(next(devs.rglob(f"worker{r}_*.json"))) for r in range(8)], []),
                     tmp_path / "et", executor="serial")
    assert not report.errors
    doc = dgx_clos(tmp_path / "clos.json", (400, 100))
    out = {}
    for model in ("congestion-unaware", "congestion-aware"):
        result = replay_rankset(tmp_path / "et", SystemSpec(network=doc, network_model=model), record_events=False)
        out[model] = result
        assert result.config["network_model"] == model
        busy = result.config["links_busy"]
        assert busy and all("tier" not in row["from"] and "tier" not in row["to"] for row in busy)
        assert any("nvsw" in row["to"] for row in busy)  # GPU to NVSwitch: NVLink
    assert out["congestion-aware"].makespan_ns >= out["congestion-unaware"].makespan_ns


def test_dgxs_in_a_clos_are_planned_as_two_dimensions(tmp_path):
    """A collective over every GPU is planned as ASTRA-sim's service derives a DGX cluster: the 8
    GPUs of each DGX (NVSwitches: a Switch) within, the 16 DGXs across (the Clos: a Switch)."""
    from chakra_tools.replay.infragraph import read_infragraph, to_network
    from chakra_tools.replay.spec import graph_dims

    dims = graph_dims(to_network(read_infragraph(dgx_clos(tmp_path / "clos.json", (400, 100))))).dims
    assert [(d.topology, d.npus) for d in dims] == [("Switch", 8), ("Switch", 16)]
    # the slowest link between DGXs is a 100 Gbit/s uplink (12.5e9 B/s in GB/s of 2**30 bytes)
    assert dims[1].bandwidth_gbps == pytest.approx(12.5e9 / (1 << 30))
