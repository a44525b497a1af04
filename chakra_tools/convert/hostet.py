"""Reading PyTorch host execution traces (`ExecutionTraceObserver`) of every schema we know.

Schemas 1.0.1 (flat `inputs`/`input_shapes`/`input_types` and top-level `parent`, `rf_id`,
`tid`...) and 1.0.2 .. 1.1.1 (`inputs: {values, shapes, types}`, `ctrl_deps` = the caller,
`attrs: [{name, type, value}]`) are read into one record, `HostOp`. Node ids are handed out when
an op *starts* (the file lists ops when they end), so ascending id is the call order across
threads; the file order is not used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Callable, Union

import msgspec

from chakra_tools.core.errors import InputError

from . import hotloops, schema

ROOT_MARK = "[pytorch|profiler|execution_"
PG_INIT = "## process_group:init ##"


class HostOp:
    """One host op: identity, caller, thread and its recorded inputs and outputs."""

    __slots__ = ("id", "name", "parent", "tid", "rf_id", "in_values", "in_shapes", "in_types",
                 "out_values", "out_shapes", "out_types", "attrs", "raw_inputs")

    def __init__(self, id: int, name: str, parent: int, tid: int, rf_id: int | None,
                 inputs: tuple, outputs: tuple, attrs: dict):
        self.id, self.name, self.parent, self.tid, self.rf_id = id, name, parent, tid, rf_id
        self.in_values, self.in_shapes, self.in_types = inputs
        self.out_values, self.out_shapes, self.out_types = outputs
        self.attrs = attrs
        #: typed path: the inputs' JSON text (a view into the file's bytes), for `first_readers`
        self.raw_inputs: msgspec.Raw | None = None

    def __repr__(self) -> str:
        return f"HostOp({self.id}, {self.name!r}, tid={self.tid})"


@dataclass
class HostTrace:
    """A parsed host trace: ops in call (id) order, minus the process and thread roots."""

    path: str
    schema: str
    ops: list[HostOp]
    roots: set[int] = field(default_factory=set)
    process_groups: list[dict] = field(default_factory=list)
    pg_init_id: int | None = None
    pid: int | None = None  # the process that wrote it (the file's "pid"), where it says

    def release(self) -> None:
        """Drop the raw inputs kept for `first_readers` (they hold the file's buffer)."""
        for op in self.ops:
            op.raw_inputs = None

    @property
    def by_id(self) -> dict[int, HostOp]:
        return {op.id: op for op in self.ops}

    def by_id_cache(self) -> dict[int, HostOp]:
        """`by_id`, built once."""
        cache = self.__dict__.get("_by_id")
        if cache is None:
            cache = self.__dict__["_by_id"] = self.by_id
        return cache


def _op_new(n: dict, want: int, place: schema.Place) -> HostOp:
    """A node of schema >= 1.0.2, checked as `_Node` and `_typed_op` check it."""
    attrs = {}
    for a in schema.array(n.get("attrs", []), place, "attrs"):
        schema.obj(a, place, "attrs")
        attrs[schema.text(a.get("name", ""), place, "attrs.name")] = a.get("value")
    parent = n.get("ctrl_deps", 0)
    if isinstance(parent, list):
        ids = [schema.integer(p, place, "ctrl_deps", 0, schema.ID_MAX) for p in parent]
        parent = ids[0] if ids else 0
    elif parent is not None:
        schema.integer(parent, place, "ctrl_deps", 0, schema.ID_MAX)
    ins = _plain_io(n.get("inputs", {}), want, place, "inputs")
    outs = _plain_io(n.get("outputs", {}), want, place, "outputs")
    return _host_op(n["id"], n["name"], parent or 0, attrs.get("rf_id"), attrs.get("tid"), ins, outs,
                    _kept_attrs(attrs, want, place), place)


def _plain_io(v: Any, want: int, place: schema.Place, key: str) -> tuple:
    """`inputs` or `outputs`: {values, shapes, types}, each a list (as `_IO` types them), for an
    op the converter reads (`want`). Of the others only what `first_readers` searches is kept,
    as the typed path keeps their raw inputs: lists where they are lists, else nothing."""
    keys = ("values", "shapes", "types")
    if want:
        schema.obj(v, place, key)
        return tuple(schema.array(v.get(k, []), place, f"{key}.{k}") for k in keys)
    return tuple(_loose_list(v, k) for k in keys)


def _loose_list(v: Any, key: str) -> list:
    got = v.get(key, []) if isinstance(v, dict) else None
    return got if isinstance(got, list) else []


def _op_old(n: dict, want: int, place: schema.Place) -> HostOp:
    """A node of schema 1.0.1: flat inputs, attributes as top-level keys."""
    schema.integer(n.get("parent", 0) or 0, place, "parent", 0, schema.ID_MAX)
    io = [tuple(schema.array(n.get(k, []), place, k) for k in keys)
          for keys in (("inputs", "input_shapes", "input_types"),
                       ("outputs", "output_shapes", "output_types"))]
    return _host_op(n["id"], n["name"], n.get("parent", 0) or 0, n.get("rf_id"), n.get("tid"), *io,
                    _kept_attrs(n, want, place), place)


def _host_op(id: int, name: str, parent: int, rf: Any, tid: Any, ins: tuple, outs: tuple,
             attrs: dict, place: schema.Place) -> HostOp:
    """A HostOp, its record-function and thread ids checked (integers, or absent)."""
    if (rf is not None and type(rf) is not int) or (tid is not None and type(tid) is not int) or \
            not _INT64_MIN <= (rf or 0) <= _INT64_MAX or not _INT64_MIN <= (tid or 0) <= _INT64_MAX:
        schema.optional_integer(rf, place, "rf_id")
        schema.optional_integer(tid, place, "tid")
    return HostOp(id, name, parent, tid or 0, rf, ins, outs, attrs)


def _kept_attrs(attrs: dict, want: int, place: schema.Place) -> dict:
    """The attributes kept of an op (communication, annotations, markers: ALL), their collective
    metadata checked; none of the others."""
    return schema.check_comm_attrs(attrs, place) if want >= ALL else _NO_ATTRS


def _node_place(i: int, n: Any, path: str) -> schema.Place:
    """Where node `i` of the file is: `node ID ('name')`, once its id and name are checked."""
    place = schema.Place(path, f"nodes[{i}]")
    schema.obj(n, place, "nodes")
    if "id" not in n:
        raise InputError(f"{path}: nodes[{i}]: no 'id'")
    nid = schema.integer(n["id"], place, "id", 0, schema.ID_MAX)
    place.record = f"node {nid}"
    name = schema.text(n.get("name", ""), place, "name")
    place.record += f" ({name!r})"
    n.setdefault("name", name)
    return place


def parse_host(doc: Any, path: str, needs_args: Callable[[str], int] | None = None) -> HostTrace:
    """A host trace from its plain JSON document, each node checked as the typed path checks it
    (schema.py): the same ops, or an InputError naming the node. `needs_args` as for
    `parse_host_bytes` (None: everything of every op). Raises InputError if it is not a host
    trace."""
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise InputError(f"{path}: not a PyTorch host execution trace (no 'nodes' list)")
    schema_name = doc.get("schema", "")
    if not isinstance(schema_name, (str, int, float)) or isinstance(schema_name, bool):
        raise InputError(f"{path}: 'schema' is {schema_name!r}, not a version")
    schema_name = str(schema_name)
    nodes = doc["nodes"]
    flat = schema_name.startswith("1.0.1") or any(
        "parent" in n or isinstance(n.get("inputs"), list) for n in nodes[:8] if isinstance(n, dict))
    make = _op_old if flat else _op_new
    wanted = needs_args or (lambda name: ALL)
    ops = []
    for i, n in enumerate(nodes):
        place = _node_place(i, n, path)
        ops.append(make(n, wanted(n["name"]), place))
    return _collect(HostTrace(path, schema_name, [], pid=_pid(doc.get("pid"))), ops)


def _pg_list(op: HostOp, path: str) -> list[dict]:
    """The process-group list of a `## process_group:init ##` node (a JSON string input)."""
    for v in op.in_values:
        if isinstance(v, str) and v.startswith("["):
            try:
                groups = json.loads(v)
            except (ValueError, RecursionError):  # a JSONDecodeError, or a number of over 4,300 digits
                raise InputError(f"{path}: node {op.id} ({PG_INIT!r}): unreadable group list") from None
            place = schema.Place(path, f"node {op.id} ({PG_INIT!r})")
            return [schema.process_group(g, place) for g in schema.array(groups, place, "groups")]
    return []


# --------------------------------------------------------------------------------------------
# fast path: typed decoding (schema >= 1.0.2)
# --------------------------------------------------------------------------------------------
#
# msgspec decodes the document straight into small structs that keep only what the converter
# reads: ids, name, caller and attributes; each node's `inputs` and `outputs` stay raw JSON
# bytes (msgspec.Raw, a view into the file's buffer) and are decoded only for the ops the
# converter looks into (costed compute, communication, markers). That is ~5x faster than
# building the whole document with the json module and needs a fraction of its memory, and,
# unlike a scan of the text, it is a real JSON parser: any layout, any key order. A document
# that does not fit the types (schema 1.0.1's flat inputs, odd values) goes to the plain JSON
# path, which also reports syntax errors with their line.


_NO_IO = msgspec.Raw(b"{}")
_NO_ATTRS_RAW = msgspec.Raw(b"[]")


class _Attr(msgspec.Struct, gc=False):
    name: str = ""
    value: Any = None


class _Node(msgspec.Struct, gc=False):
    id: schema.Id
    name: str = ""
    ctrl_deps: Union[schema.Id, list[schema.Id], None] = 0
    inputs: msgspec.Raw = _NO_IO
    outputs: msgspec.Raw = _NO_IO
    attrs: msgspec.Raw = _NO_ATTRS_RAW  # decoded node by node: a million small objects otherwise


class _Trace(msgspec.Struct, gc=False):
    nodes: list[_Node]
    schema: Union[str, float, int] = ""
    pid: Any = None


#: above any pid a kernel hands out (Linux's pid_max is at most 2**22): not a process's id
PID_LIMIT = 1 << 31


def _pid(v: Any) -> int | None:
    return v if type(v) is int and 0 < v < PID_LIMIT else None


class _IO(msgspec.Struct, gc=False):
    values: list[Any] = []
    shapes: list[Any] = []
    types: list[Any] = []


_TRACE = msgspec.json.Decoder(_Trace)
_ATTRS = msgspec.json.Decoder(list[_Attr])
_IO_DECODER = msgspec.json.Decoder(_IO)
_EMPTY = ((), (), ())
_NO_ATTRS: dict = {}
_INT64_MIN, _INT64_MAX = schema.INT64_MIN, schema.INT64_MAX


def parse_host_bytes(data: bytes, path: str, needs_args: Callable[[str], int]) -> HostTrace:
    """A host trace from the file's bytes: typed decoding when the schema allows, else JSON.

    `needs_args(name)` says what of an op is decoded: nothing (0), its inputs and outputs
    (INPUTS), or those and its attributes (ALL). Every op keeps its raw inputs
    (`HostOp.raw_inputs`) for `first_readers` until `release()`.
    """
    from .jsonio import decode_typed, parse_json_bytes

    doc = decode_typed(_TRACE, data)
    fast = _from_typed(doc, path, needs_args) if doc is not None else None
    if fast is not None:
        return fast
    return parse_host(parse_json_bytes(data, path), path, needs_args)


def _from_typed(doc: _Trace, path: str, needs_args) -> HostTrace | None:
    schema = str(doc.schema)
    if schema.startswith("1.0.1") or any(isinstance(n.inputs, list) for n in doc.nodes[:1]):
        return None
    try:
        ops = hotloops.host_ops(doc.nodes, needs_args, _typed_op, HostOp, _NO_ATTRS,
                                _IO_DECODER.decode)
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError, IndexError):
        return None  # inputs that are not {values, shapes, types}: the plain path reports it
    except InputError as e:
        raise e.add_context(path) from None
    return _collect(HostTrace(path, schema, [], pid=_pid(doc.pid)), ops)


