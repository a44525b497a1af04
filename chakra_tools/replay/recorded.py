"""What a capture's recorded timeline says that its nodes' durations do not.

Read once per rank file before a replay (`read_rankset`), for `--host-time timeline` (host ops
re-timed) and `--comm calibrated` (when each communication really completed).

**Host time.** A converter that writes exclusive host durations (ours) keeps every instant of a
rank's host timeline somewhere, but not where it happened: the untraced time between a parent's
children (Python between operators, the wait inside `loss.backward()` for a DDP bucket) is the
parent's exclusive time, and the parent (`ProfilerStep#3`) comes before all its children.
Replayed, that time sits at the start of the step, where it hides the waiting the rank did later
(a pipeline stage's first receive finds its data already there); and the part of a communication
call outside its backend op (the c10d wrapper, the wait's return) belongs to no node at all.
Re-timed, every instant of the recorded host timeline goes to the host op that started last
before it (a leaf op keeps its own time plus the untraced time after it, a parent only the time
before its first child), except the instants the rank was blocked in communication, which the
replay re-creates from its own schedule, and on a CPU rank the untraced time after a call was
issued or a wait ended: that goes to the next host op, since it came after them (given to the op
before, it would hold the call back, or vanish under the re-created wait). The last host op
keeps its own duration, plus, on a rank without device compute whose file carries its measured
window (core/measured.py), the tail from the end of everything traced to the window's end: a
parent's exclusive time after its last child (`aten::mul` running 8.6 ms past its last
`copy_`), Python after the last call. On a GPU rank the window may end in a kernel, which the
replay runs itself, so there it is left out.

**Completion.** When the next host op to start after a communication node depends on it (a
synchronous gloo call; an async one whose result the next op needs) and no other call was issued
in between, the rank did nothing traced from the call's start until that op, so the call
completed, for this rank, when that op started, and everything in between (the wait's return,
the wrapper) is the call's. A call issued in between shows the rank back from it (a mixture of
experts' all-to-all, then a gradient all-reduce issued, then the wait for an earlier one: taken
to the wait, the all-to-all held every rank 28 ms past its end, +4.5% on the step). Recorded ends
are not used there: a gloo call runs on a worker thread whose record_function can close
milliseconds after the caller was woken (it waits for a core), and an async call whose worker op
fell outside the captured window is recorded as its launch alone. Otherwise the call completed at
its recorded end, or earlier where a host op that depends on it started earlier.

**Blocking.** A call *blocks* its rank from its start to its completion when no host op starts in
between and the rank was not busy in another traced op when it began. The last host op to start
before the call counts as not busy when it had ended by its recorded duration, when the call was
issued after it (the call depends on it: a parent such as `ReduceFromParallel`, whose exclusive
time looks like it spans its children), or when it waits for the call. The rank then waited for
the call, in untraced code too (`work.wait()` after `async_op=True`, which the trace does not link
to the call). A call that host ops run under, or that starts inside a traced op running beside it
(`wait_tensor`, which the trace leaves without an edge from its call), blocks nothing: that op
keeps the time. But on a CPU rank the untraced time right before the first op that needs such a
call (from the end of the op before, or a later call's issue, to that op or the call's end) is
the wait for it (DDP's reducer waiting inside `finalize_backward` for an earlier bucket while the
last bucket's call runs): the replay re-creates it from that op's edge. On a rank with device
work, a call no host op waits for (an NCCL collective on its stream; no wait mark after it)
blocked nothing: the host went on, and where it then did nothing traced the trace does not say it
waited (HTA's sampled ranks of a 128-rank TorchRec job sit 42 ms a step in code the trace does not
show while an all-to-all runs; taken out as a wait that no edge re-creates, their replays came out
8% short). The untraced time after such a call's start is the next host op's, as on a CPU rank:
left with the op before, it would hold the call back. A call recorded by gloo's worker alone
(`worker_only`: a device trace without its caller's c10d op) blocked nothing either, since no
host thread was seen making it or waiting for it.

**Threads.** A rank whose host ops record several threads (`tid`) has each thread re-timed on its
own (`retiming.retimed`; its ops run on their thread's lane under `--lanes stream`): an op runs
to where its thread's next op starts, or to where another thread's op that waits for it did, and
its thread's wait for another thread's op, or for device or communication work, is re-created from
the edge. What blocks a rank (the rules above) is read off all its threads together. Starts
are whole µs, so each figure is good to about 1 µs; re-timed host time telescopes to the span.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

from chakra_tools.core.etio import TraceReader
from chakra_tools.core.measured import Measured
from chakra_tools.core.graph import find_rank_files
from chakra_tools.core.model import Node, NodeType

from .result import union
from .retiming import coverage, retimed

_COMM = frozenset((int(NodeType.COMM_COLL_NODE), int(NodeType.COMM_SEND_NODE),
                   int(NodeType.COMM_RECV_NODE)))
_COMP = int(NodeType.COMP_NODE)
_SEND = int(NodeType.COMM_SEND_NODE)
#: `comm_end_ns` of a call recorded as its launch alone (its backend op fell outside the window
#: or was lost) that no op in the window waited for: its completion is not known
UNKNOWN_END = -1


@dataclass(frozen=True)
class RankTimeline:
    """One rank's recorded timeline: host ops re-timed, communication completions."""

    host_ns: dict[int, int]  # host op id -> its re-timed duration (ns)
    comm_end_ns: dict[int, int]  # communication node id -> completion, on the capture's clock (ns)
    comm_start_ns: dict[int, int] = field(default_factory=dict)  # communication node id -> arrival (ns)
    # device node id -> the time it waited in its stream for what the trace does not show (ns)
    device_wait_ns: dict[int, int] = field(default_factory=dict)
    # sends made by a blocking call (`is_async` False): their record ends where the call returned,
    # which the rank waited for even after the receive was done (a descheduled sender)
    blocking_sends: frozenset[int] = frozenset()


