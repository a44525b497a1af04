"""A small helper that builds one rank's graph in program order.

Every front end writes training loops the same way: nodes get ids in the order the program issues
them, so ranks that run the same program (the members of a process group) get the same ids for the
same collectives. Collectives additionally form one chain per rank (each depends on the previous
one), the way NCCL serialises the work it is given: with that chain every member of a group issues
the group's collectives in the same order whatever the timing, and no two groups can wait on each
other in a cycle (ASTRA-sim runs one comm op per rank at a time).
"""

from __future__ import annotations

from typing import Iterable

from chakra_tools.core.graph import Graph
from chakra_tools.core.model import CommType, Metadata, Node, NodeType, make_attr, make_attrs

#: Attribute with the exact duration in ns, because `duration_micros` holds whole microseconds only.
DURATION_NS = "duration_ns"


def ns_to_micros(ns: int) -> int:
    """Whole microseconds for the ET's `duration_micros`, rounded half up (1,500 ns -> 2 µs).

    >>> ns_to_micros(3145728), ns_to_micros(300), ns_to_micros(500)
    (3146, 0, 1)
    """
    return (int(ns) + 500) // 1000


class GraphBuilder:
    """Appends nodes to one rank's graph; ids count up from 0 in program order."""

    def __init__(self, rank: int, *, chain_collectives: bool = True):
        self.rank = rank
        self.nodes: list[Node] = []
        self.chain_collectives = chain_collectives
        self._last_comm: int | None = None

    def _add(self, name: str, type_: NodeType, deps: Iterable[int | None], attrs: dict,
             duration_ns: int = 0) -> int:
        nid = len(self.nodes)
        data = tuple(dict.fromkeys(d for d in deps if d is not None))
        if duration_ns:
            attrs[DURATION_NS] = make_attr(DURATION_NS, int(duration_ns))
        self.nodes.append(Node(nid, name, type_, data_deps=data,
                               duration_micros=ns_to_micros(duration_ns), attrs=attrs))
        return nid

    def comp(self, name: str, deps: Iterable[int | None], duration_ns: int, *,
             num_ops: int = 0, tensor_size: int = 0) -> int:
        """A GPU compute node; `num_ops`/`tensor_size` let ASTRA-sim's roofline mode time it."""
        attrs = make_attrs(is_cpu_op=False, num_ops=int(num_ops) or None,
                           tensor_size=int(tensor_size) or None)
        return self._add(name, NodeType.COMP_NODE, deps, attrs, duration_ns)

    def coll(self, name: str, deps: Iterable[int | None], comm_type: CommType, size: int,
             pg_name: str, involved_dim: tuple[bool, ...] | None = None) -> int:
        """A collective on process group `pg_name`, chained after this rank's previous one."""
        deps = [*deps, self._last_comm if self.chain_collectives else None]
        attrs = make_attrs(is_cpu_op=False, comm_type=int(comm_type), comm_size=int(size),
                           pg_name=pg_name, involved_dim=involved_dim)
        nid = self._add(name, NodeType.COMM_COLL_NODE, deps, attrs)
        self._last_comm = nid
        return nid

    def send(self, name: str, deps: Iterable[int | None], dst: int, size: int, tag: int) -> int:
        attrs = make_attrs(is_cpu_op=False, comm_src=self.rank, comm_dst=dst, comm_tag=tag,
                           comm_size=int(size))
        return self._add(name, NodeType.COMM_SEND_NODE, deps, attrs)

    def recv(self, name: str, deps: Iterable[int | None], src: int, size: int, tag: int) -> int:
        attrs = make_attrs(is_cpu_op=False, comm_src=src, comm_dst=self.rank, comm_tag=tag,
                           comm_size=int(size))
        return self._add(name, NodeType.COMM_RECV_NODE, deps, attrs)

    def graph(self, **metadata_attrs) -> Graph:
        meta = Metadata(attrs=make_attrs(metadata_attrs)) if metadata_attrs else Metadata()
        return Graph(self.nodes, rank=self.rank, metadata=meta)


def write_rankset(rankset, out_dir, prefix: str) -> dict:
    """Write a front end's rank set as `trace-convert onnx|text|generate` does: every rank's file
    records the world size (so a rank that goes missing is an error, not a smaller job). Returns
    `describe`'s summary with where it went.

        >>> import tempfile
        >>> from chakra_tools.core.graph import RankSet
        >>> rs = RankSet({0: Graph([Node(1, "op", NodeType.COMP_NODE)], rank=0)}, {}, "t")
        >>> write_rankset(rs, tempfile.mkdtemp(), "t")["nodes"]
        1
    """
    rankset.write(out_dir, prefix, record_world=True)
    return {"out": str(out_dir), "prefix": prefix, **describe(rankset)}


def describe(rankset) -> dict:
    """What a written rank set holds, for the CLI's summary line and --json."""
    from collections import Counter

    kinds: Counter = Counter()
    comm_bytes = 0
    nodes = 0
    for g in rankset:
        for n in g:
            nodes += 1
            kinds[n.type.short] += 1
            if n.type.is_comm and n.type is not NodeType.COMM_RECV_NODE:
                comm_bytes += n.comm_size
    return {"ranks": len(rankset), "nodes": nodes, "node_types": dict(sorted(kinds.items())),
            "comm_bytes_sent": comm_bytes, "groups": len(rankset.comm_groups)}