#: what `needs_args(name)` answers for an op: its inputs and outputs are not decoded (0 or
#: False), they are (INPUTS: costed compute ops), or they and its attributes are (ALL:
#: communication, annotations, markers; attributes are read for those only)
INPUTS, ALL = 1, 2


def _typed_op(n: _Node, want: int) -> HostOp:
    """A HostOp from a typed node. Where its attributes are not kept, rf_id and tid are read
    where PyTorch puts them (first and fifth attribute) if they are there; else, as from a dict,
    the last of each."""
    attrs = _ATTRS.decode(n.attrs)
    if want < ALL and len(attrs) > 4 and attrs[0].name == "rf_id" and attrs[4].name == "tid":
        rf, tid, kept = attrs[0].value, attrs[4].value, _NO_ATTRS
    else:
        kept = {a.name: a.value for a in attrs}
        rf, tid = kept.get("rf_id"), kept.get("tid")
    parent = n.ctrl_deps
    if type(parent) is not int:
        parent = (parent[0] if parent else 0) if isinstance(parent, list) else 0
    place = _TypedPlace(n)
    if want:
        i, o = _io(n.inputs), _io(n.outputs)
        ins, outs = (i.values, i.shapes, i.types), (o.values, o.shapes, o.types)
    else:
        ins = outs = _EMPTY
    op = _host_op(n.id, n.name, parent, rf, tid, ins, outs, _kept_attrs(kept, want, place), place)
    op.raw_inputs = n.inputs
    return op


