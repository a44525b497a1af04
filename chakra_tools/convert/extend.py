"""Device work after the host trace: kept, read from the device trace alone.

A host trace (ExecutionTraceObserver) and its Kineto trace need not cover the same time: PARAM's
public resnet pair's host trace stops after 4.8 s of a 14.5 s device trace, its linear pair's
after the first 34 ms of 1 s of kernels. Work after the host trace's last op has no host op: left
out, a replay falls short of what the device trace measured by all of it (-66% and -49% there).

So the host events Kineto recorded after the host trace's last linked op become host ops of their
own, as a device-only conversion makes them (`rank.host_from_device`), numbered after the host
trace's ids, on the host thread their Kineto thread pairs with, and linked to their events: the
kernels they launched attach to them and the replay runs them in the order Kineto recorded them.
They carry what Kineto recorded of them (names, callers, times), not the host trace's inputs.
Work before the host trace's first op would need ids before its first one: it stays out, and
`link.uncovered` says so.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .hostet import HostOp, HostTrace
from .kineto import DeviceTrace, Event
from .link import UNCOVERED_SHARE, Link, attach_kernels


@dataclass
class Kept:
    """What `keep_after` added: the ops (appended to the host trace) and a sentence for the user."""

    ops: list[HostOp]
    message: str


def keep_after(host: HostTrace, dev: DeviceTrace, lk: Link) -> Kept | None:
    """Append host ops for the device trace's host events after the last linked op (where the
    device work after it is at least UNCOVERED_SHARE of all), link them to their events and
    attach the kernels again; None where there is nothing worth keeping."""
    linked = list(lk.op_event.values())
    if not linked or not dev.gpu:
        return None
    hi = max(e.end for e in linked)
    after = [e for e in dev.host if e.ts >= hi]
    total = sum(g.dur for g in dev.gpu)
    tail_us = sum(g.dur for g in dev.gpu if g.ts >= hi)
    if not after or total <= 0 or tail_us < UNCOVERED_SHARE * total:
        return None
    after = after_sorted(after)
    ops = _ops_for(after, host, lk)
    host.ops.extend(ops)
    host.__dict__.pop("_by_id", None)  # by_id_cache, if taken before
    for op, e in zip(ops, after):
        lk.op_event[op.id] = e
    lk.kernels.clear()
    lk.unlinked_kernels = 0
    attach_kernels(lk, dev)
    start = min(g.ts for g in dev.gpu)
    launched = [g for op in ops for g in lk.kernels.get(op.id, ())]
    message = (f"the host trace ends {_ms(hi - start)} into the {_ms(max(g.end for g in dev.gpu) - start)} its "
               f"device trace records: the {len(ops)} host events Kineto recorded after it ({len(launched)} "
               f"kernels, {_ms(sum(g.dur for g in launched))}) are kept from the device trace alone (their names, "
               "callers and times; no host-trace inputs)")
    return Kept(ops, message)


def _ms(us: float) -> str:
    return f"{us / 1e3:,.1f} ms" if us >= 1e3 else f"{us / 1e3:.3f} ms"


def after_sorted(events: list[Event]) -> list[Event]:
    """Callers before callees, in start order: the order host-trace ids have."""
    return sorted(events, key=lambda e: (e.ts, -e.dur, e.idx))


def _ops_for(order: list[Event], host: HostTrace, lk: Link) -> list[HostOp]:
    """A host op for each of `order` (events in `after_sorted` order), numbered in that order."""
    first = max([op.id for op in host.ops] + list(host.roots) + [host.pg_init_id or 0]) + 1
    ids = {e.idx: first + i for i, e in enumerate(order)}
    tid_of = _thread_pairs(host, lk)
    spare = max([op.tid for op in host.ops if isinstance(op.tid, int)], default=0) + 1
    root_of = _thread_roots(host)
    ops = []
    for e in order:
        if e.tid not in tid_of:
            tid_of[e.tid], spare = spare, spare + 1
        tid = tid_of[e.tid]
        parent = ids.get(e.parent)
        if parent is None:
            parent = root_of.get(tid, next(iter(host.roots), 0))
        a = e.args
        ops.append(HostOp(ids[e.idx], e.name, parent, tid, a.get("Record function id"),
                          ([], a.get("Input Dims", []) or [], a.get("Input type", []) or []), ([], [], []), {}))
    if not host.roots:
        host.roots.add(0)
    return ops


def _thread_pairs(host: HostTrace, lk: Link) -> dict:
    """Kineto thread -> the host trace's thread its linked events pair with most."""
    by_id = host.by_id_cache()
    votes: dict = {}
    for op_id, e in lk.op_event.items():
        op = by_id.get(op_id)
        if op is not None:
            votes.setdefault(e.tid, Counter())[op.tid] += 1
    return {k: c.most_common(1)[0][0] for k, c in votes.items()}


def _thread_roots(host: HostTrace) -> dict[int, int]:
    """Host thread -> the root its top-level ops hang from (the ET's thread node)."""
    votes: dict = {}
    for op in host.ops:
        if op.parent in host.roots:
            votes.setdefault(op.tid, Counter())[op.parent] += 1
    return {t: c.most_common(1)[0][0] for t, c in votes.items()}
