"""How much of a capture's own record a replay uses (`CaptureModes`: `trace-replay --comm`,
`--host-time`, `--align`, `--lanes`, `--collective-start`, `--as-captured`), and the timing policy
(timing.py) each choice makes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

from chakra_tools.core.errors import InputError
from chakra_tools.feed.feeder import ETFeeder
from chakra_tools.feed.protocol import Backend

from .calibrate import COMM_MODES
from .resources import LANE_SPLITS
from .timing import Captured, Modelled, Staggered


def recorded_starts(feeders: Mapping[int, ETFeeder]) -> dict[int, int]:
    """Each rank's offset (ns) from the earliest rank, by the first recorded start time in its
    window: a capture's ranks begin their traced steps at different instants, and replaying them
    from those instants reproduces the skew they had (one clock for all ranks assumed, as on one
    host)."""
    first = {}
    for r, f in feeders.items():
        times = [f.info(n).start_time_micros for n in f.loaded_ids()]
        times = [t for t in times if t > 0]
        if times:
            first[r] = min(times)
    if not first:
        return {}
    base = min(first.values())
    return {r: (t - base) * 1000 for r, t in first.items()}


@dataclass(frozen=True)
class CaptureModes:
    """How much of a capture's own record a replay uses (all off: a what-if on the model).

    `comm`: "model" (the network model), "measured" or "calibrated" (calibrate.py);
    `host_time`: "ops" (each host op its duration), "gaps" (and the recorded time between host
    ops) or "timeline" (re-timed, recorded.py);
    `align`: "start" (every rank at 0) or "recorded" (the capture's skew between ranks);
    `lanes`: "kind" (one host thread, one compute and one comm queue per rank, as ASTRA-sim) or
    "stream" (a lane per recorded thread and device stream; see `Resources`).
    `coll_start` (on the model only): "arrival" (each member of a collective goes through it from
    its own arrival, as ASTRA-sim: `Staggered`) or "last" (every member from the last arrival).
    `AS_CAPTURED` replays a capture on the system it ran on (docs/reference/trace-replay.md).
    """

    comm: str = "model"
    host_time: str = "ops"
    align: str = "start"
    lanes: str = "kind"
    coll_start: str = "arrival"

    def check(self) -> "CaptureModes":
        for value, name, choices in ((self.comm, "--comm", COMM_MODES),
                                     (self.host_time, "--host-time", HOST_TIMES),
                                     (self.align, "--align", ("start", "recorded")),
                                     (self.lanes, "--lanes", LANE_SPLITS),
                                     (self.coll_start, "--collective-start", COLL_STARTS)):
            if value not in choices:
                raise InputError(f"{name} {value!r}: use " + " or ".join(choices))
        return self

    def merged_with(self, **chosen: str | None) -> "CaptureModes":
        """These modes with each one `chosen` in its place (None or "": keep this one's), checked:
        `trace-replay --as-captured --comm model` is `AS_CAPTURED.merged_with(comm="model")`.

        >>> AS_CAPTURED.merged_with(comm="model", align=None)
        CaptureModes(comm='model', host_time='timeline', align='recorded', lanes='stream', coll_start='arrival')
        """
        return replace(self, **{name: mode for name, mode in chosen.items() if mode}).check()

    @property
    def modelled(self) -> bool:
        return (self.comm, self.host_time, self.align) == ("model", "ops", "start")

    def timing(self, path: str | Path, feeders: Mapping[int, ETFeeder], backend: Backend) -> Modelled:
        """The timing policy these modes describe for the rank set at `path` (its files are read
        once more for the recorded timeline when a mode needs it)."""
        self.check()
        links = getattr(backend, "links", None)
        # the congestion-aware and cluster policies are imported where used: a plain replay's
        # command starts without them (25 ms of a 256-rank replay's 0.22 s)
        if links is not None:
            from .congestion import CapturedCongestionAware, CongestionAware

            if self.comm != "model" or self.coll_start != "arrival":
                raise InputError("--network-model congestion-aware prices communication on the links, each member of "
                                 "a collective from its own arrival: with --as-captured add --comm model; drop "
                                 "--collective-start last")
            if self.modelled:
                return CongestionAware(backend, links)
            return CapturedCongestionAware(backend, links, **self._captured(path, feeders))
        from .library import LibraryBackend

        if self.modelled and isinstance(backend, LibraryBackend):
            from .sharing import SharedUplinks

            return SharedUplinks(backend)  # gloo's calls start together: the start mode is moot
        if self.modelled:
            return Staggered(backend) if self.coll_start == "arrival" else Modelled(backend)
        return Captured(backend, comm=self.comm, **self._captured(path, feeders))

    def _captured(self, path: str | Path, feeders: Mapping[int, ETFeeder]) -> dict:
        """What `timing.Captured` takes from the capture's record under these modes."""
        from .recorded import read_rankset

        retimed, calibrated = self.host_time == "timeline", self.comm == "calibrated"
        timelines = read_rankset(path) if retimed or calibrated else {}
        return dict(host_gaps=self.host_time == "gaps",
                    host_ns={r: t.host_ns for r, t in timelines.items()} if retimed else None,
                    device_wait_ns={r: t.device_wait_ns for r, t in timelines.items()} if retimed else None,
                    comm_end_ns={r: t.comm_end_ns for r, t in timelines.items()},
                    comm_start_ns={r: t.comm_start_ns for r, t in timelines.items()},
                    blocking_sends={r: t.blocking_sends for r, t in timelines.items()},
                    start_ns=recorded_starts(feeders) if self.align == "recorded" else None)


HOST_TIMES = ("ops", "gaps", "timeline")
COLL_STARTS = ("arrival", "last")
AS_CAPTURED = CaptureModes(comm="calibrated", host_time="timeline", align="recorded", lanes="stream")
