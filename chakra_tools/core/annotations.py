"""The communication annotation: how a captured run tells the converter exactly what each
`torch.distributed` call did.

On CPU with gloo, PyTorch records a collective only as an opaque `c10d::<op>` node (no group, peer
or size). While capturing, chakra-tools wraps every torch.distributed call in a
`torch.profiler.record_function` whose *name* carries the facts as compact JSON, so the same
annotation appears in the host trace (a node of that name) and the device trace (an event of that
name: category `cpu_op` with torch's fast record function, `user_annotation` with the Python one;
match by name):

    chakra_tools.comm:{'api':'all_reduce','dtype':'float32','in_bytes':4096,...,'op':'all_reduce'}

The JSON is written with single quotes and its strings hold no quote or backslash: PyTorch's
execution-trace writer copies names into the host trace without escaping them, and a double quote
there makes the whole file invalid JSON (measured with torch 2.13). `parse_annotation` also reads
the plain-JSON form (double quotes) that earlier captures wrote.

Keys (absent when not applicable):
    op         the collective kind: all_reduce, reduce, all_gather, gather, scatter, broadcast,
               all_to_all, reduce_scatter, barrier; or send, recv for point-to-point
    api        the torch.distributed function called (e.g. all_gather_into_tensor, isend)
    pg         the process group's name as torch knows it ("0" is the default world group)
    pg_desc    the group's description, when torch has one
    pg_ranks   the group's global ranks, in group-rank order
    rank       the caller's global rank
    peer       point-to-point: the other side's global rank
    tag        point-to-point tag (0 when not given); `peer` is absent for a receive from any
               source
    dtype      element type, torch spelling without "torch." (float32, bfloat16, ...)
    elem_bytes bytes per element
    in_nelems, out_nelems   elements in and out on this rank: all_gather in = this rank's part,
                            out = the whole; reduce_scatter the reverse; gather/scatter count the
                            list only on the root (0 elsewhere); send and recv both = the message;
                            barrier 0
    in_bytes, out_bytes     the same in bytes
    in_split, out_split     all_to_all split sizes in elements (alltoallv), per peer
    root       rooted collectives (reduce, gather, scatter, broadcast): the root's global rank
    async      true when called with async_op=True (or isend/irecv)
    seq        0-based count of annotated calls on this group by this rank (ranks start annotating
               at the same step, so a collective has the same seq on every member)

Annotations never nest: only the outermost torch.distributed call on a thread is annotated. In
a host trace, an annotation node whose parent (ctrl_deps) is another annotation is an artifact of
the execution-trace observer, not a nested call: after an asynchronous gloo call (isend/irecv,
async_op=True), gloo's work keeps a record function open past the call and the observer's parent
tracking drifts until the work completes, so the next ops (an annotation included) get the
previous annotation as parent. Read such a node as a call of its own; the device trace has the
true intervals.

This module has no torch import: the converter uses it on machines without torch.
"""

from __future__ import annotations

import json
from typing import Any

PREFIX = "chakra_tools.comm:"

COLLECTIVE_OPS = ("all_reduce", "reduce", "all_gather", "gather", "scatter", "broadcast",
                  "all_to_all", "reduce_scatter", "barrier")
P2P_OPS = ("send", "recv")
#: the op of a wait annotation: `Work.wait()` on an annotated asynchronous call, naming the call's
#: `pg` and `seq` (and `waits_for`, its op); `parse_annotation` leaves it out, `parse_wait` reads it
WAIT_OP = "wait"


def format_annotation(fields: dict[str, Any]) -> str:
    """The record_function name for one call; keys sorted so names are stable, no double quote
    or backslash anywhere (strings lose them; quotes are single).

    >>> format_annotation({"op": "send", "peer": 1, "tag": 0, "pg_desc": 'my "pp" group'})
    "chakra_tools.comm:{'op':'send','peer':1,'pg_desc':'my pp group','tag':0}"
    """
    if fields.get("op") not in COLLECTIVE_OPS + P2P_OPS + (WAIT_OP,):
        raise ValueError(f"unknown communication op {fields.get('op')!r}")
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    if "'" in text or "\\" in text:  # a string that needs cleaning (rare): clean and redo
        clean = {k: _clean(v) for k, v in fields.items()}
        text = json.dumps(clean, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return PREFIX + text.replace('"', "'")


def _clean(value: Any) -> Any:
    """Strings without quotes, backslashes, non-ASCII or control characters (module docstring)."""
    if isinstance(value, str):
        if value.isascii() and value.isprintable() and not any(q in value for q in "\\\"'"):
            return value
        return "".join(c for c in value if c not in "\\\"'" and c.isascii() and c.isprintable())
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value] if any(isinstance(v, str) for v in value) else value
    return value


def parse_annotation(name: str) -> dict[str, Any] | None:
    """The fields of a call's annotation name, or None if `name` is not one (or is mangled).

    >>> parse_annotation("chakra_tools.comm:{'op':'all_reduce','in_bytes':64}")["in_bytes"]
    64
    >>> parse_annotation('chakra_tools.comm:{"op":"all_reduce","in_bytes":64}')["in_bytes"]
    64
    >>> parse_annotation("aten::mm") is None
    True
    """
    fields = _fields(name)
    return fields if fields is not None and fields.get("op") in COLLECTIVE_OPS + P2P_OPS else None


def parse_wait(name: str) -> dict[str, Any] | None:
    """The fields of a wait annotation (`op` "wait", the waited call's `pg` and `seq`), or None.

    >>> parse_wait("chakra_tools.comm:{'op':'wait','pg':'1','seq':3}")["seq"]
    3
    """
    fields = _fields(name)
    return fields if fields is not None and fields.get("op") == WAIT_OP else None


def call_name(name: str) -> str | None:
    """What a person calls the annotated call (`dist.all_to_all_single`, `Work.wait`), or None
    if `name` is no annotation.

    >>> call_name("chakra_tools.comm:{'api':'all_to_all_single','op':'all_to_all','pg':'1'}")
    'dist.all_to_all_single'
    >>> call_name("chakra_tools.comm:{'api':'Work.wait','op':'wait','pg':'1','seq':3}")
    'Work.wait'
    >>> call_name("aten::mm") is None
    True
    """
    fields = _fields(name)
    if fields is None:
        return None
    api = str(fields.get("api") or fields.get("op") or "call")
    return api if "." in api else f"dist.{api}"


def _fields(name: str) -> dict[str, Any] | None:
    if not name.startswith(PREFIX):
        return None
    body = name[len(PREFIX):]
    if '"' not in body:
        body = body.replace("'", '"')
    try:
        fields = json.loads(body)
    except json.JSONDecodeError:
        return None
    return fields if isinstance(fields, dict) else None
