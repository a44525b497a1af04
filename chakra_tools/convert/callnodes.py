"""A rank's communication calls as nodes: one COMM_COLL / COMM_SEND / COMM_RECV node per call
(comms.py finds it, calls.py reads it), timed by its NCCL kernels or its backend op, with what the
caller's thread recorded beside a gloo call (`call_start_us`, `call_end_us`, `launch_only`,
`worker_only`) and the worker thread it ran on (`stream`); and a communication kernel launched
outside any recognised call as a collective of its own.

`CallNodes` is a part of build.Builder (its records, links and chains), kept apart so the builder
reads as emission then dependencies.
"""

from __future__ import annotations

from chakra_tools.core.model import NodeType

from .calls import CommCall, comm_attrs_from_kineto, kernel_call
from .devcomm import is_comm_kernel, kernel_kind
from .hostet import HostOp
from .kineto import Event
from .spans import EPS_US


class CallNodes:
    """The builder's emission of communication calls (see the module docstring)."""

    def _emit_call(self, op: HostOp, call: CommCall) -> None:
        kernels = [g for m in sorted(call.members) for g in self.lk.kernels.get(m, ())]
        nccl = [g for g in kernels if is_comm_kernel(g.name)]
        ev = self._call_event(call, op)
        ts, dur = (nccl[0].ts, sum(g.dur for g in nccl)) if nccl else self._call_span(call, op, ev)
        name = _call_name(call, self.host_by_id)
        rec = self._new(name, _node_type(call), ts=ts, dur_us=dur, tid=op.tid,
                        stream=nccl[0].args.get("stream") if nccl else None)
        rec.call = call
        rec.attrs["is_cpu_op"] = False
        if rec.stream is not None:
            rec.attrs["stream"] = int(rec.stream)
        elif not nccl:
            self._worker_lane(rec, call, op, ev)
            self._caller_times(rec, call, op, ev)
        blocking = not nccl and (call.is_async is not True or self._waits_inside(call)
                                 or self._returned_after(call, op, ev))
        self._chain(rec, op.tid, blocking=blocking)
        self.op_node[op.id] = rec.id
        issue = rec.deps[0] if rec.deps else None
        other = self._emit_kernels([g for g in kernels if not is_comm_kernel(g.name)],
                                   issue if issue is not None else rec.id)
        self.kernel_nodes[op.id] = ([rec.id] if nccl else []) + other

    def _caller_times(self, rec, call: CommCall, op: HostOp, ev: Event | None) -> None:
        """What the caller's thread recorded of a gloo call beside its backend op (the node's
        span), for the replay (recorded.py): `call_start_us`, when the rank arrived, where gloo's
        worker took the call up later; `call_end_us`, when the call returned, where that was
        after the backend op began (an op of the call before it, funcol's
        `_wrap_tensor_autograd`, did not wait for it, whatever edge it has); `launch_only`, where
        the backend op is not in the window and the span is the launch's, no end known;
        `worker_only`, where the worker's `gloo:` op is all there is (a device trace alone): no
        thread of the rank was seen making the call or waiting for it."""
        if op.id in self.worker_ops:  # the worker's own record is the call's span; no caller seen
            rec.attrs["worker_only"] = True
            return
        if call.backend is None or call.backend not in self.lk.op_event:
            rec.attrs["launch_only"] = True
        called = self._dispatched_at(call)
        if called is not None and called < rec.ts - EPS_US:
            rec.attrs["call_start_us"] = int(called)
        returned = self.lk.op_event.get(op.id)
        if returned is not None and returned is not ev and returned.end > rec.ts + EPS_US:
            rec.attrs["call_end_us"] = int(returned.end)

    def _dispatched_at(self, call: CommCall) -> float | None:
        """When the caller entered the call's c10d op (`c10d::allreduce_`, `c10d::barrier`): the
        rank's arrival at the call, which gloo's worker takes up later (its backend op's start,
        the node's), after a wake-up that a loaded host stretches to milliseconds. The replay
        issues the call at its arrival (recorded.py), so that delay has to be the call's."""
        by_id, events = self.host_by_id, self.lk.op_event
        starts = [events[m].ts for m in call.members
                  if m in by_id and m in events and by_id[m].name.startswith("c10d::")]
        return min(starts) if starts else None

    def _waits_inside(self, call: CommCall) -> bool:
        """An asynchronous call whose result is waited for within the call itself (a functional
        collective whose `wait_tensor` ran inside it) blocks its thread all the same."""
        by_id = self.host_by_id
        return any(m in by_id and by_id[m].name.endswith("wait_tensor") for m in call.members)

    def _worker_lane(self, rec, call: CommCall, op: HostOp, ev: Event | None) -> None:
        """A call whose backend op ran on another thread (gloo's worker threads, two by default,
        each running one collective at a time) gets that thread as its `stream`: `--lanes
        stream` then runs it on that worker's lane, so two asynchronous collectives (DDP's
        buckets) overlap as they did, instead of queueing on one comm lane."""
        call_ev = self.lk.op_event.get(op.id)
        if ev is not None and call_ev is not None and ev is not call_ev and ev.tid != call_ev.tid \
                and type(ev.tid) is int:
            rec.attrs["stream"] = ev.tid
        elif call.backend is None and op.name.startswith("gloo:") and type(op.tid) is int:
            # a device trace alone, without the caller's c10d op: its `gloo:` op is the worker's
            # record, on the worker's thread, which is no host thread handing over (`_cross_thread`)
            self.worker_ops.add(op.id)
            rec.attrs["stream"] = op.tid

    def _returned_after(self, call: CommCall, op: HostOp, ev: Event | None) -> bool:
        """An asynchronous call that returned only once its backend op had ended (gloo queued it
        and the caller waited inside `c10d::allgather_`...) blocked its thread all the same."""
        call_ev = self.lk.op_event.get(op.id)
        return (ev is not None and call_ev is not None and ev is not call_ev
                and call_ev.end >= ev.end - EPS_US)

    def _call_span(self, call: CommCall, op: HostOp, ev: Event | None) -> tuple[float, float]:
        """(start, duration) of a call's node: its backend op's; a point-to-point call's from the
        call on. gloo hands a message to the transport (or posts a receive) inside `c10d::send`,
        before its backend op (the wait) begins, so the peer can have it long before: a sender
        that lost its core after the hand-off began `gloo:send` 4.1 ms after its receiver had
        finished `gloo:recv`."""
        if ev is None:
            return 0.0, 0.0
        call_ev = self.lk.op_event.get(op.id)
        if call.op in ("send", "recv") and call_ev is not None and call_ev.ts < ev.ts:
            return call_ev.ts, max(ev.end - call_ev.ts, 0.0)
        return ev.ts, ev.dur

    def _call_event(self, call: CommCall, op: HostOp) -> Event | None:
        """The event whose span is the call's: its backend op's, or where gloo ran the call as
        several (a reduce_scatter of a list: one all_reduce per rank, on both worker threads at
        once) from the first one's start to the last one's end: the call is done only when all
        are, and the one attached first is not always the one that ends last (a 2-rank
        reduce_scatter's two all_reduces took 1.5 and 4.8 ms in one step)."""
        events = self.lk.op_event
        if call.backend is None or call.backend not in events:
            return events.get(op.id)
        first, by_id = events[call.backend], self.host_by_id
        name = by_id[call.backend].name if call.backend in by_id else first.name
        parts = [events[m] for m in call.members if m in events and m in by_id and by_id[m].name == name]
        if len(parts) < 2:
            return first
        start, end = min(e.ts for e in parts), max(e.end for e in parts)
        return Event(first.idx, first.name, first.cat, first.tid, start, end - start, first.args)

    def _emit_kernel_call(self, op_id: int, g: Event) -> None:
        """A communication kernel launched outside any recognised call: a collective of its own,
        sized and grouped from the kernel's own metadata when Kineto recorded it (`Collective
        name`, `In msg nelems`, `dtype`, `Process Group Name`, `Process Group Ranks`), else of
        the kind its name says; a name that says none (`ncclDevKernel_Generic`) is an all-reduce,
        with a warning."""
        a = g.args
        call = kernel_call(op_id, g.name, a)
        if not kernel_kind(g.name) and not comm_attrs_from_kineto(a).get("collective_name"):
            self._warn_once("assumed-kernel-kind", g.name,
                            f"kernel {g.name!r} does not say which collective it runs and has no "
                            "metadata: read as ALL_REDUCE")
        self.calls.append(call)
        rec = self._new(call.name, _node_type(call), ts=g.ts, dur_us=g.dur,
                        stream=a.get("stream"))
        rec.call = call
        rec.attrs["is_cpu_op"] = False
        rec.deps.append(self.op_node[op_id])
        if rec.stream is not None:
            rec.attrs["stream"] = int(rec.stream)


def _call_name(call: CommCall, by_id: dict[int, HostOp]) -> str:
    """`gloo:all_reduce`, `nccl:all_to_all`...: the backend and the call's kind (an annotated
    reduce_scatter that gloo runs as an all_reduce is still named reduce_scatter)."""
    if call.backend is not None:
        return by_id[call.backend].name.split(":", 1)[0] + ":" + call.op
    return call.name


def _node_type(call: CommCall) -> NodeType:
    if call.op == "send":
        return NodeType.COMM_SEND_NODE
    if call.op == "recv":
        return NodeType.COMM_RECV_NODE
    return NodeType.COMM_COLL_NODE
