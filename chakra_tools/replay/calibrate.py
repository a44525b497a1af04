"""Communication costed from a capture's own recorded times, without the time spent waiting.

A recorded collective or send/receive lasts from the instant its rank called it to the instant it
returned, so it holds two things: waiting for the peers to arrive (which a replay must re-create
from its own schedule, not copy) and the work done once everyone is there (the transfer, the
protocol, the reduction: what a replay should charge). On one clock, the second part is what is
left after the last participant arrived: member r's share is `end_r - max(start)`. Each member
keeps its own share (on gloo over loopback the last to arrive often returns milliseconds after the
others, and both are measured facts of that run).

`--comm measured` takes the shortest recorded duration instead (the last to arrive waited least);
it needs no common clock but charges every member that one figure.

Assumptions, stated once: start times of one rank set share a clock (one host, as `--align
recorded` assumes); a collective or matched send/receive completes on no member before every
member has called it (true of gloo and NCCL; an eager send that returns before its receive is
posted shows as a share below zero, and the instance falls back to the shortest duration).
Start times are whole µs (`start_time_micros`), so shares are good to about 1 µs.
"""

from __future__ import annotations

from typing import Sequence

from chakra_tools.feed.info import NodeInfo

#: start_time_micros resolution: a share this far below zero is rounding, not a broken clock
_SLACK_NS = 1000


def recorded_ns(info: NodeInfo) -> int | None:
    """The node's recorded duration in ns (`duration_ns` where kept, else whole µs), None if none."""
    if info.duration_ns:
        return info.duration_ns
    return info.duration_micros * 1000 if info.duration_micros > 0 else None


def interval_ns(info: NodeInfo, end_ns: int | None = None,
                start_ns: int | None = None) -> tuple[int, int] | None:
    """(start, end) recorded, in ns of the capture's clock (`end_ns`, `start_ns`, when given: the
    completion and the arrival, see recorded.py); None without a start or a duration."""
    ns = recorded_ns(info)
    if ns is None or info.start_time_micros <= 0:
        return None
    start = info.start_time_micros * 1000
    return (start if start_ns is None else start_ns), (start + ns if end_ns is None else end_ns)


def shortest_ns(infos: Sequence[NodeInfo]) -> int | None:
    """The shortest recorded duration among the participants (`--comm measured`), None if none."""
    durations = [d for d in map(recorded_ns, infos) if d is not None]
    return min(durations) if durations else None


def after_last_arrival_ns(spans: Sequence[tuple[int, int]],
                          unknown: Sequence[bool] | None = None) -> list[int] | None:
    """Per participant's recorded (start, end), its end minus the latest start: the time it
    spent once everyone was there. A participant whose end is `unknown` (recorded as its launch
    alone) gets the shortest of the known shares: it did not finish after all its peers had. None
    when a known end precedes the last arrival (different clocks, or a call that did not wait for
    its peers).

    >>> after_last_arrival_ns([(100_000, 1_000_000), (700_000, 1_050_000)])  # last arrived at 700 µs
    [300000, 350000]
    >>> print(after_last_arrival_ns([(100_000, 1_000_000), (2_000_000, 2_350_000)]))  # done before
    None
    >>> after_last_arrival_ns([(100, 31_000), (50, 60)], [False, True])  # 2nd: launch only
    [30900, 30900]
    """
    unknown = unknown or [False] * len(spans)
    last = max(s for s, _ in spans)
    known = [e - last for (_, e), u in zip(spans, unknown) if not u]
    if min(known) < -_SLACK_NS:
        return None
    floor = max(0, min(known))
    return [floor if u else max(0, e - last) for (_, e), u in zip(spans, unknown)]


def calibrated_ns(infos: Sequence[NodeInfo], ends_ns: Sequence[int | None] | None = None,
                  starts_ns: Sequence[int | None] | None = None) -> list[int] | None:
    """Each participant's calibrated time from the instant the last one joins: its share after
    the last arrival where every participant has a recorded start and duration and the record
    allows it, else the shortest recorded duration for all; None without any recorded duration
    (the caller falls back to the network model). `ends_ns`, `starts_ns`: per participant, its
    completion and its arrival where known better than its recorded end and start (recorded.py),
    else None."""
    none = [None] * len(infos)
    ends = list(ends_ns or none)
    unknown = [e is not None and e < 0 for e in ends]  # recorded.UNKNOWN_END: its launch alone
    spans = [interval_ns(i, None if u else e, s) for i, e, s, u in zip(infos, ends, starts_ns or none, unknown)]
    if all(unknown):  # no end known: the launches' own, as for any record
        unknown = [False] * len(infos)
    shares = None if None in spans else after_last_arrival_ns(spans, unknown)
    return shares if shares is not None else measured_ns(infos)


def measured_ns(infos: Sequence[NodeInfo], ends_ns=None, starts_ns=None) -> list[int] | None:
    """`--comm measured`: the shortest recorded duration, for every participant (`ends_ns` and
    `starts_ns` are ignored: this mode reads durations only)."""
    ns = shortest_ns(infos)
    return None if ns is None else [ns] * len(infos)


#: --comm mode -> per-participant times from the record (None: cost it with the network model)
RECORDED = {"measured": measured_ns, "calibrated": calibrated_ns}
COMM_MODES = ("model", *RECORDED)
