"""A fitted cluster (replay/fabric.py's `Fabric`, one or two levels) written as an InfraGraph
document, which infragraph.py reads back and ASTRA-sim 3.0 takes as its network.
"""

from __future__ import annotations

from pathlib import Path

from chakra_tools.core.errors import InputError

from .fabric import Fabric, Level
from .infragraph import PACKAGE_ERRORS, infragraph_package


def fabric_infragraph(fabric: Fabric, name: str = "cluster"):
    """A fitted cluster (one or two levels) as an `infragraph.Infrastructure`: a device "host" with
    `levels[0].npus` xpus, `levels[1].npus` instances of it, and a device "switch" they hang from.

    Inside a host, the intra-node link joins every pair of xpus (each rank its own link) or, for a
    shared level, every xpu to the host's switch `lsw` (each rank's link shared by its messages),
    each of the two hops carrying half the latency. Across hosts, link "uplink" joins each host's
    NIC to the switch with the inter-node rate and half its latency on each of the two uplinks a
    message crosses: one NIC per host where the level is shared (its flows share the machine's
    uplink; where the intra-node level is shared too, the host's `lsw` is that NIC), else one per
    xpu. Link "host-nic" takes a rank to its NIC at the intra-node rate and no latency. So a
    message alone pays its level's latency once (across hosts whose both levels are shared, the
    intra-node latency too, on its way through `lsw`); linknet stores and forwards, so it pays
    its bytes once per hop: twice across a switch, and the host-nic hops at the intra-node rate.

    >>> f = Fabric((Level("intra-node", 2, 1000, 0.01), Level("inter-node", 4, 20000, 80.0, shared=True)))
    >>> [(i.name, i.count) for i in fabric_infragraph(f, "demo").instances]
    [('host', 4), ('switch', 1)]
    """
    ig, _ = infragraph_package()
    if not 1 <= len(fabric.levels) <= 2:
        raise InputError(f"fabric_infragraph writes a fabric of 1 or 2 levels, not {len(fabric.levels)}")
    intra, inter = fabric.levels[0], (fabric.levels[1] if len(fabric.levels) > 1 else None)
    try:
        infra = ig.Infrastructure(name=name, description="a fitted cluster (chakra_tools)")
        host, uplink_end = _host(ig, intra, inter)
        infra.devices.append(host)
        infra.instances.add(name="host", device="host", count=inter.npus if inter else 1)
        if inter is not None:
            _join_hosts(ig, infra, inter, uplink_end)
    except PACKAGE_ERRORS as e:
        raise InputError(f"fabric_infragraph: {' '.join(str(e).split())}") from None
    return infra


def write_infragraph(infra, path: str | Path) -> None:
    """Write an Infrastructure through the package's serializer, YAML (.yaml, .yml) or JSON
    (.json) by the name's suffix, atomically (a failure leaves no partial file)."""
    from chakra_tools.core.commit import atomic_output

    encoding = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}.get(Path(path).suffix.lower())
    if encoding is None:
        raise InputError(f"{path}: an InfraGraph is written as .yaml, .yml or .json")
    try:
        text = infra.serialize(encoding)
    except PACKAGE_ERRORS as e:
        raise InputError(f"{path}: not a valid InfraGraph to write: {' '.join(str(e).split())}") from None
    with atomic_output(path, "w") as f:
        f.write(text)


def _host(ig, intra: Level, inter: Level | None):
    """The host device, and the component its uplink leaves from."""
    host = ig.Device(name="host", description=f"{intra.npus} ranks ({intra.name})")
    _component(ig, host, "xpu", ig.Component.XPU, intra.npus)
    _link(host, "intra", intra, intra.latency_ns / 2 if intra.shared else intra.latency_ns)
    if intra.shared:
        _component(ig, host, "lsw", ig.Component.SWITCH, 1)
    _edge(host, ig.DeviceEdge.MANY2MANY, "intra", "xpu", "lsw[0]" if intra.shared else "xpu")
    if inter is None:
        return host, None
    if inter.shared and intra.shared:
        return host, "lsw[0]"
    _component(ig, host, "nic", ig.Component.NIC, 1 if inter.shared else intra.npus)
    _link(host, "host-nic", intra, 0.0)
    _edge(host, ig.DeviceEdge.MANY2MANY if inter.shared else ig.DeviceEdge.ONE2ONE, "host-nic", "xpu", "nic")
    return host, "nic"


def _join_hosts(ig, infra, inter: Level, uplink_end: str) -> None:
    """The switch device, one instance, and an uplink from every host's NIC(s) to it. (The schema
    wants a device to have a link and an edge: the switch's all-to-all among its one asic is
    empty.)"""
    switch = ig.Device(name="switch", description="the cluster's switch")
    _component(ig, switch, "asic", ig.Component.SWITCH, 1)
    _link(switch, "crossbar", inter, 0.0)
    _edge(switch, ig.DeviceEdge.MANY2MANY, "crossbar", "asic", "asic")
    infra.devices.append(switch)
    infra.instances.add(name="switch", device="switch", count=1)
    _link(infra, "uplink", inter, inter.latency_ns / 2)
    edge = infra.edges.add(scheme=ig.InfrastructureEdge.MANY2MANY, link="uplink")
    edge.ep1.instance, edge.ep1.component = "host", uplink_end
    edge.ep2.instance, edge.ep2.component = "switch[0]", "asic[0]"


def _component(ig, device, name: str, choice: str, count: int) -> None:
    device.components.add(name=name, count=count).choice = choice


def _link(owner, name: str, level: Level, latency_ns: float) -> None:
    """A link at the level's rate: Gbit/s = bytes/ns x 8."""
    if not level.ns_per_byte > 0:
        raise InputError(f"fabric_infragraph: level {level.name!r} has no rate (ns_per_byte {level.ns_per_byte})")
    link = owner.links.add(name=name, description=level.name)
    link.physical.bandwidth.gigabits_per_second = 8 / level.ns_per_byte
    link.physical.latency.ns = float(latency_ns)


def _edge(device, scheme: str, link: str, a: str, b: str) -> None:
    edge = device.edges.add(scheme=scheme, link=link)
    edge.ep1.component, edge.ep2.component = a, b
