"""What kind of work a node is: the one classification replay, visualize and stats share.

Every node runs on a *lane* of its rank (ASTRA-sim's resources: one host thread, one GPU compute
queue, one communication queue; receives, memory and metadata apart), and each lane holds one
*class of work*, which is what a breakdown counts (host, compute, comm, memory, other).

`is_cpu_op` decides host against device compute; a node without it is GPU work, as both Chakra
feeders (and so ASTRA-sim) read it (`IS_CPU_OP_DEFAULT`).

>>> from chakra_tools.core.model import NodeType
>>> LANES[lane_of(NodeType.COMP_NODE, False)], LANES[lane_of(NodeType.COMM_RECV_NODE, None)]
('compute', 'recv')
>>> WORK[LANES[lane_of(NodeType.COMM_RECV_NODE, None)]]
'comm'
"""

from __future__ import annotations

from .model import IS_CPU_OP_DEFAULT, NodeType

LANES = ("host", "compute", "comm", "recv", "mem", "other")
HOST, COMPUTE, COMM, RECV, MEM, OTHER = range(len(LANES))
#: lane -> the class of work it holds (a breakdown's columns)
WORK = {"host": "host", "compute": "compute", "comm": "comm", "recv": "comm", "mem": "memory",
        "other": "other"}

_COMP, _COLL, _SEND, _RECV = (int(NodeType.COMP_NODE), int(NodeType.COMM_COLL_NODE),
                              int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE))
_MEMS = (int(NodeType.MEM_LOAD_NODE), int(NodeType.MEM_STORE_NODE))


def lane_of(node_type: int, is_cpu_op: bool | None) -> int:
    """The lane (an index into `LANES`) of a node of `node_type` whose `is_cpu_op` is given
    (None: the trace says nothing)."""
    t = node_type
    if t == _COMP:
        return HOST if (IS_CPU_OP_DEFAULT if is_cpu_op is None else is_cpu_op) else COMPUTE
    if t == _COLL or t == _SEND:
        return COMM
    if t == _RECV:
        return RECV
    if t in _MEMS:
        return MEM
    return OTHER
