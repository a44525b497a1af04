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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .errors import InputError
from .model import Attr, Metadata, make_attr

WINDOW, STEPS, HOST_END = "measured_window_ns", "profiler_steps_ns", "host_end_ns"


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
