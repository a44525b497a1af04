"""The report's "Network links" section: how busy each link of a replayed network was.

A replay that routed its messages over links (`trace-replay --network-model congestion-aware`, or
any replay on an InfraGraph) keeps in its result's `config`: `network_model`, `links_source` (the
network file), `link_notes` (where the links' values came from) and `links_busy`, one row per
direction of a link that carried a message, busiest first, at most LINKS_KEPT:
{"from": device, "to": device, "messages": int, "busy_ns": int}. Other replays (the
congestion-unaware model on an ASTRA-sim file) keep none, and the report shows no such section.

A link's busy share is `busy_ns / makespan_ns`: the time it spent serializing messages (a
message's size over the link's bandwidth; its latency and the time a message waited in the
link's queue not counted) over the replay's makespan. Under the congestion-aware model a link
serves one message at a time, so the share is at most 1; congestion-unaware on a graph of links,
messages do not wait for each other and a link's serializations may overlap (a share over 1).

Layout: NPUs (ASTRA-sim's "npu 3", InfraGraph's "dgx_h100.0.xpu.3") on the bottom row in rank
order; every other device (switches, NICs, ports) on a row above, by the hops of its class
("tier_0.port", "switch") from the NPUs' over the listed links; within a row, an InfraGraph
device's components together, each under the mean position of its neighbours below (one
barycentre pass), so that lines cross little. Only the listed links' devices are drawn; links
between devices of one row (a Ring, a FullyConnected) bend up as arcs.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from html import escape

from . import svg
from .tables import html_table

#: an NPU: ASTRA-sim's linknet names ("npu 3"), an InfraGraph xpu component ("dgx_h100.0.xpu.3")
NPU_NAME = re.compile(r"^npu \d+$|(^|\.)(xpu|gpu|npu)\.\d+$")
#: a class of devices that looks like switches (the bottom row is not theirs when no NPU is listed)
SWITCH_LIKE = re.compile(r"switch|tier|spine|leaf|core|agg|nvs|sw\b|port", re.I)
ROW_GAP = 120  # px between rows of devices
CHAR_W = 6.2  # px per character of a label at the drawing's 11 px font
MS = 1e6


# --------------------------------------------------------------------------------------------
# layout
# --------------------------------------------------------------------------------------------

def device_kind(name: str) -> str:
    """ "npu" or "switch" (anything that is not an NPU: switches, NICs, ports).

    >>> [device_kind(n) for n in ("npu 3", "switch 0", "dgx_h100.0.xpu.3", "tier_0.1.port.4")]
    ['npu', 'switch', 'npu', 'switch']
    """
    return "npu" if NPU_NAME.search(name) else "switch"


def device_class(name: str) -> str:
    """What a device is, its indices dropped: one row of the drawing holds one or more classes.

    >>> [device_class(n) for n in ("npu 3", "switch 1.2", "dgx_h100.0.cx7.3", "tier_0.1.port.4")]
    ['npu', 'switch', 'dgx_h100.cx7', 'tier_0.port']
    """
    return re.sub(r" \d+$", "", re.sub(r"\.\d+(?=\.|$)", "", name))


def instance(name: str) -> str:
    """The device a component belongs to (InfraGraph's "tier_0.1" of "tier_0.1.port.4"), else
    the name itself."""
    m = re.match(r"^(.+?\.\d+)\.", name)
    return m.group(1) if m else name


def natural(name: str) -> list:
    """Sort key with numbers by value: "npu 10" after "npu 9"."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _adjacency(pairs: list[tuple[str, str]]) -> dict[str, set[str]]:
    adj: dict[str, set[str]] = {}
    for a, b in pairs:
        adj.setdefault(a, set()).add(b)
        adj.setdefault(b, set()).add(a)
    return adj


def rows_of(pairs: list[tuple[str, str]]) -> list[list[str]]:
    """Devices by row, bottom first: the classes of NPUs, then the others by hops from them over
    the listed links between classes (unreached ones last), each row in order (`_ordered`).
    Classes, not devices, take the hops: the busiest links of a large network may not join up
    (NIC to leaf port, leaf port to spine port) when the switches' insides carried little.

    >>> rows_of([("npu 1", "switch 0"), ("npu 0", "switch 0"), ("switch 0", "spine 0")])
    [['npu 0', 'npu 1'], ['switch 0'], ['spine 0']]
    """
    adj = _adjacency(pairs)
    classes = _adjacency([(device_class(a), device_class(b)) for a, b in pairs])
    hops = _hops(classes, _base(classes, adj))
    rows: list[list[str]] = [[] for _ in range(max(hops.values(), default=-1) + 2)]
    for n in adj:
        rows[hops.get(device_class(n), len(rows) - 1)].append(n)
    return _ordered([r for r in rows if r], adj)


def _base(classes: dict[str, set[str]], devices: dict[str, set[str]]) -> list[str]:
    """The bottom row's classes: those of NPUs; without any listed, those that do not look like
    switches; else the classes at the end of a line."""
    npus = {device_class(n) for n in devices if device_kind(n) == "npu"}
    return (sorted(npus) or [c for c in classes if not SWITCH_LIKE.search(c)]
            or [c for c in classes if len(classes[c] - {c}) <= 1] or sorted(classes))


def _hops(adj: dict[str, set[str]], base: list[str]) -> dict[str, int]:
    hops = {n: 0 for n in base}
    queue = deque(base)
    while queue:
        n = queue.popleft()
        for m in sorted(adj[n]):
            if m not in hops:
                hops[m] = hops[n] + 1
                queue.append(m)
    return hops


def _ordered(rows: list[list[str]], adj: dict[str, set[str]]) -> list[list[str]]:
    """The bottom row in natural order; each row above keeps each device's components together,
    devices and then components under the mean position of their neighbours below (those with
    none after, in natural order)."""
    placed: dict[str, float] = {}  # position in its row, in gaps from the row's middle
    out = []
    for i, row in enumerate(rows):
        def below(names: list[str]) -> float:
            seen = [placed[m] for n in names for m in adj[n] if m in placed]
            return sum(seen) / len(seen) if seen else float("inf")

        groups: dict[str, list[str]] = {}
        for n in row:
            groups.setdefault(instance(n) if i else n, []).append(n)
        order = sorted(groups, key=lambda g: (below(groups[g]), natural(g)))
        row = [n for g in order for n in sorted(groups[g], key=lambda n: (below([n]), natural(n)))]
        placed.update((n, k - (len(row) - 1) / 2) for k, n in enumerate(row))
        out.append(row)
    return out


@dataclass(frozen=True)
class Layout:
    """Where each device is drawn: (name, x, y, kind, label side), and the drawing's size."""

    devices: tuple[tuple[str, float, float, str, str], ...]
    width: int
    height: int
    slant: bool


def layout(pairs: list[tuple[str, str]]) -> Layout:
    """Rows centred on one another, `ROW_GAP` apart; labels level when they fit, slanted else."""
    rows = rows_of(pairs)
    widest = max((len(r) for r in rows), default=1)
    gap = min(90.0, max(34.0, 1100 / widest))
    label_px = CHAR_W * max((len(n) for r in rows for n in r), default=1)
    slant = label_px > gap - 8
    margin = max(20.0, 0.82 * label_px + 10 if slant else label_px / 2 + 10)
    top = (0.57 * label_px + 20 if slant else 26) + (svg.ARC_MAX if len(rows) == 1 else 0)
    bottom = 0.57 * label_px + 26 if slant else 30
    middle = margin + widest * gap / 2
    devices = []
    for i, row in enumerate(rows):
        y = top + (len(rows) - 1 - i) * ROW_GAP
        for k, n in enumerate(row):
            devices.append((n, middle + (k - (len(row) - 1) / 2) * gap, y, device_kind(n), "below" if i == 0 else "above"))
    return Layout(tuple(devices), round(2 * margin + widest * gap), round(top + (len(rows) - 1) * ROW_GAP + bottom), slant)


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------

def drawing(data: dict) -> str:
    """The devices and links of `LinkUsage.to_dict()` as an SVG; the busiest links drawn last."""
    rows = data["links"]
    shape = layout([(r["from"], r["to"]) for r in rows])
    lines = [(r["from"], r["to"], svg.heat(r["share"]), 1.5 + 6 * min(r["share"], 1.0), _tip(r),
              {"from": r["from"], "to": r["to"], "messages": r["messages"], "busy-ns": r["busy_ns"],
               "share": f'{r["share"]:.6f}'})
             for r in sorted(rows, key=lambda r: r["share"])]
    return svg.network(shape.devices, lines, width=shape.width, height=shape.height, slant=shape.slant)


def _tip(r: dict) -> str:
    return (f'{r["from"]} → {r["to"]}: {r["messages"]} messages, busy {r["busy_ns"] / MS:.4g} ms, '
            f'{100 * r["share"]:.1f}% of the makespan')


def _explained(data: dict) -> str:
    kept = data["kept"]
    lines = [f'network model <b>{escape(data["network_model"])}</b>'
             + (f'; links of {escape(data["links_source"])}' if data["links_source"] else ""),
             "busy share: the time the link spent serializing messages (a message's size over the link's "
             "bandwidth; latency and time waiting in the link's queue not counted) over the replay's makespan, "
             f'{data["makespan_ns"] / MS:.4g} ms. One line per direction of a link, drawn to the right of its '
             "direction of travel; its colour and width grow with the share"]
    notes = []
    if data["truncated"]:
        notes.append(f"only the {kept} busiest link directions are kept in the replay result: the drawing and "
                     "the table show those, not every link of the network")
    if data["network_model"] == "congestion-unaware":
        notes.append("congestion-unaware: messages did not wait for each other, so a link's serializations "
                     "may overlap and its share exceed 100%")
    return ("".join(f'<p class="sub">{t}</p>' for t in lines)
            + "".join(f'<p class="note">{escape(n)}</p>' for n in notes + data["notes"]))


def source_html(src: dict) -> str:
    """One source's drawing, legend and table of its busiest links (`src["links"]`)."""
    data = src["links"]
    head = f'<div class="col"><h3>{escape(src["times"])}: {escape(src["source"])}</h3>{_explained(data)}'
    if not data["links"]:
        return head + '<p class="sub">no link carried a message</p></div>'
    table = html_table(["from", "to", "messages", "busy ms", "busy share"],
                       [[f'<span class="l">{escape(r["from"])}</span>', f'<span class="l">{escape(r["to"])}</span>',
                         str(r["messages"]), f'{r["busy_ns"] / MS:.3f}', f'{100 * r["share"]:.1f}%']
                        for r in data["links"]], "links-busy")
    return (head + svg.heat_legend("busy share (colour; line width grows with it too)")
            + f'<div data-chart="network-links" data-links="{len(data["links"])}">{drawing(data)}</div>'
            + f'<p class="sub">{_listed(data)}</p>{table}</div>')


def _listed(data: dict) -> str:
    n = len(data["links"])
    return (f"the {n} busiest link directions, busiest first" if data["truncated"] else
            f"every link direction that carried a message ({n}), busiest first")


def section_html(sources: list[dict]) -> str:
    """The "Network links" section, or "" when no source kept its links."""
    cols = [source_html(s) for s in sources if s.get("links") is not None]
    if not cols:
        return ""
    return '<h2 id="network-links">Network links</h2><div class="cols">' + "".join(cols) + "</div>"