def node_ns(node: Node) -> int:
    """A node's recorded duration in ns (`duration_ns` where kept, else whole µs)."""
    attr = node.attrs.get("duration_ns")
    return int(attr.value) if attr is not None else node.duration_micros * 1000


def read_timeline(nodes: Iterable[Node], window_end_ns: int | None = None,
                  host_end_ns: int | None = None) -> RankTimeline:
    """The `RankTimeline` of one rank's nodes (any order); nodes without a start are left out.

    >>> from chakra_tools.core.model import make_attrs
    >>> def n(i, t, start, us, deps=()):
    ...     return Node(i, f"n{i}", t, tuple(deps), start_time_micros=start, duration_micros=us,
    ...                 attrs=make_attrs(is_cpu_op=t == NodeType.COMP_NODE))
    >>> step = n(1, NodeType.COMP_NODE, 1000, 30)   # parent: 30 µs of untraced time, all later
    >>> a = n(2, NodeType.COMP_NODE, 1005, 10, [1])  # 1005..1015, then untraced until 1020
    >>> recv = n(3, NodeType.COMM_RECV_NODE, 1020, 40, [2])  # recorded to 1060, b starts at 1070
    >>> b = n(4, NodeType.COMP_NODE, 1070, 20, [3])
    >>> t = read_timeline([step, a, recv, b])
    >>> t.host_ns, t.comm_end_ns  # blocked 1020..1070; b, the last host op, keeps its 20 µs
    ({1: 5000, 2: 15000, 4: 20000}, {3: 1070000})
    """
    host, comms, waiters, host_blocked, on_device, marked, device_spans, queued, launched_end, unlinked, \
        blocking_sends, threads, others_end = _collect(nodes)
    starts = [h[0] for h in host]
    issued = sorted(called for _, nid, _, called in comms if nid not in unlinked)
    ends, blocked = {}, []
    arrived = {nid: start for (start, _), nid, _, _ in comms}
    for (_, end), nid, deps, start in comms:
        if end is None:  # its launch alone was recorded: done when the next op needed it, if it did
            waiter = waiters.get(nid)
            if waiter is None or _starts_inside(starts, (start, waiter)):
                ends[nid] = UNKNOWN_END
                continue
            end = waiter
        ends[nid] = done = _completion(starts, issued, start, end, waiters.get(nid))
        if nid in unlinked:
            continue
        if on_device and nid not in waiters and nid not in marked:
            continue  # a device stream's call that no host op waits for held no host thread
        if not _independent_starts_inside(host, starts, (start, done), nid) \
                and _free_for(host, starts, start, nid, deps):
            blocked.append((start, done))
        elif nid in marked:
            blocked.append(_waited_before(host, starts, issued, start, marked[nid]))
        elif nid in waiters and not on_device:  # the untraced wait before the op that needs it
            lo, hi = _waited_before(host, starts, issued, start, waiters[nid])
            blocked.append((lo, max(lo, min(hi, done))))
    # the time after a call was issued, a wait began or the device stalled the host is the next
    # op's (after a stall, on a GPU rank, the op that waits for the device work)
    split_at = sorted(issued + [lo for lo, _ in device_spans]) if on_device else \
        sorted(issued + [lo for lo, _ in blocked])
    blocked = union(blocked + device_spans)  # blocked on the device where it was: the replay's
    durations = retimed(host, blocked, split_at, threads, others_end)
    for nid, device_wait in host_blocked.items():  # ... or, without its place, in the op's time
        durations[nid] = max(0, durations[nid] - device_wait)
    if host and on_device and host_end_ns is not None:  # the host time after its last op
        last_start, last, own, _ = host[-1]
        covered = coverage(blocked)
        after = host_end_ns - last_start - (covered(host_end_ns) - covered(last_start))
        # the device work it launched waits for its end in the replay, as it ran after the launch
        # here: the host's tail overlapped it, and holding both would add that time twice (a
        # kernel queued 64 ms behind work the trace does not show, then the tail to the step's end)
        overlapped = max(0, min(launched_end.get(last, 0), host_end_ns) - (last_start + own))
        durations[last] += max(0, after - own - overlapped)
    elif host and window_end_ns is not None and not on_device:
        last_start, last, own, _ = host[-1]
        done = max([last_start + own, *ends.values()])  # UNKNOWN_END is below any time
        durations[last] += max(0, window_end_ns - done)  # the tail no node starts in (see below)
    return RankTimeline(durations, ends, arrived, queued, frozenset(blocking_sends))


