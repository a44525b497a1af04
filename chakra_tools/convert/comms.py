"""Finding communication in a host trace: which ops make up each call (calls.py reads what the
call did from them), and which ops wait for one.

An op nested inside a recognised call belongs to that call. The backend op (`gloo:*`, `nccl:*`)
of a call is found nested in it or, for gloo collectives that run on a worker thread, as the next
unclaimed backend op of the same kind; its device event gives the call's duration.
"""

from __future__ import annotations

from __future__ import annotations

from chakra_tools.core.annotations import PREFIX as ANNOTATION_PREFIX

from .calls import CommCall, WaitMark, attach_backend, is_backend_op, merge_record, op_kind, recognise, recorded_call
from .devcomm import LIBRARY_PREFIXES
from .hostet import HostOp

COMM_PREFIXES = ("c10d::", "record_param_comms", "nccl:", "gloo:", "_c10d_functional::",
                 "c10d_functional::") + LIBRARY_PREFIXES


def find_calls(ops: list[HostOp]) -> tuple[list[CommCall], list[WaitMark]]:
    """All communication calls and wait marks of a host op list (in call order).

    A call owns the communication ops nested in it and everything below those; other ops that
    happen to run inside an annotation's range (a tensor allocated between an isend and its
    irecv) stay ordinary ops, and an annotation nested in another one is a call of its own.
    """
    calls: list[CommCall] = []
    waits: list[WaitMark] = []
    owner: dict[int, CommCall] = {}
    maybe: dict[str, bool] = {}  # per distinct name: could it start a call?
    gloo_ops: set[int] = set()
    for op in ops:
        parent_call = owner.get(op.parent) if owner else None
        if parent_call is not None and _belongs(op, parent_call, gloo_ops):
            _add_member(parent_call, op)
            owner[op.id] = parent_call
            if op.name.startswith("gloo:"):
                gloo_ops.add(op.id)
            continue
        m = maybe.get(op.name)
        if m is None:
            m = maybe[op.name] = _may_be_comm(op.name)
        if not m:
            continue
        call, wait = recognise(op)
        if wait is not None:
            waits.append(wait)
            continue
        if call is None:
            continue
        if op.name.startswith("gloo:"):
            gloo_ops.add(op.id)
        caller = _caller(calls, call) if call.source == "c10d" else None
        if caller is not None:
            _add_member(caller, op)
            owner[op.id] = caller
            continue
        if call.source == "backend":
            claimer = _claimer(calls, op)
            if claimer is not None:
                _add_member(claimer, op)
                owner[op.id] = claimer
                continue
        call.members.add(op.id)
        owner[op.id] = call
        calls.append(call)
    return calls, waits


def absorb_worker_ops(calls: list[CommCall], ops: list[HostOp], op_event: dict, events: list) -> int:
    """Make the ops that ran inside a call's backend op on another thread members of the call;
    returns how many. `op_event` maps host op ids to their device-trace events (link.py),
    `events` are the device trace's host events (each `parent` an index into them).

    gloo runs a collective on a worker thread, and what it does there besides communicating
    (copying an all_gather's result into the output list, dividing the all_reduce it implements
    a reduce_scatter with) is recorded as ordinary aten ops of that thread, whose host-trace
    parent links point anywhere. Kept as host ops, they are replayed as the rank's own work,
    inside the time the rank was blocked in the call. The device trace nests them in the
    backend op's event, on the worker's thread (the caller's thread is left alone: there an
    asynchronous call's event can outlast the call)."""
    backend: dict[int, CommCall] = {}
    for call in calls:
        ev = op_event.get(call.backend) if call.backend is not None else None
        root = op_event.get(call.root)
        if ev is not None and (root is None or root.tid != ev.tid):
            backend[ev.idx] = call
    if not backend:
        return 0
    members = {m for c in calls for m in c.members}
    added = 0
    for op in ops:
        ev = op_event.get(op.id) if op.id not in members else None
        while ev is not None and ev.parent >= 0:
            ev = events[ev.parent]
            call = backend.get(ev.idx)
            if call is not None:
                call.members.add(op.id)
                added += 1
                break
    return added


def _may_be_comm(name: str) -> bool:
    return (name.startswith(COMM_PREFIXES) or name.startswith(ANNOTATION_PREFIX)
            or name.endswith("::wait_tensor"))