class _TypedPlace(schema.Place):
    """A typed node's place, spelled out only for an error; the file is added as the error
    climbs (`_from_typed`)."""

    __slots__ = ("node",)

    def __init__(self, n: _Node):
        self.node = n

    def error(self, key: str, value: Any, want: str) -> InputError:
        self.path, self.record = "", f"node {self.node.id} ({self.node.name!r})"
        e = super().error(key, value, want)
        e.message = e.message[2:]  # no file yet: "node ..."
        return e


def _io(raw: msgspec.Raw) -> _IO:
    return _IO_DECODER.decode(raw)


def decode_inputs(op: HostOp) -> list:
    """The input values of an op whose inputs were kept raw; none if they are not
    {values, shapes, types} (an op the converter does not read: `_loose_list`)."""
    try:
        return _IO_DECODER.decode(op.raw_inputs).values
    except msgspec.ValidationError:
        return []


def _collect(trace: HostTrace, ops: list[HostOp]) -> HostTrace:
    """File the ops of a trace in id order: thread roots apart, the process-group list read."""
    ops.sort(key=attrgetter("id"))
    kept = trace.ops
    for op in ops:
        name = op.name
        if name.startswith(ROOT_MARK):
            trace.roots.add(op.id)
            continue
        kept.append(op)
        if name == PG_INIT:
            trace.pg_init_id = op.id
            trace.process_groups = _pg_list(op, trace.path)
    return trace
