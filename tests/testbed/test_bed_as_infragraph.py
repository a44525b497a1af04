"""The test bed's namespaces described as the replay's fabric and written as an InfraGraph (no
root needed: the cluster is described, not made)."""

from __future__ import annotations

import pytest

from chakra_tools.replay.fabric import Level
from chakra_tools.replay.linknet import run_alone
from chakra_tools.testbed.cluster import Cluster, Shaping


def test_the_bed_as_a_fabric_has_its_shaped_uplinks():
    within = Level("intra-node", 1, 20_000.0, 0.05)
    fabric = Cluster(4, Shaping(100)).fabric(2, within)
    assert [lv.npus for lv in fabric.levels] == [2, 4]
    up = fabric.levels[1]
    assert up.shared and up.ns_per_byte == pytest.approx(80.0)  # 100 Mbit/s: 80 ns a byte
    # tbf's bucket: what a 4 ms timer tick releases at the rate (above 16 full frames), as time
    assert up.burst_ns == pytest.approx(max(16 * 1514 * 80.0, 4e6))
    with pytest.raises(ValueError, match="unshaped"):
        Cluster(2, None).fabric(2, within)


def test_the_bed_written_as_an_infragraph_replays_its_uplink_rate(tmp_path):
    pytest.importorskip("infragraph")
    from chakra_tools.replay.infragraph import read_infragraph, to_network
    from chakra_tools.replay.infrawrite import fabric_infragraph, write_infragraph

    fabric = Cluster(2, Shaping(100)).fabric(2, Level("intra-node", 1, 20_000.0, 0.05))
    path = tmp_path / "bed.infragraph.yaml"
    write_infragraph(fabric_infragraph(fabric, "testbed"), path)
    net = to_network(read_infragraph(path))
    assert net.npus == 4
    # two ranks of node 0 each send 1 MB to node 1 at once: they queue on node 0's one uplink
    one, two = sorted(run_alone(net, [(0, 0, 2, 1_000_000), (0, 1, 3, 1_000_000)]))
    assert two - one == pytest.approx(80_000_000, rel=0.01)  # one more megabyte at 80 ns a byte
