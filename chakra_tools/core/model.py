"""The node record every stage shares, and the attribute contract of the Chakra format.

A `Node` is immutable: passes build new nodes (`node.replace(...)`) rather than patching old ones,
and the `Graph` (graph.py) owns the edges. Attributes keep their exact protobuf oneof kind
(`Attr("int64_val", 4096)`), because simulators read only the kind they expect and silently read
0 otherwise; the typed accessors (`node.comm_size`, ...) read any integer kind and apply the
contract's defaults, so callers never care how an old generator spelled a value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import Any, Iterable, Mapping, NamedTuple


class NodeType(IntEnum):
    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7

    @property
    def short(self) -> str:
        """`COMM_COLL_NODE` -> `COMM_COLL`: the name used in the text form of a node."""
        return self.name[: -len("_NODE")]

    @property
    def is_comm(self) -> bool:
        return self in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMM_COLL_NODE)


class CommType(IntEnum):
    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


class Attr(NamedTuple):
    """One attribute value with its oneof kind (`"int64_val"`, `"bool_list"`, ...).

    List kinds hold a tuple. `kind` is None for an attribute that carries a name only.
    """

    kind: str | None
    value: Any
    doc: str = ""


class IOInfo(NamedTuple):
    values: str = ""
    shapes: str = ""
    types: str = ""


SCALAR_KINDS = (
    "double_val", "float_val", "int32_val", "int64_val", "uint32_val", "uint64_val", "sint32_val",
    "sint64_val", "fixed32_val", "fixed64_val", "sfixed32_val", "sfixed64_val", "bool_val",
    "string_val", "bytes_val",
)
LIST_KINDS = tuple(k[: -len("_val")] + "_list" for k in SCALAR_KINDS)
INTEGER_KINDS = frozenset(k for k in SCALAR_KINDS if "int" in k or "fixed" in k)

#: Chakra's feeders (FeederV3's `REGISTER_ATTR_WITH_DEFAULT(is_cpu_op, false)`, and the older
#: feeder's `is_cpu_op_ = 0`), and so ASTRA-sim, run a node without `is_cpu_op` as GPU work.
IS_CPU_OP_DEFAULT = False
#: ranks are int32 on the wire (`comm_src`, `comm_dst`)
MAX_RANK = 2**31 - 1

#: The de-facto attribute contract (REFERENCE §1): name -> the exact oneof kind readers expect.
CONTRACT: Mapping[str, str] = MappingProxyType({
    "is_cpu_op": "bool_val",
    "num_ops": "int64_val",
    "tensor_size": "uint64_val",
    "comm_type": "int64_val",
    "comm_size": "int64_val",
    "comm_src": "int32_val",
    "comm_dst": "int32_val",
    "comm_tag": "int32_val",
    "comm_priority": "int32_val",
    "pg_name": "string_val",
    "involved_dim": "bool_list",
})


def make_attr(name: str, value: Any) -> Attr:
    """The attribute for a Python value: the contract's kind for contract names, else by type.

    >>> make_attr("comm_size", 1024)
    Attr(kind='int64_val', value=1024, doc='')
    >>> make_attr("dtype", "float32").kind, make_attr("in_split", [1, 2]).kind
    ('string_val', 'int64_list')
    """
    if isinstance(value, Attr):
        return value
    kind = CONTRACT.get(name) or _kind_of(value)
    if kind.endswith("_list"):
        value = tuple(value)
    elif kind == "bool_val":
        value = bool(value)
    elif kind in INTEGER_KINDS:
        value = int(value)
    return Attr(kind, value)


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool_val"
    if isinstance(value, int):
        return "int64_val"
    if isinstance(value, float):
        return "double_val"
    if isinstance(value, str):
        return "string_val"
    if isinstance(value, bytes):
        return "bytes_val"
    if isinstance(value, (list, tuple)):
        items = list(value)
        if not items or all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            return "int64_list"
        return _kind_of(items[0])[: -len("_val")] + "_list"
    raise TypeError(f"no attribute kind for {type(value).__name__} value {value!r}")


def make_attrs(values: Mapping[str, Any] | None = None, **kw: Any) -> dict[str, Attr]:
    """A dict of attributes from plain values (see `make_attr`); None values are left out."""
    merged = {**(values or {}), **kw}
    return {k: make_attr(k, v) for k, v in merged.items() if v is not None}


def _int_attr(attrs: Mapping[str, Attr], name: str, default: int | None) -> int | None:
    a = attrs.get(name)
    if a is None or a.kind not in INTEGER_KINDS:
        return default
    return a.value


EMPTY_ATTRS: Mapping[str, Attr] = MappingProxyType({})


class Node(NamedTuple):
    """One node of a Chakra execution trace: an immutable record (a named tuple, because
    readers make millions of them and a tuple is the cheapest immutable record to build).

    >>> n = Node(7, "nccl:all_reduce", NodeType.COMM_COLL_NODE, data_deps=(3,),
    ...          attrs=make_attrs(comm_type=CommType.ALL_REDUCE, comm_size=4 << 20, pg_name="1"))
    >>> print(n)
    %7 COMM_COLL 'nccl:all_reduce' ALL_REDUCE 4.0MiB pg=1 deps=[%3]
    >>> n.comm_size, n.comm_type.name
    (4194304, 'ALL_REDUCE')
    >>> n.replace(name="x").name, n.name
    ('x', 'nccl:all_reduce')
    """

    id: int
    name: str
    type: NodeType
    data_deps: tuple[int, ...] = ()
    ctrl_deps: tuple[int, ...] = ()
    start_time_micros: int = 0
    duration_micros: int = 0
    attrs: Mapping[str, Attr] = EMPTY_ATTRS
    inputs: IOInfo | None = None
    outputs: IOInfo | None = None

    def replace(self, **changes: Any) -> "Node":
        return self._replace(**changes)

    def attr(self, name: str, default: Any = None) -> Any:
        """The plain value of any attribute, or `default`."""
        a = self.attrs.get(name)
        return default if a is None else a.value

    @property
    def deps(self) -> tuple[int, ...]:
        """Data and control dependencies together, each id once, data first."""
        if not self.ctrl_deps:
            return self.data_deps
        seen = dict.fromkeys(self.data_deps)
        seen.update(dict.fromkeys(self.ctrl_deps))
        return tuple(seen)

    # -- typed accessors of the contract, with its defaults ------------------------------------
    @property
    def is_cpu_op(self) -> bool:
        a = self.attrs.get("is_cpu_op")
        return bool(a.value) if a is not None and a.kind == "bool_val" else IS_CPU_OP_DEFAULT

    @property
    def num_ops(self) -> int:
        return _int_attr(self.attrs, "num_ops", 0)

    @property
    def tensor_size(self) -> int:
        return _int_attr(self.attrs, "tensor_size", 0)

    @property
    def comm_type(self) -> CommType | None:
        """The collective kind; a COMM_COLL node without one reads as ALL_REDUCE (proto3 default)."""
        v = _int_attr(self.attrs, "comm_type", None)
        if v is None:
            return CommType.ALL_REDUCE if self.type is NodeType.COMM_COLL_NODE else None
        try:
            return CommType(v)
        except ValueError:
            return None

    @property
    def comm_size(self) -> int:
        return _int_attr(self.attrs, "comm_size", 0)

    @property
    def comm_src(self) -> int | None:
        return _int_attr(self.attrs, "comm_src", None)

    @property
    def comm_dst(self) -> int | None:
        return _int_attr(self.attrs, "comm_dst", None)

    @property
    def comm_tag(self) -> int | None:
        return _int_attr(self.attrs, "comm_tag", None)

    @property
    def comm_priority(self) -> int:
        return _int_attr(self.attrs, "comm_priority", 0)

    @property
    def pg_name(self) -> str:
        a = self.attrs.get("pg_name")
        return a.value if a is not None and a.kind == "string_val" else ""

    @property
    def involved_dim(self) -> tuple[bool, ...] | None:
        a = self.attrs.get("involved_dim")
        return tuple(a.value) if a is not None and a.kind == "bool_list" else None

    def __str__(self) -> str:
        return node_text(self)


def format_bytes(n: int) -> str:
    """Human-readable byte count, binary units.

    >>> format_bytes(1536), format_bytes(4 << 20), format_bytes(12)
    ('1.5KiB', '4.0MiB', '12B')
    """
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n}B"


def node_text(node: Node) -> str:
    """The one text form of a node, used by errors, tests and the CLI."""
    parts = [f"%{node.id}", node.type.short if isinstance(node.type, NodeType) else str(node.type),
             repr(node.name)]
    t = node.type
    if t is NodeType.COMM_COLL_NODE:
        ct = node.comm_type
        parts += [ct.name if ct is not None else "?", format_bytes(node.comm_size)]
    elif t is NodeType.COMM_SEND_NODE:
        parts += [format_bytes(node.comm_size), f"to={node.comm_dst}", f"tag={node.comm_tag}"]
    elif t is NodeType.COMM_RECV_NODE:
        parts += [format_bytes(node.comm_size), f"from={node.comm_src}", f"tag={node.comm_tag}"]
    elif t is NodeType.COMP_NODE and node.num_ops:
        parts.append(f"{node.num_ops:.3g}flop")
    if node.duration_micros:
        parts.append(f"{node.duration_micros}us")
    if isinstance(t, NodeType) and t.is_comm and node.pg_name:
        parts.append(f"pg={node.pg_name}")
    if node.data_deps:
        parts.append("deps=[" + ",".join(f"%{d}" for d in node.data_deps) + "]")
    if node.ctrl_deps:
        parts.append("ctrl=[" + ",".join(f"%{d}" for d in node.ctrl_deps) + "]")
    return " ".join(parts)


@dataclass(frozen=True)
class Metadata:
    """The GlobalMetadata of a file; `present` is False for files that had none."""

    version: str = "0.0.4"
    attrs: Mapping[str, Attr] = dataclasses.field(default_factory=dict)
    present: bool = True


def nodes_by_id(nodes: Iterable[Node]) -> dict[int, Node]:
    return {n.id: n for n in nodes}
