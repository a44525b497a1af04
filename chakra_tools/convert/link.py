"""Linking a host trace to its device trace: which Kineto event is which host op, and which
kernels each host op launched.

Host op -> host event:
  1. by `rf_id` = `Record function id` when the device trace has them (PyTorch >= 2.1);
  2. otherwise per thread, by aligning the two call sequences by op name. Both lists are in call
     order (host: ascending id; device: start time, outer before inner), so a greedy alignment
     with a bounded look-ahead matches them in linear time and skips ops only one side recorded
     (`Ev Idx`/`External id` are per-process counters that do not equal `rf_id`, so they cannot
     be compared directly; time containment is what the device side's order comes from).
Kernel -> host op: kernel `correlation` -> the runtime call of that correlation -> the innermost
host event enclosing that call on its thread -> the nearest such event (or ancestor) that is
linked to a host op.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .hostet import HostOp, HostTrace
from .kineto import DeviceTrace, Event

LOOKAHEAD = 64


@dataclass
class Link:
    op_event: dict[int, Event] = field(default_factory=dict)
    kernels: dict[int, list[Event]] = field(default_factory=dict)
    unlinked_kernels: int = 0
    method: str = "none"
    #: where both traces carry record-function ids and few of them agree: why the two are
    #: probably not of one process (None where they pair, or cannot tell)
    mismatch: str | None = None

    def matched_fraction(self, n_ops: int) -> float:
        return len(self.op_event) / n_ops if n_ops else 1.0


def link(host: HostTrace, dev: DeviceTrace) -> Link:
    """Match host ops to device events and kernels to host ops."""
    lk = Link()
    if dev.has_rf_ids:
        lk.op_event, lk.method = _by_rf_id(host.ops, dev.host), "rf_id"
        if len(lk.op_event) < 0.5 * min(len(host.ops), len(dev.host)):
            with_ids = sum(1 for op in host.ops if op.rf_id)
            if with_ids >= 0.5 * len(host.ops) and host.ops:
                lk.mismatch = _apart(host, dev, f"{len(lk.op_event)} of {with_ids} host ops find the device event of "
                                     "their record-function id under the same name (a pair of one process finds "
                                     "nearly all)")
            lk.op_event, lk.method = _by_alignment(host.ops, dev.host), "sequence"
    else:
        lk.op_event, lk.method = _by_alignment(host.ops, dev.host), "sequence"
        if host.pid is not None and dev.host_pids and host.pid not in dev.host_pids:
            lk.mismatch = _apart(host, dev, f"the host trace was written by pid {host.pid}, the device trace's "
                                 f"host events by pid {', '.join(map(str, sorted(dev.host_pids)))} (and neither "
                                 "records the ids that would pair their ops)")
    attach_kernels(lk, dev)
    return lk


def _apart(host: HostTrace, dev: DeviceTrace, why: str) -> str:
    return (f"{host.path} and {dev.path} look like traces of different processes: {why}; give each rank's "
            "own pair (--force links them by op order anyway)")


#: device time outside the host trace's span that is worth a warning (share of all device time)
UNCOVERED_SHARE = 0.05


def uncovered(lk: Link, dev: DeviceTrace) -> str | None:
    """What the device trace records outside the span of the host ops linked to it (a host trace
    started later or stopped earlier than its Kineto trace): that work has no host op, so the
    conversion leaves it out. None where it is under UNCOVERED_SHARE of the device time (on a
    CPU rank, of the host time Kineto recorded)."""
    linked = list(lk.op_event.values())
    work = dev.gpu or [e for e in dev.host if e.parent == -1]
    if not linked or not work:
        return None
    lo, hi = min(e.ts for e in linked), max(e.end for e in linked)
    total = sum(e.dur for e in work)
    # a kernel a linked op launched may run after the op: only what no linked op launched and
    # starts past the last op's end (or ends before the first op's start) is outside
    launched = {id(g) for ks in lk.kernels.values() for g in ks}
    outside = [e for e in work if (e.end <= lo or e.ts >= hi) and id(e) not in launched]
    lost = sum(e.dur for e in outside)
    if total <= 0 or lost < UNCOVERED_SHARE * total:
        return None
    span = max(e.end for e in work) - min(e.ts for e in work)
    what = "kernels" if dev.gpu else "top-level host events"
    return (f"the host trace covers {(hi - lo) / 1e3:.1f} ms of the {span / 1e3:.1f} ms its device trace records: "
            f"{len(outside)} {what} ({lost / 1e3:.1f} ms, {100 * lost / total:.0f}% of the recorded time) lie "
            "outside it and are left out; capture both traces over the same steps, or convert the device "
            "trace alone (trace-convert pytorch --device FILE) to keep all of it")


def _by_rf_id(ops: list[HostOp], events: list[Event]) -> dict[int, Event]:
    by_rf: dict[int, Event] = {}
    for e in events:
        rf = e.args.get("Record function id")
        if rf:
            by_rf[rf] = e
    out = {}
    for op in ops:
        e = by_rf.get(op.rf_id) if op.rf_id else None
        if e is not None and e.name == op.name:
            out[op.id] = e
    return out


def _by_alignment(ops: list[HostOp], events: list[Event]) -> dict[int, Event]:
    host_threads: dict[int, list[HostOp]] = defaultdict(list)
    for op in ops:
        host_threads[op.tid].append(op)
    dev_threads: dict[object, list[Event]] = defaultdict(list)
    for e in sorted(events, key=lambda e: (e.ts, -e.dur)):
        dev_threads[e.tid].append(e)
    out: dict[int, Event] = {}
    for htid, dtid in _pair_threads(host_threads, dev_threads):
        h, d = host_threads[htid], dev_threads[dtid]
        for i, j in align([op.name for op in h], [e.name for e in d]):
            out[h[i].id] = d[j]
    return out


def _pair_threads(host_threads: dict, dev_threads: dict) -> list[tuple]:
    """Pair host and device threads by how many op names they share, best pairs first."""
    hc = {t: Counter(op.name for op in v) for t, v in host_threads.items()}
    dc = {t: Counter(e.name for e in v) for t, v in dev_threads.items()}
    scores = sorted(((sum((hc[h] & dc[d]).values()), str(h), str(d), h, d)
                     for h in hc for d in dc), reverse=True)
    used_h, used_d, pairs = set(), set(), []
    for score, _, _, h, d in scores:
        if score and h not in used_h and d not in used_d:
            used_h.add(h)
            used_d.add(d)
            pairs.append((h, d))
    return pairs


def align(a: list[str], b: list[str], lookahead: int = LOOKAHEAD) -> list[tuple[int, int]]:
    """Greedy alignment of two name sequences: pairs (i, j) with a[i] == b[j], both increasing.

    >>> align(["x", "mm", "add", "relu"], ["mm", "prof", "add", "relu"])
    [(1, 0), (2, 2), (3, 3)]
    """
    pairs = []
    i = j = 0
    na, nb = len(a), len(b)
    while i < na and j < nb:
        if a[i] == b[j]:
            pairs.append((i, j))
            i += 1
            j += 1
            continue
        skip_b = _find(b, a[i], j + 1, lookahead)
        skip_a = _find(a, b[j], i + 1, lookahead)
        if skip_b is None and skip_a is None:
            i += 1
            j += 1
        elif skip_a is None or (skip_b is not None and skip_b - j <= skip_a - i):
            j = skip_b
        else:
            i = skip_a
    return pairs


def _find(seq: list[str], name: str, start: int, lookahead: int) -> int | None:
    for k in range(start, min(start + lookahead, len(seq))):
        if seq[k] == name:
            return k
    return None


def attach_kernels(lk: Link, dev: DeviceTrace) -> None:
    """kernels[op id] = device events it launched, in start-time order."""
    event_op = {e.idx: op_id for op_id, e in lk.op_event.items()}
    by_corr = {}
    for r in dev.runtime:
        c = r.args.get("correlation")
        if c is not None:
            by_corr[c] = r.idx
    host = dev.host
    for g in sorted(dev.gpu, key=lambda g: g.ts):
        r = by_corr.get(g.args.get("correlation"))
        h = dev.runtime_parent.get(r, -1) if r is not None else -1
        while h >= 0 and h not in event_op:
            h = host[h].parent
        if h < 0:
            lk.unlinked_kernels += 1
            continue
        lk.kernels.setdefault(event_op[h], []).append(g)


def runtime_calls_by_op(lk: Link, dev: DeviceTrace) -> dict[int, list[Event]]:
    """Runtime calls (e.g. cudaStreamSynchronize) grouped by the linked host op enclosing them."""
    event_op = {e.idx: op_id for op_id, e in lk.op_event.items()}
    out: dict[int, list[Event]] = defaultdict(list)
    host = dev.host
    for r_idx, h in dev.runtime_parent.items():
        while h >= 0 and h not in event_op:
            h = host[h].parent
        if h >= 0:
            out[event_op[h]].append(dev.runtime[r_idx])
    return out
