"""InfraGraph documents (ASTRA-sim 3.0's infrastructure description) as a network of links (a
fitted cluster is written as one by infrawrite.py).

The `infragraph` package (pip install 'chakra-tools[infragraph]') owns the schema: it loads the
document (`Infrastructure.deserialize`), expands instances, component counts and sliced edges
(`xpu[0:4]`, one2one / many2many) into a networkx graph of fully qualified components
(`InfraGraphService.set_graph` -> `get_networkx_graph`: nodes `dgx.0.xpu.3` with a `type`, edges
with the `link` name and, where the link states them, `bandwidth` ("400 Gbps") and `latency`
("5 ns")) and applies annotations (`annotate_graph`). This module only reads that graph.

A document is either an `Infrastructure` (keys devices, links, instances, edges) or the package's
infrastructure-with-annotations (`GraphResponseInfragraph`: keys infrastructure, annotations),
JSON or YAML. An edge's bandwidth and latency come from its link's `physical` block first; a link
without one takes an annotation's `bandwidth` / `latency` attribute ("400 Gbps", "50 GBps", "2 us";
a bare number is Gbit/s or ns), then, for the bandwidth, the table of known link kinds below,
matched on the link's name and description; a link with none of these is refused by name. A
latency found nowhere is 0 ns (the notes list those links). Every graph edge is one full-duplex
link of linknet (that rate each way); an edge given in GT/s is refused (it needs a lane count).

Assumption: one message takes one edge between two components; parallel physical links inside
one edge (a GPU's 18 NVLinks) are the edge's rate, not separate queues.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chakra_tools.core.errors import InputError
from chakra_tools.core.files import read_json, read_yaml_mapping

from .linknet import Edge, LinkNetwork, of_edges


@dataclass(frozen=True)
class KnownLink:
    """A link kind's rate per direction in Gbit/s (10^9 bits). `per_gpu`: the rate is a GPU's
    whole port (all its links of the kind), split evenly over the edges of that link at the GPU;
    else the rate of one edge."""

    label: str
    gbit_s: float
    per_gpu: bool


#: Known link kinds, per direction. NVLink per GPU, all its links together (NVIDIA's P100, V100,
#: A100, H100 and Blackwell architecture whitepapers: 4 x 20, 6 x 25, 12 x 25, 18 x 25, 18 x 50
#: GB/s), so a DGX H100's GPU, drawn with one edge to each of its 4 NVSwitch chips, gets 450/4 =
#: 112.5 GB/s an edge (its 18 links sit 5/4/4/5 on the chips) and a generic server's GPU, with one
#: edge to one NVLink switch, all 450. NVLink-C2C: 900 GB/s both ways (Grace Hopper whitepaper).
#: PCIe: one x16 link, transfer rate x 16 lanes x 128b/130b (PCI-SIG: 8, 16, 32 GT/s for Gen 3-5);
#: Gen 6 at its raw 64 GT/s x 16 (FLIT mode's overhead not taken off). A name without a generation
#: ("nvlink", "pcie") takes NVLink 4 and PCIe Gen 4 (the generic server blueprint's), and says so.
KNOWN_LINKS: dict[str, KnownLink] = {
    "nvlink1": KnownLink("NVLink 1", 640.0, True),
    "nvlink2": KnownLink("NVLink 2", 1200.0, True),
    "nvlink3": KnownLink("NVLink 3", 2400.0, True),
    "nvlink4": KnownLink("NVLink 4", 3600.0, True),
    "nvlink5": KnownLink("NVLink 5", 7200.0, True),
    "nvlink-c2c": KnownLink("NVLink-C2C", 3600.0, True),
    "pcie3": KnownLink("PCIe Gen 3 x16", 126.0, False),
    "pcie4": KnownLink("PCIe Gen 4 x16", 252.0, False),
    "pcie5": KnownLink("PCIe Gen 5 x16", 504.0, False),
    "pcie6": KnownLink("PCIe Gen 6 x16", 1024.0, False),
}
#: (pattern on the name and description, lowercased with everything but letters and digits
#: removed; the table's key, or a format with the generation the pattern caught; whether it is a
#: default), most specific first
_KIND_PATTERNS = (
    (r"nvlinkc2c", "nvlink-c2c", False),
    (r"nvlink(?:gen|v)?([1-5])", "nvlink{}", False),
    (r"pcie(?:gen)?([3-6])", "pcie{}", False),
    (r"nvlink", "nvlink4", True),
    (r"pci(?:e|express)", "pcie4", True),
)
#: unit -> bytes/ns: Gbit/s (1e9 bits/s = 1/8 byte/ns; a bare number too), GB/s (1e9 bytes/s)
_RATES = {"gbps": 1 / 8, "gbit/s": 1 / 8, "": 1 / 8, "GBps": 1.0, "GB/s": 1.0}
_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "": 1.0}
_SOURCE = "chakra_tools.source"  # an edge attribute of our own: where its bandwidth came from
PACKAGE_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError, NameError, NotImplementedError)


@dataclass(frozen=True)
class InfraNetwork:
    """An InfraGraph read as links. `npus`: the fully qualified names of every xpu component in
    rank order: rank r is the r-th xpu by the document's instance order, then the instance's index,
    then the component's order in its device, then the component's index (`host.1.xpu.0` after
    `host.0.xpu.7`). `edges`: one per graph edge. `notes`: where values came from that the document
    did not state (the table of known links, a default latency)."""

    npus: tuple[str, ...]
    edges: tuple[Edge, ...]
    notes: tuple[str, ...]
    source: str


def is_infragraph(path: str | Path) -> bool:
    """Whether `path` holds an InfraGraph document rather than an ASTRA-sim network file (whose
    keys are topology, npus_count, bandwidth, latency). Reads the file; needs no package."""
    try:
        return _looks_like(_load(path))
    except InputError:
        return False


def read_infragraph(path: str | Path) -> InfraNetwork:
    """The document's NPUs and links. InputError names the file and, for a link with no bandwidth
    anywhere, the link, its edge count and an edge."""
    doc = _load(path)
    if not _looks_like(doc):
        raise InputError(f"{path}: not an InfraGraph document (expected 'devices' and 'instances', "
                         "or 'infrastructure')")
    service, caught = _graph(path, doc)
    graph = service.get_networkx_graph()
    npus = _npus(path, service.infrastructure, graph)
    edges, notes = _edges(path, graph, _link_descriptions(service.infrastructure))
    return InfraNetwork(tuple(npus), tuple(edges), tuple(caught + notes), str(path))


def to_network(infra: InfraNetwork) -> LinkNetwork:
    """The congestion-aware model's network of the document (ranks on `infra.npus`)."""
    return of_edges(infra.npus, infra.edges, infra.source, infra.notes)


