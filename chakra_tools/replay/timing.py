"""Timing policies: where a replay's durations come from, handed to the kernel from outside.

The kernel (engine.py) decides *when* things run: dependencies, resources, collectives meeting,
sends pairing with receives. How *long* each thing takes is the policy's answer, so one kernel
serves a what-if on a modelled system and a capture replayed on the system it ran on, CPU or GPU,
without a branch on either:

- `Modelled(backend)`: every duration from the backend (compute: the recorded duration or a
  roofline; communication: the network model). Every rank starts at 0, and every member of a
  collective goes through it from the last one's arrival (`--collective-start last`).
- `Staggered(backend)`: the same, but each member of a collective goes through its phases from
  its own arrival, as in ASTRA-sim (a rank that arrived early may leave early); what
  `Replayer(feeders, backend)` and a replay on the model use by default.
- `Captured(backend, ...)`: the capture's own record where it has one, the backend elsewhere:
  host ops re-timed from the recorded timeline (recorded.py) or kept with the untraced time
  between them; communication calibrated from the recorded times with the waiting taken out
  (calibrate.py); ranks started at their recorded offsets. `CaptureModes.timing` builds one.

A *member* below is one rank's part in a collective or a send/receive: a tuple whose first three
fields are (rank, node id, `NodeInfo`); a collective's member has its event and its arrival (ns)
after them.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from chakra_tools.core.errors import InputError
from chakra_tools.feed.info import NodeInfo
from chakra_tools.feed.protocol import Backend

from .calibrate import COMM_MODES, RECORDED, interval_ns, recorded_ns


class Modelled:
    """Every duration from `backend` (feed.Backend): the trace's recorded compute times (or a
    roofline) and the network model; a collective's members all start at the last arrival."""

    def __init__(self, backend: Backend):
        self.backend = backend
        #: a library whose sends wait for their receive past a window of bytes (gloo over TCP:
        #: the receiver's socket buffer; `p2p_window_bytes`): None, every send is eager
        self.window = getattr(backend, "p2p_window_bytes", None)
        self._ahead: dict[tuple[int, int], int] = {}  # (rank, send id) -> when its window arrived

    def begin_ns(self, rank: int) -> int:
        """When `rank` begins issuing."""
        return 0

    def compute_ns(self, rank: int, nid: int, info: NodeInfo) -> int:
        return self.backend.compute_ns(rank, info)

    def memory_finish_ns(self, rank: int, info: NodeInfo, now_ns: int) -> int:
        """A memory node's finish time (the backend may queue it on a shared port)."""
        return self.backend.memory_ns(rank, info, now_ns)

    def collective_ns(self, members: Sequence[tuple], group: tuple[int, ...], size: int) -> list[int]:
        """Each member's time from the instant the last one joined; `size`: the largest member's."""
        first = members[0][2]
        ns = self.backend.collective_ns(first.comm_type or 0, size, group, first.involved_dim)
        return [ns] * len(members)

    def eager_send_ns(self, rank: int, nid: int, info: NodeInfo, dst: int, now_ns: int = 0) -> int | None:
        """How long a send's data takes to arrive when it leaves at issue (`now_ns`, eager);
        None: the send is a rendezvous, timed by `rendezvous_ns` once its receive is posted. A
        message larger than the library's window sends the window at issue and the rest once
        the receive is posted: gloo's receiver reads a message only into the buffer its receive
        gives, so TCP's flow control holds the sender there (a pipeline stage that posts its
        receive late waits for most of the gradient it could have had already)."""
        if self.window is not None and info.comm_size > self.window and rank != dst:
            self._ahead[(rank, nid)] = now_ns + self._p2p_ns(rank, dst, self.window, now_ns)
            return None
        return self._p2p_ns(rank, dst, info.comm_size, now_ns)

    def rendezvous_ns(self, send: tuple, recv: tuple) -> tuple[int, int]:
        """(send, receive) times from the instant the later of the two was posted."""
        now = max(send[3], recv[3])
        ahead = self._ahead.pop((send[0], send[1]), None)
        if ahead is None:
            ns = self._p2p_ns(send[0], recv[0], send[2].comm_size, now)
            return ns, ns
        rest = self._p2p_ns(send[0], recv[0], send[2].comm_size - self.window, now)
        ns = max(ahead - now, rest)
        return ns, ns

    def _p2p_ns(self, src: int, dst: int, size: int, now_ns: int) -> int:
        """A message's time from `now_ns`: a backend that queues messages on shared links
        (`p2p_finish_ns`, library.LibraryBackend) says when it ends, any other how long it takes."""
        finish = getattr(self.backend, "p2p_finish_ns", None)
        if finish is None:
            return self.backend.p2p_ns(src, dst, size)
        return finish(src, dst, size, now_ns) - now_ns

    def describe(self) -> dict:
        return self.backend.describe()