def _belongs(op: HostOp, call: CommCall, gloo_ops: set[int]) -> bool:
    """Whether an op nested in a call's range is part of the call.

    Not what the host trace nests in a gloo backend op (`gloo:all_reduce`...): gloo opens that
    record on the caller's thread when it queues the work and closes it when the worker thread
    is done, so the caller's own ops meanwhile (DDP copying reduced buckets into the gradients,
    the optimizer step) get it as their parent; the work itself is recorded on the worker's
    thread (`absorb_worker_ops`)."""
    if op.name.startswith(ANNOTATION_PREFIX) or op.parent in gloo_ops:
        return False
    if op.name.startswith(("gloo:", "nccl:")) and not _may_run(call, op_kind(op.name)):
        return False  # another call's backend op, nested here by gloo's drifting parent links
    if call.source != "annotation" or op.parent != call.root:
        return True
    if call.c10d_collectives and _is_c10d_collective(op.name):
        return False  # a second collective under one annotation: another call (gloo's parent links)
    return op.name.startswith(COMM_PREFIXES)


#: kinds gloo runs only as themselves: a backend op of another kind is never theirs
_OWN_BACKEND = ("all_reduce", "all_gather", "broadcast", "all_to_all", "send", "recv")


def _may_run(call: CommCall, kind: str | None) -> bool:
    """Whether a backend op of `kind` can be this call's: it has none yet, and the op is of its
    kind or of one gloo implements it with (a reduce-scatter as all-reduces). Under an FSDP
    backward's drifting parent links, an asynchronous reduce-scatter's `gloo:all_reduce` and six
    all-reduces of a DDP backward nested in the first call that was open, which then had seven
    backend ops and the others none."""
    if call.backend is not None:
        return False
    return kind == call.op or call.op not in _OWN_BACKEND


def _is_c10d_collective(name: str) -> bool:
    return name.startswith("c10d::") and op_kind(name) not in (None, "send", "recv")


def _add_member(call: CommCall, op: HostOp) -> None:
    call.members.add(op.id)
    if _is_c10d_collective(op.name):
        call.c10d_collectives += 1
    if call.backend is None and is_backend_op(op.name):
        attach_backend(call, op)
    elif op.name == "record_param_comms" and call.source != "annotation":
        merge_record(call, op)


def _caller(calls: list[CommCall], call: CommCall) -> CommCall | None:
    """The annotated call a c10d op recorded outside it belongs to: the latest call, when it is
    an annotation of the same op with nothing in it yet (gloo's asynchronous work leaves the host
    trace's parent links pointing elsewhere, so the op can appear beside its annotation)."""
    last = calls[-1] if calls else None
    if last is not None and last.source == "annotation" and last.op == call.op \
            and last.members == {last.root}:
        return last
    return None


def _claimer(calls: list[CommCall], op: HostOp) -> CommCall | None:
    """The call a free-standing backend op belongs to: gloo runs collectives on worker threads
    (or inside a later `wait_tensor`), so the op is recorded outside its call. The earliest
    earlier call of its kind without a backend op (gloo's work queue is first in, first out: six
    asynchronous all-reduces queued by a backward pass run in the order they were called; the
    latest, as this took before, gave the first one's record to the last call and the replay
    of the capture came out +23..59% off), else (gloo implements some kinds with others, e.g. a
    functional reduce_scatter as all_reduce) the latest annotated call without one."""
    kind = op_kind(op.name)
    recent = calls[-16:]
    for call in recent:
        if call.op == kind and call.backend is None and call.source != "backend":
            return call
    for call in recent:
        if call.source == "annotation" and call.op != "barrier" and _may_run(call, kind):
            return call
    latest = next((c for c in reversed(recent) if c.source != "backend"), None)
    if latest is not None and latest.op != kind and latest.backend_kind == kind:
        return latest  # gloo reduce_scatters a list with one all_reduce per rank
    return None


def fill_from_device(calls: list[CommCall], by_id: dict[int, HostOp], op_event: dict) -> int:
    """What the device trace knows of each call and the host trace did not (older host schemas
    record no group, a schema 1.0.1 trace only a group object): its `record_param_comms` event's
    metadata (`Process Group Name`, `Process Group Ranks`, `Group size`, sizes) fills the call's
    missing fields, never overrides them. Returns how many calls gained something."""
    filled = 0
    for call in calls:
        for m in sorted(call.members):
            op, ev = by_id.get(m), op_event.get(m)
            if op is None or ev is None or op.name != "record_param_comms":
                continue
            inner = recorded_call(m, ev.args) if isinstance(ev.args, dict) else None
            if inner is not None and inner.op == call.op and _fill_missing(call, inner):
                filled += 1
            break
    return filled


def _fill_missing(call: CommCall, inner: CommCall) -> bool:
    changed = False
    for name in ("pg", "pg_desc", "pg_ranks", "group_size", "in_split", "out_split"):
        if getattr(call, name) in (None, "", ()) and getattr(inner, name) not in (None, "", ()):
            setattr(call, name, getattr(inner, name))
            changed = True
    if not (call.in_bytes or call.out_bytes) and (inner.in_bytes or inner.out_bytes):
        call.in_bytes, call.out_bytes, call.dtype = inner.in_bytes, inner.out_bytes, call.dtype or inner.dtype
        changed = True
    return changed