# -- reading ------------------------------------------------------------------------------------------
def infragraph_package():
    """The package (imported here so the rest of chakra_tools runs without it)."""
    try:
        import infragraph
        from infragraph import infragraph_service
    except ImportError as e:
        raise InputError(f"InfraGraph documents need the infragraph package ({e}): "
                         "pip install 'chakra-tools[infragraph]'") from None
    return infragraph, infragraph_service


def _load(path: str | Path) -> dict:
    """The document as a mapping: JSON where the name ends .json or the text starts with '{',
    else YAML."""
    p = Path(path)
    try:
        head = p.read_bytes()[:256].lstrip()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    if p.suffix.lower() == ".json" or head.startswith(b"{"):
        return read_json(p, what="an InfraGraph document (a JSON object)")
    return read_yaml_mapping(p, what="an InfraGraph document (a mapping)")


def _looks_like(doc: Any) -> bool:
    if isinstance(doc, dict) and "infrastructure" in doc:
        return isinstance(doc["infrastructure"], dict)
    return isinstance(doc, dict) and "devices" in doc and ("instances" in doc or "edges" in doc)


def _graph(path, doc: dict) -> tuple[Any, list[str]]:
    """The package's service holding the expanded graph, with the annotations applied; and the
    package's warnings (components joined to nothing), as notes."""
    ig, svc = infragraph_package()
    from networkx import NetworkXException  # the package's graph checks raise these too (an empty graph)

    errors = PACKAGE_ERRORS + (svc.InfrastructureError, svc.GraphError, NetworkXException)
    service = svc.InfraGraphService()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if "infrastructure" in doc:
                wrapped = ig.GraphResponseInfragraph().deserialize(doc)
                service.set_graph(wrapped.infrastructure)
                _annotate(service, wrapped.annotations)
            else:
                service.set_graph(ig.Infrastructure().deserialize(doc))
    except errors as e:
        raise InputError(f"{path}: not a valid InfraGraph document: {' '.join(str(e).split())}") from None
    return service, [f"infragraph: {w.message}"[:300] for w in caught]


def _annotate(service, annotations) -> None:
    """Apply the annotations, keeping what the links state: an annotation fills a bandwidth or a
    latency the document left out, it does not override one."""
    graph = service.get_networkx_graph()
    stated = {(a, b): {k: d[k] for k in ("bandwidth", "latency") if k in d} for a, b, d in graph.edges(data=True)}
    service.annotate_graph(annotations)
    for (a, b), kept in stated.items():
        data = graph.edges[a, b]
        if "bandwidth" in data and "bandwidth" not in kept:
            data[_SOURCE] = "annotation"
        data.update(kept)


def _npus(path, infra, graph) -> list[str]:
    """The xpu nodes in rank order (see InfraNetwork): the package adds a device's nodes instance
    by instance, component by component, so the graph's order breaks ties within one instance."""
    order = {inst.name: i for i, inst in enumerate(infra.instances)}
    xpus = [(n, k) for k, (n, d) in enumerate(graph.nodes(data=True)) if d.get("type") == "xpu"]
    if not xpus:
        raise InputError(f"{path}: no xpu components: the ranks run on xpus")

    def rank_key(item):
        name, position = item
        instance, index = name.split(".")[:2]
        return order.get(instance, len(order)), int(index), position

    return [n for n, _ in sorted(xpus, key=rank_key)]