def _waited_before(host: list, starts: Sequence[int], issued: Sequence[int], call_start: int,
                   until: int) -> tuple[int, int]:
    """The untraced time right before `until`, a host op that waits for a call (a wait mark,
    trace-capture --annotate-waits: `Work.wait()` returned there; or the first op that needs the
    call's result, such as DDP copying a bucket back after waiting for it inside the reducer):
    from the end of the host op before it, or the latest call issued since, or this call's start,
    whichever is latest, to `until`. The replay re-creates that wait from the call (`until`
    depends on it), so it is no host op's time."""
    i = bisect.bisect_left(starts, until) - 1
    prev_end = host[i][0] + host[i][2] if i >= 0 else call_start
    j = bisect.bisect_left(issued, until) - 1
    last_issue = issued[j] if j >= 0 else call_start
    return min(max(call_start, prev_end, last_issue), until), until


def _completion(starts: Sequence[int], issued: Sequence[int], start: int, end: int,
                waiter: int | None) -> int:
    """When a call recorded [start, end] completed for its rank: at the start of the first host
    op depending on it (`waiter`) when that is the next host op to start and no call was issued
    in between, else at its end or at that op's start, whichever is first (see the module
    docstring)."""
    if waiter is None:
        return end
    if not _starts_inside(starts, (start, waiter)) and not _starts_inside(issued, (start, waiter)):
        return waiter
    return min(end, waiter)


