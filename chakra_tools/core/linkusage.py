"""The links a replay kept busy: the part of the replay result (`config.links_busy`) that a
replay over links writes (replay/congestion.py) and the report reads (visualize/links.py),
decoded and checked here, where it enters.

A replay that routed its messages over links (`trace-replay --network-model congestion-aware`, or
any replay on an InfraGraph) keeps in its result's `config`: `network_model`, `links_source` (the
network file), `link_notes` (where the links' values came from) and `links_busy`, one row per
direction of a link that carried a message, busiest first, at most LINKS_KEPT:
{"from": device, "to": device, "messages": int, "busy_ns": int}. A link's busy share is
`busy_ns / makespan_ns`: the time it spent serializing messages over the replay's makespan.

>>> u = link_usage({"network_model": "congestion-aware", "links_busy": [
...     {"from": "npu 0", "to": "switch 0", "messages": 2, "busy_ns": 500}]}, 1000, "r.json")
>>> u.links[0].src, u.share(u.links[0])
('npu 0', 0.5)
>>> link_usage({"network": "inline"}, 1000, "old.json") is None
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import InputError
from .fields import array, integer, obj

#: the busiest link directions a replay result keeps
LINKS_KEPT = 64


@dataclass(frozen=True)
class LinkBusy:
    """One direction of a link, `src` to `dst`: the messages it carried and its ns serializing."""

    src: str
    dst: str
    messages: int
    busy_ns: int


@dataclass(frozen=True)
class LinkUsage:
    """The links a replay kept (`links`, busiest first) and what they are measured against."""

    model: str
    source: str
    notes: tuple[str, ...]
    links: tuple[LinkBusy, ...]
    makespan_ns: int

    def share(self, link: LinkBusy) -> float:
        """`link`'s busy share: its ns serializing over the makespan."""
        return link.busy_ns / self.makespan_ns if self.makespan_ns > 0 else 0.0

    @property
    def truncated(self) -> bool:
        """Whether the replay may have left links out (it listed as many as it keeps)."""
        return len(self.links) >= LINKS_KEPT

    def to_dict(self) -> dict:
        return {"network_model": self.model, "links_source": self.source, "notes": list(self.notes),
                "makespan_ns": self.makespan_ns, "kept": LINKS_KEPT, "truncated": self.truncated,
                "links": [{"from": k.src, "to": k.dst, "messages": k.messages, "busy_ns": k.busy_ns,
                           "share": self.share(k)} for k in self.links]}


def link_usage(config: dict, makespan_ns: int, source: str) -> LinkUsage | None:
    """The links of a replay result's `config`, or None when it kept none (an older result, a
    congestion-unaware replay of an ASTRA-sim file). InputError names `source` and the field."""
    if "links_busy" not in config:
        return None
    rows = array(config["links_busy"], source, "config.links_busy")
    notes = array(config.get("link_notes", []), source, "config.link_notes")
    return LinkUsage(str(config.get("network_model") or "unknown"), str(config.get("links_source") or ""),
                     tuple(str(n) for n in notes),
                     tuple(_link(r, source, f"config.links_busy[{i}]") for i, r in enumerate(rows)), makespan_ns)


def _link(v: Any, source: str, where: str) -> LinkBusy:
    row = obj(v, source, where)
    ends = [row.get(k) for k in ("from", "to")]
    for k, end in zip(("from", "to"), ends):
        if not isinstance(end, str):
            raise InputError(f"{source}: {where}.{k} is {end!r}, not a device name")
    return LinkBusy(ends[0], ends[1], integer(row.get("messages"), source, f"{where}.messages"),
                    integer(row.get("busy_ns"), source, f"{where}.busy_ns"))