class Staggered(Modelled):
    """The model, with each member of a collective going through its phases from its own arrival
    (ASTRA-sim's behaviour: its messages flow as its peers arrive; `backend.collective_finish_ns`).
    A backend without that method, or `Modelled` itself, starts every member at the last arrival
    (what `--collective-start last` asks for: docs/reference/trace-replay.md)."""

    def collective_ns(self, members: Sequence[tuple], group: tuple[int, ...], size: int) -> list[int]:
        finish = getattr(self.backend, "collective_finish_ns", None)
        if finish is None:
            return super().collective_ns(members, group, size)
        end_of, now = self.ends(finish, members, group, size)
        return [end_of[m[0]] - now for m in members]

    def ends(self, finish, members: Sequence[tuple], group: tuple[int, ...], size: int) -> tuple[dict[int, int], int]:
        """({every rank of `group`: its finish}, the last arrival), from the backend's `finish`."""
        first = members[0][2]
        arrival = {m[0]: m[4] for m in members}
        now = max(arrival.values())
        ends = finish(first.comm_type or 0, size, group, first.involved_dim,
                      [self.arrival_of(r, arrival, now) for r in group])
        return dict(zip(group, ends)), now

    def arrival_of(self, rank: int, arrival: Mapping[int, int], now: int) -> int:
        """When `rank` joined; a rank not in the set (Replayer's absent_peers) with the last one present."""
        return arrival.get(rank, now)


