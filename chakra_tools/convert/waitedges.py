"""The edges from a rank's communication calls to what waits for them, and the waits the host
spent in untraced code: a wait op after the call it waits for (by sequence number, by tensor,
trace-capture's marks), the first op that reads a call's output, an asynchronous call waited for
where the thread started nothing traced until it completed, and the time that wait took out of
the host ops enclosing it (`collective_wait_ns`), since the replay re-creates it from those edges.

`WaitEdges` is a part of build.Builder (its records, calls and links), kept apart so the builder
reads as emission then dependencies.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from chakra_tools.core.annotations import parse_wait
from chakra_tools.core.model import NodeType

from .calls import WaitMark
from .kineto import Event
from .readers import waited_calls
from .spans import EPS_US, covered, first_from

_COMP = NodeType.COMP_NODE


class WaitEdges:
    """The builder's wait passes (see the module docstring); they run after every node is
    emitted and the threads and streams are ordered."""

    def _wait_edges(self, waits: list[WaitMark]) -> None:
        """A wait after the collective it waits for: by sequence number (`record_param_comms`
        'wait'; a trace-capture wait annotation, by group and sequence), else by the tensor it
        waits on (`wait_tensor`, readers.waited_calls)."""
        by_seq, by_root = {}, {}
        for r in self.recs:
            if r.call is not None:
                by_root.setdefault(r.call.root, r.id)
                if r.call.seq is not None:
                    by_seq[r.call.seq] = by_seq[(r.call.pg, r.call.seq)] = r.id
        by_tensor = waited_calls(self.host, self.calls, waits)
        for w in waits:
            if w.seq is not None:  # an annotated wait names its group: sequences are per group
                comm = by_seq.get(w.seq if w.pg is None else (w.pg, w.seq))
            else:
                comm = by_root.get(by_tensor.get(w.op_id))
            node = self.op_node.get(w.op_id)
            if comm is None or node is None or node == comm:
                continue
            if self.recs[comm - 1].stream is not None:
                self._stream_wait(comm, node)
            else:
                self.recs[node - 1].deps.append(comm)
                if w.pg is not None:  # a trace-capture mark: the wait just before it was untraced
                    self.recs[node - 1].attrs["wait_mark"] = True

    def _untraced_wait_edges(self) -> None:
        """An asynchronous call (`async_op=True`, isend/irecv) whose thread started no traced op
        from the call's return until the call had completed was waited for in untraced code
        (`work.wait()`, `req.wait()`): the thread's next host op then depends on the call, so the
        replay re-creates that wait instead of dropping it. A gloo worker that closes its range
        after the caller went on makes no edge (the recorded end is no completion there)."""
        host: dict = defaultdict(list)
        for r in self.recs:
            if r.stream is None and r.type == _COMP and r.attrs.get("is_cpu_op") and r.ts:
                host[r.tid].append((r.ts, r.id))
        for items in host.values():
            items.sort()
        for r in self.recs:
            call = r.call
            if call is None or r.stream is not None or call.is_async is not True or not r.dur_us:
                continue
            returned = self.lk.op_event.get(call.root)
            end = r.ts + r.dur_us
            if returned is None or returned.end >= end or self._waits_inside(call):
                continue
            nxt = first_from(host.get(r.tid, ()), returned.end - EPS_US)
            if nxt is not None and self.recs[nxt - 1].ts >= end - EPS_US:
                self.recs[nxt - 1].deps.append(r.id)

    def _untraced_collective_waits(self) -> None:
        """Take out of the host ops the time their thread waited for an asynchronous gloo call
        in untraced code, and keep it as `collective_wait_ns`: DDP's reducer waits for a
        bucket's all-reduce inside backward's C++, long after the call returned, and that wait
        lies in the exclusive time of whatever op encloses it (`ProfilerStep#N`). The replay
        re-creates it from the edge to the first op that needs the call, and the network model
        (as ASTRA-sim) charges the call itself: left in, it is paid twice (a 2-rank gloo DDP
        capture replayed +27% to +31% off on a network fitted to it).

        The wait is the thread's untraced stretch right before that op, where the call was in
        flight during it: from the end of the last host event of the op's thread in the device
        trace before it (the call's arrival at the earliest; gloo's worker records the call on
        its own thread) to the op's start, as `--comm calibrated` and the fitted
        network time the call up to there (gloo's worker may close its range after the caller
        went on). It leaves the ops that enclose it in time, innermost first, each the part
        after its own start (`_charge_wait`)."""
        if self.dev is None:
            return
        events, node_op = self.lk.op_event, {rid: oid for oid, rid in self.op_node.items()}
        op_of = {ev.idx: oid for oid, ev in events.items()}
        ends: dict = defaultdict(list)  # device-trace thread -> sorted ends of its host events
        for ev in self.dev.host:
            ends[ev.tid].append(ev.end)
        for v in ends.values():
            v.sort()
        done = self._marked_waits(events, node_op, op_of, ends)
        calls = [r for r in self.recs if r.call is not None and r.stream is None and r.call.is_async is True
                 and r.dur_us > 0 and r.ts and "launch_only" not in r.attrs and not self._waits_inside(r.call)]
        first_need: dict = {}  # call node -> the first host op on its thread that needs it
        wanted = {r.id: r.tid for r in calls}
        for q in self.recs:
            if q.type == _COMP and q.stream is None and q.ts and q.attrs.get("is_cpu_op"):
                for d in q.deps:
                    if wanted.get(d) == q.tid and (d not in first_need or q.ts < first_need[d].ts):
                        first_need[d] = q
        for r in calls:
            waiter = first_need.get(r.id)
            ev = events.get(node_op.get(waiter.id)) if waiter is not None else None
            if ev is None or waiter.id in done or waiter.ts <= r.ts:
                continue
            thread = ends[ev.tid]
            i = bisect.bisect_right(thread, ev.ts) - 1
            since = max(thread[i] if i >= 0 else r.ts, r.attrs.get("call_start_us", r.ts))
            if since >= r.ts + r.dur_us:
                continue  # the thread was busy until the call had ended: it did not wait for it
            done.add(waiter.id)
            self._charge_wait(ev, op_of, since, ev.ts)

    def _marked_waits(self, events, node_op, op_of, ends) -> set[int]:
        """The waits trace-capture marked (`wait_mark`: the instant `Work.wait()` returned).
        Where the mark says how long the wait took (`waited_us`), its untraced part is that
        span less the ops the thread ran inside it (gloo copies a reduce-scatter's result on
        the waiting thread); an older mark's wait is the thread's untraced stretch right before
        it, from its last host event's end (or the call's launch, if later). The call's own
        record is no guide here: gloo runs a group's calls on two worker threads, whose ranges
        may be matched to the calls out of order, and a call whose record the profiler cut off
        has none (a data-parallel capture kept 30-60% of each step's wait as compute without
        this). Returns the marks charged."""
        done: set[int] = set()
        marks = [w for w in self.recs if w.attrs.get("wait_mark")]
        spans: dict = defaultdict(list)  # device-trace thread -> its host events' (start, end), by start
        if marks:
            for e in self.dev.host:
                spans[e.tid].append((e.ts, e.end))
            for v in spans.values():
                v.sort()
        for w in marks:
            ev = events.get(node_op.get(w.id))
            if ev is None:
                continue
            waited = (parse_wait(w.name) or {}).get("waited_us")
            if isinstance(waited, int) and waited > 0:
                since = ev.ts - waited
                thread = spans[ev.tid]
                lo, hi = bisect.bisect_left(thread, (since,)), bisect.bisect_left(thread, (ev.ts,))
                inside = covered(thread[lo:hi], since)
                since = ev.ts - max(0.0, waited - inside)
            else:
                thread = ends[ev.tid]
                i = bisect.bisect_right(thread, ev.ts) - 1
                launched = [self.recs[d - 1].attrs.get("call_start_us", self.recs[d - 1].ts) for d in w.deps
                            if self.recs[d - 1].call is not None and self.recs[d - 1].ts]
                since = max([thread[i] if i >= 0 else ev.ts, *launched])
            if ev.ts > since:
                done.add(w.id)
                self._charge_wait(ev, op_of, since, ev.ts)
        return done

    def _charge_wait(self, ev: Event | None, op_of: dict[int, int], since: float, until: float) -> None:
        """Take [since, until] out of the host events enclosing event `ev` on its thread,
        innermost first: the device trace's nesting (`hotloops.nest`), from which their
        exclusive times were computed. (The host trace's parent links do not hold there: gloo's
        record, left open on the caller's thread, makes the next step's ops children of the
        last one.) `op_of`: host event index -> its op."""
        host, hi = self.dev.host, until
        while ev is not None and ev.parent >= 0 and hi > since:
            ev = host[ev.parent]
            lo = max(since, ev.ts)
            rid = self.op_node.get(op_of.get(ev.idx, -1))
            rec = self.recs[rid - 1] if rid is not None else None
            if rec is not None and rec.type == _COMP and rec.attrs.get("is_cpu_op") and hi > lo:
                waited = min(hi - lo, rec.dur_us)
                rec.dur_us -= waited
                rec.attrs["collective_wait_ns"] = rec.attrs.get("collective_wait_ns", 0) + int(round(waited * 1000))
            hi = lo

    def _stream_wait(self, comm: int, wait_node: int) -> None:
        """The first device work launched after node `wait_node` waits for `comm`.

        `work.wait()` on a collective that runs on a device stream (NCCL) does not block the
        host: it makes the current stream wait for the collective's (cudaStreamWaitEvent). The
        current stream is the one the next kernel launched after the wait runs on, so that kernel
        depends on the collective, and its stream's later work follows by stream order."""
        own = self.recs[comm - 1].stream
        launched = self._gpu_in_launch_order()
        i = bisect.bisect_right(launched, (wait_node, -1))
        for nid, stream in launched[i:]:
            if stream != own:
                self.recs[nid - 1].deps.append(comm)
                return

    def _gpu_in_launch_order(self) -> list[tuple[int, object]]:
        """(node id, stream) of every device node, by id: nodes are made in launch order."""
        if self._launched is None:
            self._launched = [(r.id, r.stream) for r in self.recs
                              if r.stream is not None and r.type == _COMP]
        return self._launched

    def _consumer_edges(self) -> None:
        for r in self.recs:
            if r.call is not None and r.call.root in self.consumers:
                self._consume(r.id, self.consumers[r.call.root])

    def _consume(self, comm: int, op_id: int) -> None:
        if self.recs[comm - 1].stream is not None:  # device data: only device work reads it
            node = self.op_node.get(op_id)
            if node is not None:
                self._stream_wait(comm, node - 1)
            return
        kernels = self.kernel_nodes.get(op_id)
        target = kernels[0] if kernels else self.op_node.get(op_id)
        if target is not None and target != comm:
            self.recs[target - 1].deps.append(comm)
