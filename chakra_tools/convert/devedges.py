"""The edges between a rank's host threads and its device streams that the device trace shows:
a host op held until device work finished (a synchronisation, a blocking copy, a launch into a
full queue), a stream made to wait for another stream's event, and device work that waited for
something the trace does not show.

`DeviceEdges` is a part of build.Builder (its records, links and device trace), kept apart so the
builder reads as emission then dependencies.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from chakra_tools.core.model import NodeType

from .kineto import Event
from .link import runtime_calls_by_op
from .spans import EPS_US, first_from, last_before

_COMP = NodeType.COMP_NODE
#: (prefixes) runtime and driver calls that may hold their thread until device work ends; a free
#: synchronises the device first (the caching allocator's `empty_cache`, an allocation retried)
BLOCKING_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                  "cudaMemcpy", "cudaMemset", "cudaFree", "cuCtxSynchronize", "cuStreamSynchronize",
                  "cuEventSynchronize", "cuMemcpy", "cuMemFree", "hipDeviceSynchronize",
                  "hipStreamSynchronize", "hipEventSynchronize", "hipMemcpy", "hipMemset", "hipFree")
#: (prefixes) calls that enqueue device work: they wait only when the launch queue is full
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "hipLaunchKernel", "hipExtModuleLaunchKernel",
                "cudaLaunchCooperativeKernel", "cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")
#: a launch this much longer than the rank's median launch found the launch queue full
STALL_FACTOR, STALL_MIN_US = 10.0, 50.0
#: a synchronous copy (pageable memory) can be recorded ending after the call that made it
#: returned: the device's clock against the host's (31 us in PARAM's resnet trace, 25 ms copies)
COPY_SKEW_US = 100.0
#: a call that waited for device work returns this soon after the work ends; one that returned
#: later was busy on the host (lazy module loading, cudaFree's driver work) and keeps its time
RETURN_US = 50.0
#: device work that started this much later than its launch, its stream and its dependencies
#: allow waited (`DeviceEdges._device_queueing`): for something the trace does not show, or
#: for the device itself, which starts a queued kernel 1-3 us after the one before it ends
#: (H100, V100: 1,200 kernels of a Qwen1.5 step, 1.6 ms); below it, clock rounding
QUEUED_US = 0.5


class DeviceEdges:
    """The builder's device passes (see the module docstring); they run after the host and
    device nodes are emitted and the streams ordered (`streams`)."""

    def _blocking_edges(self) -> None:
        """Where a runtime call held its host thread until device work finished, take that time
        out of the host op's own duration (`blocked_ns`, and where it lay: `blocked_spans_ns`)
        and make the thread's next host op wait for that device work instead, so the replay
        re-creates the stall from its own schedule.

        A call blocked when device work ended while it ran: a synchronisation
        (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize), a copy that waits
        for its stream (cudaMemcpy, cudaMemcpyAsync from pageable memory or to the host: what
        `.item()`, `.cpu()` do), or a kernel launch that found the launch queue full (it lasted
        far longer than the rank's usual launch), and it returned as that work ended (within
        `RETURN_US`). The blocked time runs from the call's start to the end of that work.
        """
        if self.dev is None or not self.streams:
            return
        # pending when a call began: launched before it (a kernel may start long after its launch)
        device = sorted((r.ts + r.dur_us, r.id, self.launched_at.get(r.id, r.ts), r.call is not None,
                         "Pageable" in r.name)
                        for r in self.recs if r.stream is not None)
        device_ends = [d[0] for d in device]
        host_by_tid: dict = defaultdict(list)
        for r in self.recs:
            if r.stream is None and r.type == _COMP and r.attrs.get("is_cpu_op"):
                host_by_tid[r.tid].append((r.ts, r.id))
        for items in host_by_tid.values():
            items.sort()
        stall_us = _launch_stall_us(self.dev.runtime)
        tails: dict = {}  # thread -> its host tail node (see `_host_tail`)
        for call, op_id in sorted(((c, op_id) for op_id, calls in runtime_calls_by_op(self.lk, self.dev).items()
                                   for c in calls if _may_block(c, stall_us)), key=lambda co: co[0].ts):
            node = self.op_node.get(op_id)
            rec = self.recs[node - 1] if node is not None else None
            if rec is None or rec.stream is not None or not rec.attrs.get("is_cpu_op"):
                continue
            waited = _waited_for(device, device_ends, call)
            if waited is None:
                continue  # it did not return as pending device work ended: busy on the host
            end, waited_id = waited[:2]
            blocked = min(end, call.end) - call.ts
            waiter = first_from(host_by_tid.get(rec.tid, ()), call.end - EPS_US)
            if waiter is None and self.op_event.get(op_id) is not None:  # nothing on the thread after it
                tail = tails.get(rec.tid)
                if tail is None:
                    tail = tails[rec.tid] = self._host_tail(rec, call, self.op_event[op_id].end)
                rec = tail
            rec.dur_us = max(rec.dur_us - blocked, 0.0)
            rec.attrs["blocked_ns"] = rec.attrs.get("blocked_ns", 0) + int(round(blocked * 1000))
            # where it was: a parent's stall may lie after its last child (the re-timing's)
            rec.attrs.setdefault("blocked_spans_ns", []).extend(
                (int(round(call.ts * 1000)), int(round((call.ts + blocked) * 1000))))
            if waiter is not None and waiter != node:
                self.recs[waiter - 1].deps.append(waited_id)
            elif waiter is None:
                rec.deps.append(waited_id)

    def _host_tail(self, rec, call: Event, op_end: float):
        """The host time from a blocking call that no host op on its thread follows to the end
        of the op it ran in (`torch.cuda.synchronize()` at a step's end, then Python until
        `ProfilerStep#N` closed): a host node of its own, after the thread's last node and the
        device work the call waited for, since no next op can carry that wait. Its op keeps the
        time before the call."""
        moved = max(0.0, min(op_end - call.ts, rec.dur_us))
        rec.dur_us -= moved
        tail = self._new(call.name, _COMP, ts=call.ts, dur_us=moved, tid=rec.tid)
        tail.attrs["is_cpu_op"] = True
        if type(rec.tid) is int:
            tail.attrs["tid"] = rec.tid
        tail.deps.append(self.chain.get(rec.tid, rec.id))
        self.chain[rec.tid] = tail.id
        return tail

    def _event_wait_edges(self) -> None:
        """A stream made to wait for another stream's event (`cudaEventRecord` on one,
        `cudaStreamWaitEvent` on the other: NCCL's streams and DDP's, side streams): the first
        work launched on the waiting stream after the wait depends on the last work launched on
        the other before the record. Only CUPTI's `Stream Wait Event` records (Kineto, PyTorch
        2.4 and later) say which streams; older traces leave it to `_device_queueing`."""
        if self.dev is None or not self.dev.syncs:
            return
        launched: dict = defaultdict(list)  # stream -> (launch time, node) in launch order
        for r in self.recs:
            if r.stream is not None:
                launched[r.stream].append((self.launched_at.get(r.id, r.ts), r.id))
        for items in launched.values():
            items.sort()
        for sync in self.dev.syncs:
            a = sync.args
            if a.get("cuda_sync_kind", sync.name) != "Stream Wait Event":
                continue
            recorded = self._call_ts(a.get("wait_on_cuda_event_record_corr_id"))
            waited = self._call_ts(a.get("correlation"))
            if recorded is None or waited is None:
                continue
            source = last_before(launched.get(a.get("wait_on_stream"), []), recorded)
            target = first_from(launched.get(a.get("stream"), []), waited)
            if source is None or target is None or source == target:
                continue
            src, tgt = self.recs[source - 1], self.recs[target - 1]
            if tgt.ts >= src.ts and source not in tgt.deps:  # as recorded: it began after
                tgt.deps.append(source)

    def _device_queueing(self) -> None:
        """Device work that started later than anything in the trace allows (its launch, the
        work before it on its stream, the nodes it depends on) waited: for something the trace
        does not show (kernels of a CUDA graph, another stream's event, a peer), or for the
        device's own pace between kernels. That wait is kept as `queued_ns` (over `QUEUED_US`),
        which a replay of the recorded timeline re-creates before the node; the model leaves
        it out."""
        recs = self.recs
        for items in self.streams.values():
            prev_end = None
            for ts, nid in items:
                rec = recs[nid - 1]
                launch = self.launched_at.get(nid)
                if launch is not None and rec.type == _COMP:
                    ready = max([launch, *(recs[d - 1].ts + recs[d - 1].dur_us for d in rec.deps
                                           if recs[d - 1].ts > 0)])
                    if prev_end is not None:
                        ready = max(ready, prev_end)
                    if ts - ready > QUEUED_US:
                        rec.attrs["queued_ns"] = int(round((ts - ready) * 1000))
                prev_end = ts + rec.dur_us if prev_end is None else max(prev_end, ts + rec.dur_us)


def _launch_stall_us(runtime: list[Event]) -> float:
    """How long a kernel launch must last to have waited for a free slot in the launch queue."""
    durations = sorted(r.dur for r in runtime if r.name.startswith(LAUNCH_CALLS))
    if not durations:
        return float("inf")
    return max(STALL_FACTOR * durations[len(durations) // 2], STALL_MIN_US)


def _may_block(call: Event, stall_us: float) -> bool:
    name = call.name
    return name.startswith(BLOCKING_CALLS) or (name.startswith(LAUNCH_CALLS) and call.dur >= stall_us)


def _waited_for(device: list[tuple[float, int, float, bool, bool]], ends: list[float], call: Event):
    """The device work (end, node, start, is a collective, is a pageable copy) a blocking call
    waited for, None if none: the last to end within `RETURN_US` before the call returned that was pending when the
    call began; a copy or set also waits for the copy it issued itself (a pageable one, which
    Kineto names so, recorded ending up to `COPY_SKEW_US` after the call returned), but never for
    another stream's collective (a copy queues on its own stream, not behind NCCL's)."""
    is_copy = "Memcpy" in call.name or "Memset" in call.name
    i = bisect.bisect_right(ends, call.end + (COPY_SKEW_US if is_copy else EPS_US)) - 1
    while i >= 0 and ends[i] > max(call.ts, call.end - RETURN_US):
        own = is_copy and device[i][4] and device[i][2] == call.ts  # the pageable copy this call made
        if own or (ends[i] <= call.end + EPS_US and not (is_copy and device[i][3])
                   and (is_copy or device[i][2] < call.ts)):
            return device[i]
        i -= 1
    return None