def _edges(path, graph, descriptions: dict[str, str]) -> tuple[list[Edge], list[str]]:
    """One Edge per graph edge, in the graph's order; refuses every link with no bandwidth at once."""
    by_link: dict[str, list[tuple[str, str, dict]]] = defaultdict(list)
    for a, b, d in graph.edges(data=True):
        by_link[d.get("link", "")].append((a, b, d))
    rates: dict[tuple[str, str], tuple[float, str]] = {}
    notes, missing, no_latency = [], [], []
    for name, members in by_link.items():
        for a, b, d in members:
            if "bandwidth" in d:
                rates[(a, b)] = (_quantity(path, name, "bandwidth", d["bandwidth"], _RATES), d.get(_SOURCE, "document"))
        rest = [(a, b) for a, b, d in members if "bandwidth" not in d]
        if rest:
            kind, default = _kind(name, descriptions.get(name, ""))
            if kind is None:
                missing.append(name)
                rates.update({(a, b): (0.0, _no_rate(path, name)) for a, b in rest})
                continue
            rates.update(_table_rates(graph, rest, KNOWN_LINKS[kind]))
            notes.append(_table_note(name, len(rest), KNOWN_LINKS[kind], default))
        if any("latency" not in d for _, _, d in members):
            no_latency.append(name)
    if missing:
        notes.append("links without a bandwidth, refused if a message crosses one: " + ", ".join(map(repr, missing)))
    if no_latency:
        notes.append("links without a latency took 0 ns: " + ", ".join(map(repr, no_latency)))
    edges = [Edge(a, b, rates[(a, b)][0], _quantity(path, d.get("link", ""), "latency", d.get("latency", "0"), _NS),
                  rates[(a, b)][1]) for a, b, d in graph.edges(data=True)]
    return edges, notes


def _no_rate(path, name: str) -> str:
    """The refusal of a message over a link with no bandwidth (linknet refuses it on the route)."""
    return (f"{path}: link {name!r} has no bandwidth: give it physical.bandwidth.gigabits_per_second, a "
            "'bandwidth' annotation, or a name of a known kind (" + ", ".join(KNOWN_LINKS) + ")")


def _link_descriptions(infra) -> dict[str, str]:
    """Link name -> description, over the infrastructure's links and every device's (a DGX names
    its NVLink generation only there: link 'xpu_fabric', description 'nvlink_4')."""
    links = [*infra.links, *(link for device in infra.devices for link in device.links)]
    return {link.name: link.description for link in reversed(links) if link.description}


def _kind(name: str, description: str) -> tuple[str | None, bool]:
    """The table's key for a link kind named in `name` or `description`, and whether it is a
    default (no generation named)."""
    text = re.sub(r"[^a-z0-9]", "", f"{name} {description}".lower())
    for pattern, key, default in _KIND_PATTERNS:
        m = re.search(pattern, text)
        if m:
            return key.format(*m.groups()), default
    return None, False


def _table_rates(graph, pairs, kind: KnownLink) -> dict:
    """Each edge's rate from the table: a per-GPU kind split over the edges of this link at its
    GPU end (the busier end where both are GPUs; the whole rate where neither is)."""
    degree = Counter(x for pair in pairs for x in pair)

    def share(a: str, b: str) -> int:
        return max((degree[x] for x in (a, b) if graph.nodes[x].get("type") == "xpu"), default=1) if kind.per_gpu else 1

    return {(a, b): (kind.gbit_s / 8 / share(a, b), f"table: {kind.label}") for a, b in pairs}


def _table_note(name: str, count: int, kind: KnownLink, default: bool) -> str:
    return (f"link {name!r} ({count} edges): no bandwidth in the document; took {kind.label}'s {kind.gbit_s:g} "
            "Gbit/s per direction from the table of known links"
            + (" (a GPU's whole port, split over that GPU's edges of the link)" if kind.per_gpu else "")
            + (" (no generation named: the table's default)" if default else ""))


def _quantity(path, name: str, what: str, text: str, units: dict) -> float:
    """A "<number> <unit>" attribute in bytes/ns or ns; refused unless a number >= 0 (> 0 for a
    bandwidth) with one of `units`."""
    m = re.fullmatch(r"\s*([-+0-9.eE]+)\s*(\S*)\s*", str(text))
    factor = units.get(m.group(2), units.get(m.group(2).lower())) if m else None
    try:
        value = float(m.group(1)) * factor if factor is not None else -1.0
    except ValueError:
        value = -1.0
    if value < 0 or (value == 0 and what == "bandwidth"):
        hint = "; GT/s needs a lane count and an encoding: give gigabits_per_second" if "GT/s" in str(text) else ""
        raise InputError(f"{path}: link {name!r}: {what} {text!r} is not a {'positive ' * (what == 'bandwidth')}"
                         f"number with a unit of {', '.join(u for u in units if u)}{hint}")
    return value
