"""`NodeInfo`: the few typed fields a simulator reads from a node, decoded straight from protobuf.

Building a full `core.model.Node` (every attribute, inputs, outputs) costs about ten times the
protobuf decode itself; a replayer that touches every node of a multi-million-node trace needs
only the type, the duration and the contract attributes. `node_info()` reads exactly those, with
the contract's defaults (REFERENCE §1): a missing `is_cpu_op` means GPU work (as both Chakra
feeders read it), a COMM_COLL node without `comm_type` is an ALL_REDUCE (the proto3 default), and any
integer kind is accepted where the contract names one (old generators wrote int32 or uint64).
"""

from __future__ import annotations

from typing import NamedTuple

from chakra_tools.core.model import IS_CPU_OP_DEFAULT, SCALAR_KINDS, NodeType

_COMM_COLL = int(NodeType.COMM_COLL_NODE)
_INT_KINDS = frozenset(k for k in SCALAR_KINDS if "int" in k or "fixed" in k)


class NodeInfo(NamedTuple):
    """What the replayer needs of one node; `None` where the trace says nothing."""

    id: int
    name: str
    type: int  # NodeType value
    duration_micros: int
    is_cpu_op: bool
    num_ops: int
    tensor_size: int
    comm_type: int | None
    comm_size: int
    comm_src: int | None
    comm_dst: int | None
    comm_tag: int | None
    pg_name: str
    involved_dim: tuple[bool, ...] | None
    start_time_micros: int = 0
    #: exact duration when the trace carries the `duration_ns` attribute (our converters write it
    #: where `duration_micros` must round: sub-microsecond kernels, cycles of text workloads)
    duration_ns: int | None = None
    #: the recorded host thread of a host op, the device stream of a kernel or NCCL collective
    tid: int | None = None
    stream: int | None = None


_new = tuple.__new__


#: the integer contract attributes NodeInfo carries, each with its place in `node_info`'s list
_INT_SLOT = {"num_ops": 0, "tensor_size": 1, "comm_type": 2, "comm_size": 3, "comm_src": 4, "comm_dst": 5,
             "comm_tag": 6, "duration_ns": 7, "tid": 8, "stream": 9}


def node_info(m) -> NodeInfo:
    """The `NodeInfo` of a protobuf `Node` message (no copy of the other attributes)."""
    vals: list | None = None
    is_cpu = IS_CPU_OP_DEFAULT
    pg = ""
    involved = None
    for a in m.attr:
        name = a.name
        if name == "is_cpu_op":
            if a.WhichOneof("value") == "bool_val":
                is_cpu = a.bool_val
            continue
        slot = _INT_SLOT.get(name)
        if slot is not None:
            kind = a.WhichOneof("value")
            if kind in _INT_KINDS:
                if vals is None:
                    vals = [None] * 10
                vals[slot] = getattr(a, kind)
        elif name == "pg_name":
            if a.WhichOneof("value") == "string_val":
                pg = a.string_val
        elif name == "involved_dim" and a.WhichOneof("value") == "bool_list":
            involved = tuple(a.bool_list.values)
    t = m.type
    # tuple.__new__ skips NamedTuple's Python-level __new__: this runs once per node of a replay
    if vals is None:
        return _new(NodeInfo, (m.id, m.name, t, m.duration_micros, is_cpu, 0, 0,
                               0 if t == _COMM_COLL else None, 0, None, None, None, pg, involved,
                               m.start_time_micros, None, None, None))
    num_ops, size, ct, comm_size, src, dst, tag, dur_ns, tid, stream = vals
    if ct is None and t == _COMM_COLL:
        ct = 0
    return _new(NodeInfo, (m.id, m.name, t, m.duration_micros, is_cpu, num_ops or 0, size or 0, ct,
                           comm_size or 0, src, dst, tag, pg, involved, m.start_time_micros, dur_ns, tid,
                           stream))


def node_entry(m, use_data: bool, use_ctrl: bool) -> tuple[int, tuple[int, ...], NodeInfo]:
    """What the feeder keeps of a protobuf `Node`: its id, the dependencies it resolves (data then
    control, per `use_*`, each id once, first place kept) and its `NodeInfo`. The reference that
    `core/_hotloops.c`'s `decode_node` reads straight off the wire (tests/feed/test_decode_node.py)."""
    data = m.data_deps if use_data else ()
    ctrl = m.ctrl_deps if use_ctrl else ()
    if ctrl:
        deps = tuple(dict.fromkeys((*data, *ctrl)))
    else:
        deps = tuple(dict.fromkeys(data)) if len(data) > 1 else tuple(data)
    return m.id, deps, node_info(m)