class Captured(Modelled):
    """A capture's own record where it has one, the backend elsewhere (docs/reference/trace-replay.md).

    `comm`: "model" (the network model), "measured" (the shortest recorded duration of a
    collective's members), "calibrated" (each member's recorded time after the last one arrived;
    a send with a recorded time is a rendezvous, as gloo's and NCCL's are).
    `host_ns` (rank -> node -> ns, recorded.RankTimeline.host_ns): host ops re-timed from the
    recorded timeline, in place of their own durations.
    `device_wait_ns` (rank -> node -> ns, RankTimeline.device_wait_ns): the time device work
    waited in its stream for something the trace does not show (`queued_ns`), added before it.
    `host_gaps`: keep the recorded time between a rank's host ops (Python between operators,
    which no node covers; Lumos keeps it the same way).
    `comm_end_ns` (rank -> node -> ns, RankTimeline.comm_end_ns): when each communication really
    completed, where the record's end is too late; `comm_start_ns` (RankTimeline.comm_start_ns):
    when its rank arrived at it, where that was before the recorded start (gloo's worker took it
    up later). `blocking_sends` (RankTimeline.blocking_sends): sends whose recorded end is kept
    even past their receive's.
    `start_ns` (rank -> ns): each rank's offset from the earliest (the capture's skew).
    """

    def __init__(self, backend: Backend, *, comm: str = "calibrated",
                 host_ns: Mapping[int, Mapping[int, int]] | None = None, host_gaps: bool = False,
                 device_wait_ns: Mapping[int, Mapping[int, int]] | None = None,
                 comm_end_ns: Mapping[int, Mapping[int, int]] | None = None,
                 comm_start_ns: Mapping[int, Mapping[int, int]] | None = None,
                 blocking_sends: Mapping[int, frozenset[int]] | None = None,
                 start_ns: Mapping[int, int] | None = None):
        super().__init__(backend)
        if comm not in COMM_MODES:
            raise InputError(f"unknown communication mode {comm!r}; use {', '.join(COMM_MODES)}")
        self.comm = comm
        self._recorded = RECORDED.get(comm)  # infos, ends -> per-member ns, or None: the model
        self.host_ns = host_ns
        self.host_gaps = host_gaps
        self.device_wait_ns = device_wait_ns or {}
        self.comm_end_ns = comm_end_ns or {}
        self.comm_start_ns = comm_start_ns or {}
        self.blocking_sends = blocking_sends or {}
        self.start_ns = dict(start_ns or {})
        self._host_end_us: dict[int, int] = {}  # rank -> recorded end of its latest host op

    def begin_ns(self, rank: int) -> int:
        return self.start_ns.get(rank, 0)

    def compute_ns(self, rank: int, nid: int, info: NodeInfo) -> int:
        if info.is_cpu_op and self.host_ns is not None:
            ns = self.host_ns.get(rank, {}).get(nid)
            if ns is not None:
                info = info._replace(duration_ns=ns, duration_micros=ns // 1000)
        ns = self.backend.compute_ns(rank, info)
        if not info.is_cpu_op and self.device_wait_ns:
            ns += self.device_wait_ns.get(rank, {}).get(nid, 0)
        if self.host_gaps and info.is_cpu_op:
            ns += self._host_gap_ns(rank, info)
        return ns

    def _host_gap_ns(self, rank: int, info: NodeInfo) -> int:
        """The recorded time between this host op and the end of the host ops before it."""
        start, prev = info.start_time_micros, self._host_end_us.get(rank, 0)
        self._host_end_us[rank] = max(prev, start + info.duration_micros)
        return (start - prev) * 1000 if prev and start > prev else 0

    def collective_ns(self, members: Sequence[tuple], group: tuple[int, ...], size: int) -> list[int]:
        return self._recorded_ns(members) or super().collective_ns(members, group, size)

    def eager_send_ns(self, rank: int, nid: int, info: NodeInfo, dst: int, now_ns: int = 0) -> int | None:
        if self.comm == "calibrated" and recorded_ns(info) is not None:
            return None
        ns = self._recorded_ns([(rank, nid, info)])
        return ns[0] if ns else super().eager_send_ns(rank, nid, info, dst, now_ns)

    def rendezvous_ns(self, send: tuple, recv: tuple) -> tuple[int, int]:
        ns = self._recorded_ns([send, recv], pair=True)
        return (ns[0], ns[1]) if ns else super().rendezvous_ns(send, recv)

    def _recorded_ns(self, members: Sequence[tuple], pair: bool = False) -> list[int] | None:
        """Per member, its time from the record (as `comm` says), or None: use the model. A
        send (`pair`: members are a send and its receive) completed no later than its receive:
        gloo's `isend` record stays open until the script waits for it (a pipeline waits for its
        sends at the end of the step, a quarter of a second after the data had arrived). A
        blocking send's record ends where its call returned, which its rank waited for: a sender
        descheduled on a busy machine returned 3 ms after its receive was done (a 2-stage
        pipeline captured beside other work: -6.5% with that time cut)."""
        if not self._recorded:
            return None
        ends = [self.comm_end_ns.get(m[0], {}).get(m[1]) for m in members]
        starts = [self.comm_start_ns.get(m[0], {}).get(m[1]) for m in members]
        if pair and members[0][1] not in self.blocking_sends.get(members[0][0], ()):
            ends[0] = _no_later(members[0][2], ends[0], members[1][2], ends[1])
        return self._recorded([m[2] for m in members], ends, starts)


def _no_later(send: NodeInfo, send_end: int | None, recv: NodeInfo, recv_end: int | None) -> int | None:
    """The send's completion, no later than its receive's (ns on the capture's clock; None where
    the record is kept as it is). An unknown end (`recorded.UNKNOWN_END`) stays unknown."""
    def end(info: NodeInfo, known: int | None) -> int | None:
        if known is not None:
            return known
        span = interval_ns(info)
        return span[1] if span else None

    mine, theirs = end(send, send_end), end(recv, recv_end)
    if mine is None or theirs is None or mine < 0 or theirs < 0 or mine <= theirs:
        return send_end
    return theirs
