"""Which later op consumes what a collective wrote (the "collective -> consumer" dependency).

A call writes its output buffers (the c10d op's output argument; `record_param_comms` outputs).
Its consumer is the first later host op, not part of any call, that takes one of those tensors
(same tensor id and storage id) as input. Host traces read on the fast path keep most inputs
undecoded, so there the tensor is looked up as text (`[tensor_id,storage_id,`) in the inputs
lines that follow the call in the file; ops end, and are written, after every op that started
before them, so a consumer is never earlier in the file than the call.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from .comms import _C10D_ARGS, CommCall, op_kind
from .hostet import HostOp, HostTrace
from .tensors import iter_tensors

#: occurrences of a tensor examined per call on the text path (weights recur every step)
MAX_HITS = 16
#: how far after a call (bytes of host trace, ~2k ops) its consumer is looked for as text
WINDOW = 2 << 20


def first_readers(host: HostTrace, calls: list[CommCall]) -> dict[int, int]:
    """call root id -> id of the op that first reads what the call wrote."""
    if not calls:
        return {}
    by_id = host.by_id
    members = {m for c in calls for m in c.members}
    written = {c.root: written_tensors(c, by_id) for c in calls}
    if host.raw is not None:
        return _by_text(host, calls, written, members)
    return _by_values(host, calls, written, members)


def written_tensors(call: CommCall, by_id: dict[int, HostOp]) -> set[tuple[int, int]]:
    """(tensor id, storage id) of the buffers a call writes."""
    keys: set[tuple[int, int]] = set()
    for m in call.members:
        op = by_id.get(m)
        if op is None:
            continue
        if op.name.startswith("c10d::"):
            kind = op_kind(op.name)
            spec = _C10D_ARGS.get(kind) if kind else None
            idx = spec[1] if spec else None
            if idx is not None and idx < len(op.in_values):
                keys.update((t[0], t[1]) for t in iter_tensors(op.in_values[idx]))
        elif op.name == "record_param_comms":
            keys.update((t[0], t[1]) for t in iter_tensors(op.out_values))
    return keys


def _by_values(host, calls, written, members) -> dict[int, int]:
    wanted = {k for ks in written.values() for k in ks}
    readers: dict[tuple, list[int]] = defaultdict(list)
    for op in host.ops:
        if op.id in members:
            continue
        for t in iter_tensors(op.in_values):
            k = (t[0], t[1])
            if k in wanted:
                readers[k].append(op.id)
    out = {}
    for c in calls:
        after = max(c.members)
        best = None
        for k in written[c.root]:
            ids = readers.get(k, ())
            i = bisect.bisect_right(ids, after)
            if i < len(ids) and (best is None or ids[i] < best):
                best = ids[i]
        if best is not None:
            out[c.root] = best
    return out


def _by_text(host, calls, written, members) -> dict[int, int]:
    data, spans = host.raw, host.spans
    starts = [s for s, _ in spans]
    out = {}
    for c in calls:
        root = host_pos(host, c)
        after = max(c.members)
        best = None
        for tid, sid in written[c.root]:
            hit = _first_in_inputs(data, spans, starts, b"[%d,%d," % (tid, sid), root, after, members)
            if hit is not None and (best is None or hit < best):
                best = hit
        if best is not None:
            out[c.root] = best
    return out


def host_pos(host: HostTrace, call: CommCall) -> int:
    ops = host.by_id_cache()
    pos = [ops[m].span for m in call.members if m in ops and ops[m].span is not None]
    return min(pos) if pos else 0


def _first_in_inputs(data, spans, starts, pattern, pos, after, members) -> int | None:
    best, hits = None, 0
    end = pos + WINDOW
    while hits < MAX_HITS:
        pos = data.find(pattern, pos, end)
        if pos < 0:
            break
        i = bisect.bisect_right(starts, pos) - 1
        if i >= 0 and data.find(b'"outputs": ', starts[i], pos) < 0:  # in the node's inputs
            hits += 1
            op_id = spans[i][1]
            if op_id > after and op_id not in members and (best is None or op_id < best):
                best = op_id
            pos = starts[i + 1] if i + 1 < len(starts) else len(data)
        else:
            pos += len(pattern)
    return best
