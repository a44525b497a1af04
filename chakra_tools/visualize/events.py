"""The one shape every timed source is brought into before it is drawn: an `EventSet`.

A captured run (measured times), a converted rank set (start times and durations) and a replay
result (simulated times) differ in what they know; the timeline and the report only need timed
work per rank, the dependencies between pieces of work, the communication records and, when known,
the critical path. Sources (sources.py) build an `EventSet`; drawing code reads nothing else.

Times are integer nanoseconds (`*_ns`), relative to whatever origin the source had; `origin_ns`
says where the earliest event starts so that drawings can start at zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from chakra_tools.core.errors import InputError

if TYPE_CHECKING:
    from chakra_tools.core.linkusage import LinkUsage

#: which dependency arrows a drawing keeps (`EventSet.narrow`)
FLOWS = ("all", "cross-rank", "none")
#: the three classes of work a lane holds; the report's breakdown is built from them
HOST, COMPUTE, COMM = "host", "compute", "comm"
KINDS = (HOST, COMPUTE, COMM)


@dataclass(frozen=True)
class Event:
    """One piece of timed work on one rank.

    `kind` is host, compute or comm; `lane` is the name of the lane it is drawn on (a host
    thread, a stream, "compute", "communication"); `node_id` ties it to its ET node when there is
    one, so dependencies can find it.
    """

    rank: int
    name: str
    kind: str
    lane: str
    start_ns: int
    end_ns: int
    node_id: int | None = None
    cat: str = ""
    args: dict[str, Any] | None = None

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


def rank_ranges(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    out: list[str] = []
    for r in sorted(ranks):
        if out and out[-1].split("-")[-1] == str(r - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ",".join(out)


def group_label(pg: str, members: Iterable[int] = ()) -> str:
    """How a report names a communicator: by its ranks where they are known, since torch's group
    names and the converted ids (comm_group.json, the world group 1) differ for the same group.

    >>> group_label("1", [0, 1, 2, 3]), group_label("0")
    ('ranks 0-3', 'pg 0')
    """
    members = list(members)
    return f"ranks {rank_ranges(members)}" if members else f"pg {pg}"


@dataclass(frozen=True)
class CommRecord:
    """One communication operation on one rank: kind (ALL_REDUCE, SEND...), bytes and group
    (`group_label`)."""

    rank: int
    name: str
    kind: str
    bytes: int
    group: str
    node_id: int | None = None


@dataclass
class EventSet:
    """Timed work of every rank of one run, from one source.

    `label` says how the times were obtained ("measured", "converted", "simulated");
    `deps` are (src rank, src node, dst rank, dst node) dependencies worth drawing;
    `breakdown` is a per-rank breakdown the source computed itself (the replayer does), else None
    and the report derives one from the events; `notes` say what the source had to assume; `flows` are event pairs the source linked itself
    (Kineto's launch -> kernel flows); `shift_ns` was subtracted from the source's times.
    """

    source: str
    label: str
    events: list[Event] = field(default_factory=list)
    deps: list[tuple[int, int, int, int]] = field(default_factory=list)
    comms: list[CommRecord] = field(default_factory=list)
    critical_path: list[tuple[int, int]] = field(default_factory=list)
    breakdown: dict[int, dict[str, int]] | None = None
    makespan_ns: int | None = None
    notes: list[str] = field(default_factory=list)
    flows: list[tuple[Event, Event, str]] = field(default_factory=list)
    shift_ns: int = 0  # subtracted from the source's times (epoch-based captures)
    fidelity: dict | None = None  # a replay's error against measured steps (replay result `fidelity`)
    links: LinkUsage | None = None  # a replay's busiest links, when it routed messages over links

    @property
    def ranks(self) -> list[int]:
        return sorted({e.rank for e in self.events} | set(self.breakdown or {}))

    @property
    def origin_ns(self) -> int:
        return min((e.start_ns for e in self.events), default=0)

    @property
    def end_ns(self) -> int:
        return max((e.end_ns for e in self.events), default=0)

    def by_node(self) -> dict[tuple[int, int], Event]:
        """(rank, node id) -> its event; the first one wins if a node was split."""
        out: dict[tuple[int, int], Event] = {}
        for e in self.events:
            if e.node_id is not None:
                out.setdefault((e.rank, e.node_id), e)
        return out

    def filter_ranks(self, ranks: Iterable[int]) -> "EventSet":
        """A copy holding only `ranks` (dependencies and flows with both ends kept)."""
        keep = set(ranks)
        return EventSet(
            self.source, self.label,
            [e for e in self.events if e.rank in keep],
            [d for d in self.deps if d[0] in keep and d[2] in keep],
            [c for c in self.comms if c.rank in keep],
            [p for p in self.critical_path if p[0] in keep],
            None if self.breakdown is None else {r: v for r, v in self.breakdown.items() if r in keep},
            self.makespan_ns, list(self.notes),
            [f for f in self.flows if f[0].rank in keep and f[1].rank in keep], self.shift_ns,
            self.fidelity, self.links)

    def narrow(self, ranks: Iterable[int] | None = None, flows: str = "all") -> "EventSet":
        """Only `ranks` (None: all), with the dependency arrows `flows` says: all, cross-rank
        (between ranks only) or none."""
        if flows not in FLOWS:
            raise InputError(f"--flows {flows!r}: expected {', '.join(FLOWS)}")
        es = self.filter_ranks(ranks) if ranks is not None else self
        if flows == "none":
            es.deps, es.flows = [], []
        elif flows == "cross-rank":
            es.deps = [d for d in es.deps if d[0] != d[2]]
            es.flows = [f for f in es.flows if f[0].rank != f[1].rank]
        return es
