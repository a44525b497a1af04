"""The communication annotation: how a captured run tells the converter exactly what each
`torch.distributed` call did.

On CPU with gloo, PyTorch records a collective only as an opaque `c10d::<op>` node (no group, peer
or size). While capturing, chakra-tools wraps every torch.distributed call in a
`torch.profiler.record_function` whose *name* carries the facts as compact JSON, so the same
annotation appears in the host trace (a node of that name) and the device trace (a
`user_annotation` event of that name):

    chakra_tools.comm:{"api":"all_reduce","dtype":"float32","in_bytes":4096,...,"op":"all_reduce"}

Keys (absent when not applicable):
    op         the collective kind: all_reduce, reduce, all_gather, gather, scatter, broadcast,
               all_to_all, reduce_scatter, barrier; or send, recv for point-to-point
    api        the torch.distributed function called (e.g. all_gather_into_tensor, isend)
    pg         the process group's name as torch knows it ("0" is the default world group)
    pg_desc    the group's description, when torch has one
    pg_ranks   the group's global ranks, in group-rank order
    rank       the caller's global rank
    peer       point-to-point: the other side's global rank
    tag        point-to-point tag (0 when not given)
    dtype      element type, torch spelling without "torch." (float32, bfloat16, ...)
    elem_bytes bytes per element
    in_nelems, out_nelems   elements in and out on this rank
    in_bytes, out_bytes     the same in bytes
    in_split, out_split     all_to_all split sizes in elements (alltoallv), per peer
    root       rooted collectives (reduce, gather, scatter, broadcast): the root's global rank
    async      true when called with async_op=True (or isend/irecv)
    seq        0-based count of annotated calls on this group by this rank

This module has no torch import: the converter uses it on machines without torch.
"""

from __future__ import annotations

import json
from typing import Any

PREFIX = "chakra_tools.comm:"

COLLECTIVE_OPS = ("all_reduce", "reduce", "all_gather", "gather", "scatter", "broadcast",
                  "all_to_all", "reduce_scatter", "barrier")
P2P_OPS = ("send", "recv")


def format_annotation(fields: dict[str, Any]) -> str:
    """The record_function name for one call; keys sorted so names are stable.

    >>> format_annotation({"op": "send", "peer": 1, "tag": 0})
    'chakra_tools.comm:{"op":"send","peer":1,"tag":0}'
    """
    if fields.get("op") not in COLLECTIVE_OPS + P2P_OPS:
        raise ValueError(f"unknown communication op {fields.get('op')!r}")
    return PREFIX + json.dumps(fields, sort_keys=True, separators=(",", ":"))


def parse_annotation(name: str) -> dict[str, Any] | None:
    """The fields of an annotation name, or None if `name` is not one (or is mangled).

    >>> parse_annotation('chakra_tools.comm:{"op":"all_reduce","in_bytes":64}')["in_bytes"]
    64
    >>> parse_annotation("aten::mm") is None
    True
    """
    if not name.startswith(PREFIX):
        return None
    try:
        fields = json.loads(name[len(PREFIX):])
    except json.JSONDecodeError:
        return None
    if not isinstance(fields, dict) or fields.get("op") not in COLLECTIVE_OPS + P2P_OPS:
        return None
    return fields