def read_rankset(path: str | Path) -> dict[int, RankTimeline]:
    """`read_timeline` of every rank file of a rank set (folder, prefix or file), streaming."""
    out = {}
    for rank, f in find_rank_files(path).items():
        reader = TraceReader(f)
        nodes = iter(reader)
        first = next(nodes, None)  # the GlobalMetadata is read with the first node
        measured = Measured.from_metadata(reader.metadata, str(f)) if reader.metadata else None
        out[rank] = read_timeline(chain(() if first is None else (first,), nodes),
                                  measured.window_ns[1] if measured else None,
                                  measured.host_end_ns if measured else None)
    return out


class _Collected(NamedTuple):
    """What `read_timeline` reads of one rank's nodes."""

    host: list  # host ops [(start ns, id, own ns, deps)] by start
    # communication [((arrival, end) ns, id, deps, call ns)]: the arrival is when its worker was
    # free to take the call up (the replay's start), the call when the rank made it (from then on
    # a synchronous call blocked the rank, whatever the worker was still doing)
    comms: list
    waiters: dict  # comm id -> earliest start of a host op that depends on it and starts after it
    # host op id -> the time it was blocked on the device (`blocked_ns`: already out of its
    # duration; the replay re-creates it), for ops whose file does not say where (`device_spans`)
    host_blocked: dict
    on_device: bool  # whether the rank has device compute (the window may end in a kernel)
    marked: dict  # comm id -> start of the wait mark (trace-capture --annotate-waits) after it
    device_spans: list  # (start, end) ns of device stalls where they lay (`blocked_spans_ns`)
    queued: dict  # device node id -> `queued_ns`
    launched_end: dict  # host op id -> when the last device work it launched ended (ns)
    # calls recorded by gloo's worker alone (`worker_only`): no host thread was seen making or
    # waiting for them, so none blocked one; the host keeps its recorded time around them
    unlinked: set
    blocking_sends: set  # RankTimeline.blocking_sends
    threads: dict  # host op id -> its recorded thread (`tid`), where it has one
    others_end: dict  # device and communication node id -> its recorded end (ns)


def _collect(nodes: Iterable[Node]) -> _Collected:
    host, comms, host_blocked, on_device, marks, device_spans, queued = [], [], {}, False, set(), [], {}
    launched_end: dict[int, int] = {}
    unlinked: set[int] = set()
    blocking_sends: set[int] = set()
    threads: dict[int, int] = {}
    others_end: dict[int, int] = {}
    for node in nodes:
        if node.type == _COMP and not node.is_cpu_op:
            on_device = True
            wait = node.attrs.get("queued_ns")
            if wait is not None:
                queued[node.id] = int(wait.value)
            if node.start_time_micros > 0:
                end = node.start_time_micros * 1000 + node_ns(node)
                for d in node.deps:
                    launched_end[d] = max(end, launched_end.get(d, 0))
        if node.start_time_micros <= 0:
            continue
        start = node.start_time_micros * 1000
        host_op = node.type == _COMP and node.is_cpu_op
        if not host_op:
            others_end[node.id] = start + node_ns(node)
        if host_op:
            host.append((start, node.id, node_ns(node), node.deps))
            tid = node.attrs.get("tid")
            if tid is not None:
                threads[node.id] = tid.value
            if node.attrs.get("wait_mark") is not None:
                marks.add(node.id)
            device_wait, spans = node.attrs.get("blocked_ns"), node.attrs.get("blocked_spans_ns")
            if spans is not None and len(spans.value) % 2 == 0:
                device_spans.extend(zip(spans.value[::2], spans.value[1::2]))
            elif device_wait is not None:
                host_blocked[node.id] = int(device_wait.value)
        elif node.type in _COMM and node_ns(node) > 0:
            called, returned = node.attrs.get("call_start_us"), node.attrs.get("call_end_us")
            arrival = int(called.value) * 1000 if called is not None and 0 < called.value < node.start_time_micros \
                else start
            worker = node.attrs.get("stream")
            end = None if node.attrs.get("launch_only") is not None else start + node_ns(node)
            waits_from = max(start, int(returned.value) * 1000) if returned is not None else start
            if node.attrs.get("worker_only") is not None:
                unlinked.add(node.id)
            blocking = node.attrs.get("is_async")
            if node.type == _SEND and blocking is not None and blocking.value is False:
                blocking_sends.add(node.id)
            comms.append(((arrival, end), node.id, node.deps,
                          (start, waits_from, None if worker is None else worker.value)))
    host.sort(key=lambda h: (h[0], h[1]))
    # no op waited for a call before its work began, or inside the call (before it returned)
    comm_start = {nid: waits_from for _, nid, _, (_, waits_from, _) in comms}
    comms = _arrivals(comms)
    waiters: dict[int, int] = {}
    marked: dict[int, int] = {}  # comm id -> start of the wait mark that depends on it
    for start, nid, _, deps in host:
        for d in deps:
            if d in comm_start and start >= comm_start[d]:
                waiters[d] = min(start, waiters.get(d, start))
                if nid in marks:
                    marked[d] = min(start, marked.get(d, start))
    return _Collected(host, comms, waiters, host_blocked, on_device, marked, device_spans, queued, launched_end,
                      unlinked, blocking_sends, threads, others_end)


