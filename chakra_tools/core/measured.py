"""What a traced run measured of itself, kept in each rank file's GlobalMetadata so that any
converted host + device pair carries its own reference: a replay of it can say how far off it is
without a capture manifest.

Per rank, on the clock the device traces share (Kineto's, ns):

- `measured_window_ns` = [start, end]: the span of the host ops that the host trace holds and of
  the device work they launched (the two traces need not cover the same span: the host trace's
  span is what was converted, so it is what a replay reproduces);
- `profiler_steps_ns` = [start0, end0, start1, end1, ...]: the `ProfilerStep#N` ranges of the
  device trace that overlap that window (none when the run was not profiled by steps);
- `host_end_ns`: when the last of those host ops ended (a parent such as `ProfilerStep#N`
  included). On a GPU rank the window may end in a kernel, which a replay runs itself; the host's
  own end says how much host time followed its last op (`torch.cuda.synchronize()` and Python
  after `loss.item()`), which no node holds.

A rank set `trace-convert scale` wrote at another degree measured nothing there: it has none of
these, and `scaled_from` in their place says what it was made from (`scaled_from()` reads it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from .errors import InputError
from .model import Attr, Metadata, make_attr

if TYPE_CHECKING:
    from .graph import Graph

WINDOW, STEPS, HOST_END = "measured_window_ns", "profiler_steps_ns", "host_end_ns"
#: GlobalMetadata key of a rank `trace-convert scale` wrote, in place of the measured window:
#: JSON {"dp": the captured data-parallel degree, "batch": mode, "steps": captured steps or null,
#: "tp", "pp": the model-parallel degrees kept, where above 1}
SCALED_FROM = "scaled_from"
#: GlobalMetadata key (bool) of a rank whose host ops had the time their thread waited for a
#: collective in untraced code taken out (kept on each op as `collective_wait_ns`): by the
#: converter (build.py `_untraced_collective_waits`) or by `trace-convert scale` (`step_waits`)
WAITS_OUT = "collective_waits_out"


@dataclass(frozen=True)
class Measured:
    """One rank's measured window and profiler steps (ns on the traces' shared clock)."""

    window_ns: tuple[int, int]
    steps_ns: tuple[tuple[int, int], ...] = ()
    host_end_ns: int | None = None

    @property
    def duration_ns(self) -> int:
        return self.window_ns[1] - self.window_ns[0]

    def attrs(self) -> dict[str, Attr]:
        out = {WINDOW: make_attr(WINDOW, list(self.window_ns))}
        if self.steps_ns:
            out[STEPS] = make_attr(STEPS, [t for step in self.steps_ns for t in step])
        if self.host_end_ns is not None:
            out[HOST_END] = make_attr(HOST_END, self.host_end_ns)
        return out

    @classmethod
    def from_metadata(cls, meta: Metadata, where: str = "") -> "Measured | None":
        """The measured reference of a rank file's metadata, None if it has none; a malformed
        one is an InputError naming `where` (the file)."""
        attrs: Mapping[str, Attr] = meta.attrs or {}
        window = attrs.get(WINDOW)
        if window is None:
            return None
        w = _ints(window.value, where, WINDOW)
        if len(w) != 2 or w[1] < w[0]:
            raise InputError(f"{where}: GlobalMetadata {WINDOW} must be [start, end] with end >= start, "
                             f"not {list(w)}")
        steps = _ints(attrs[STEPS].value, where, STEPS) if STEPS in attrs else ()
        if len(steps) % 2:
            raise InputError(f"{where}: GlobalMetadata {STEPS} must hold start, end pairs")
        host_end = attrs.get(HOST_END)
        if host_end is not None and (type(host_end.value) is not int or not w[0] <= host_end.value <= w[1]):
            raise InputError(f"{where}: GlobalMetadata {HOST_END} must be an integer inside "
                             f"{WINDOW} {list(w)}, not {host_end.value!r}")
        return cls((w[0], w[1]), tuple(zip(steps[::2], steps[1::2])),
                   None if host_end is None else host_end.value)


def _ints(value, where: str, name: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                        for v in value):
        raise InputError(f"{where}: GlobalMetadata {name} must be a list of integers")
    return tuple(value)


def step_windows(meta: Metadata) -> tuple[tuple[int, int], ...]:
    """The rank's captured profiler steps as (start, end) pairs (`profiler_steps_ns`), () where it
    records none; read as it is, unchecked (`Measured.from_metadata` checks)."""
    a = meta.attrs.get(STEPS)
    if a is None or not isinstance(a.value, tuple) or len(a.value) < 2:
        return ()
    return tuple(zip(a.value[0::2], a.value[1::2]))


def waits_taken_out(meta: Metadata) -> bool:
    """Whether the rank's untraced collective waits are already out of its host ops (`WAITS_OUT`)."""
    a = meta.attrs.get(WAITS_OUT)
    return a is not None and a.value is True


def scaled_from(g: Graph) -> dict | None:
    """A scaled rank's `scaled_from` ({"dp", "batch", "steps", "tp", "pp"}; tp and pp are 1 where
    not written), None for a rank that was not scaled; an InputError for one that does not read."""
    return scaled_from_metadata(g.metadata, g.source or f"rank {g.rank}")


def scaled_from_metadata(meta: Metadata, where: str) -> dict | None:
    """`scaled_from` of a rank's GlobalMetadata (a feeder holds no Graph); `where` names it."""
    a = meta.attrs.get(SCALED_FROM)
    if a is None:
        return None
    try:
        doc = json.loads(a.value)
        ok = (isinstance(doc, dict) and isinstance(doc.get("dp"), int) and doc["dp"] >= 1
              and isinstance(doc.get("batch"), str)
              and (doc.get("steps") is None or isinstance(doc["steps"], int) and doc["steps"] >= 1)
              and all(isinstance(doc.get(k, 1), int) and doc.get(k, 1) >= 1 for k in ("tp", "pp")))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise InputError(f"{where}: GlobalMetadata {SCALED_FROM} is not "
                         '{"dp": int, "batch": str, "steps": int or null[, "tp": int, "pp": int]}')
    return {"dp": doc["dp"], "batch": doc["batch"], "steps": doc.get("steps"), "tp": doc.get("tp", 1),
            "pp": doc.get("pp", 1)}


def captured_steps(meta: Metadata, where: str) -> int | None:
    """How many training steps a rank's file holds: the profiler steps it was captured over, or
    for a scaled rank those of the capture it was made from; None where it does not say. A
    replay's makespan over them is its predicted step, one figure for `trace-replay` and the
    report alike."""
    info = scaled_from_metadata(meta, where)
    if info is not None:
        return info["steps"]
    return len(step_windows(meta)) or None
