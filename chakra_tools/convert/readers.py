"""Which later op consumes what a collective wrote (the "collective -> consumer" dependency).

A call writes its output buffers (the c10d op's output argument; `record_param_comms` outputs).
Its consumer is the first later host op (ascending id: call order), not part of any call, that
takes one of those tensors (same tensor id and storage id) as input, looked for among the
`WINDOW` ops after the call. Host traces read on the typed path keep every op's inputs as raw
JSON (`HostOp.raw_inputs`): those are joined into one text once, searched for
`[tensor_id,storage_id,` (PyTorch's compact form, or with a space after each comma) with
bytes.find, and an op's inputs are decoded only on a hit, to confirm the tensor really is an
input value (not a shape that looks alike).
"""

from __future__ import annotations

import bisect

from .calls import C10D_ARGS, CommCall, WaitMark, op_kind
from . import hotloops
from .hostet import HostOp, HostTrace, decode_inputs
from .tensors import iter_tensors

#: how many ops after a call its consumer is looked for in (a few training steps of a small model)
WINDOW = 8192
#: how many calls before a `wait_tensor` the call it waits for is looked for among
LOOKBACK = 64
#: functional collectives return the tensor they write
_FUNCTIONAL = ("_c10d_functional::", "c10d_functional::")
#: ops that take a collective's output without reading its data: wrapping a functional
#: collective's result for autograd happens at once, long before the collective ends
_NOT_READERS = ("_c10d_functional::_wrap_tensor_autograd", "c10d_functional::_wrap_tensor_autograd")


def first_readers(host: HostTrace, calls: list[CommCall]) -> dict[int, int]:
    """call root id -> id of the op that first reads what the call wrote."""
    if not calls:
        return {}
    by_id = host.by_id_cache()
    members = {m for c in calls for m in c.members}
    ops = host.ops
    ids = [op.id for op in ops]
    written = [(c, written_tensors(c, by_id)) for c in calls]
    wanted = set().union(*(keys for _, keys in written))
    text = (hotloops.inputs_search([op.raw_inputs for op in ops], wanted)
            if ops and ops[0].raw_inputs is not None else None)
    out = {}
    for c, keys in written:
        if not keys:
            continue
        start = bisect.bisect_right(ids, max(c.members))
        end = min(start + WINDOW, len(ops))
        hits = text.ops_mentioning(keys, start, end) if text else range(start, end)
        reader = next((ops[i].id for i in hits if ops[i].id not in members
                       and ops[i].name not in _NOT_READERS and _reads(ops[i], keys)), None)
        if reader is not None:
            out[c.root] = reader
    return out


def written_tensors(call: CommCall, by_id: dict[int, HostOp]) -> set[tuple[int, int]]:
    """(tensor id, storage id) of the buffers a call writes."""
    keys: set[tuple[int, int]] = set()
    for m in call.members:
        op = by_id.get(m)
        if op is None:
            continue
        if op.name.startswith("c10d::"):
            kind = op_kind(op.name)
            spec = C10D_ARGS.get(kind) if kind else None
            idx = spec[1] if spec else None
            if idx is not None and idx < len(op.in_values):
                keys.update((t[0], t[1]) for t in iter_tensors(op.in_values[idx]))
        elif op.name == "record_param_comms" or op.name.startswith(_FUNCTIONAL):
            keys.update((t[0], t[1]) for t in iter_tensors(op.out_values))
    return keys


def waited_calls(host: HostTrace, calls: list[CommCall], waits: list[WaitMark]) -> dict[int, int]:
    """wait op id -> root of the call it waits for, for the waits that carry no sequence number:
    `wait_tensor(t)` (functional collectives) waits for the latest earlier call that wrote `t`,
    looked for among the `LOOKBACK` calls before it."""
    by_id = host.by_id_cache()
    ordered = sorted(calls, key=lambda c: c.root)
    roots = [c.root for c in ordered]
    written: dict[int, set] = {}
    out = {}
    for w in waits:
        op = by_id.get(w.op_id)
        if w.seq is not None or op is None:
            continue
        keys = {(t[0], t[1]) for t in iter_tensors(op.in_values)}
        end = bisect.bisect_left(roots, w.op_id)
        for c in reversed(ordered[max(0, end - LOOKBACK):end]):
            if c.root not in written:
                written[c.root] = written_tensors(c, by_id)
            if written[c.root] & keys:
                out[w.op_id] = c.root
                break
    return out


def _reads(op: HostOp, keys: set[tuple[int, int]]) -> bool:
    """Whether one of the op's input values is a tensor of `keys`."""
    values = decode_inputs(op) if op.raw_inputs is not None else op.in_values
    return any((t[0], t[1]) in keys for t in iter_tensors(values))