def _arrivals(comms: list) -> list:
    """Each call from its rank's arrival: its c10d op's start (`call_start_us`, written by the
    converter where gloo's worker took the call up later), but not before the worker that ran it
    (`stream`) had finished the call before: a wait in its queue is the replay's to re-create
    (one lane per worker), a wake-up is the call's. (start, end), id, deps, call per call."""
    free: dict = {}  # worker -> end of the last call it ran
    out = []
    for (called, end), nid, deps, (start, _, worker) in sorted(comms, key=lambda c: c[3][0]):
        arrival = called
        if worker is not None:
            arrival = min(start, max(arrival, free.get(worker, arrival)))
            free[worker] = end if end is not None else arrival
        out.append(((arrival, end), nid, deps, called))
    return out


def _free_for(host: list, starts: Sequence[int], t: int, comm: int, comm_deps: Sequence[int]) -> bool:
    """Whether the rank was free for `comm` at its start `t`: the last host op to start had
    ended, or `comm` was issued after it, or it waits for `comm` (see the module docstring)."""
    i = bisect.bisect_right(starts, t) - 1
    if i < 0:
        return True
    start, nid, own, deps = host[i]
    return start + own <= t or nid in comm_deps or comm in deps


def _independent_starts_inside(host: list, starts: Sequence[int], iv: tuple[int, int], comm: int) -> bool:
    """Whether a host op that does not depend on `comm`, directly or through the ops before it
    inside `iv`, starts inside `iv`. One that does runs after it in the replay whatever its
    recorded start: funcol's `_wrap_tensor_autograd`, part of the call, ran after the rank
    arrived but before gloo's worker took the call up; so did gloo's all-gather splitting its
    output into one view per rank (`aten::chunk` reads the output, then `narrow`, `slice`,
    `as_strided`, `empty`, each after the one before)."""
    lo, hi = bisect.bisect_right(starts, iv[0]), bisect.bisect_left(starts, iv[1])
    after = {comm}
    for i in range(lo, hi):
        if after.isdisjoint(host[i][3]):
            return True
        after.add(host[i][1])
    return False


def _starts_inside(starts: Sequence[int], iv: tuple[int, int]) -> bool:
    """Whether any of the sorted instants `starts` (host ops' starts, or calls' issues) lies
    strictly inside `iv`."""
    i = bisect.bisect_right(starts, iv[0])
    return i < len(starts) and starts[i] < iv[1]
