"""Reading PyTorch host execution traces (`ExecutionTraceObserver`) of every schema we know.

Schemas 1.0.1 (flat `inputs`/`input_shapes`/`input_types` and top-level `parent`, `rf_id`,
`tid`...) and 1.0.2 .. 1.1.1 (`inputs: {values, shapes, types}`, `ctrl_deps` = the caller,
`attrs: [{name, type, value}]`) are read into one record, `HostOp`. Node ids are handed out when
an op *starts* (the file lists ops when they end), so ascending id is the call order across
threads; the file order is not used.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from chakra_tools.core.errors import InputError

ROOT_MARK = "[pytorch|profiler|execution_"
PG_INIT = "## process_group:init ##"


class HostOp:
    """One host op: identity, caller, thread and its recorded inputs and outputs."""

    __slots__ = ("id", "name", "parent", "tid", "rf_id", "in_values", "in_shapes", "in_types",
                 "out_values", "out_shapes", "out_types", "attrs", "span")

    def __init__(self, id: int, name: str, parent: int, tid: int, rf_id: int | None,
                 inputs: tuple, outputs: tuple, attrs: dict):
        self.id, self.name, self.parent, self.tid, self.rf_id = id, name, parent, tid, rf_id
        self.in_values, self.in_shapes, self.in_types = inputs
        self.out_values, self.out_shapes, self.out_types = outputs
        self.attrs = attrs
        self.span: int | None = None  # fast path: where the node starts in HostTrace.raw

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
    #: the file's bytes while ops with undecoded inputs need them (fast path only); see readers.py
    raw: bytes | None = None
    #: (file offset, op id) of every node, in file order (fast path)
    spans: list = field(default_factory=list)

    def release(self) -> None:
        self.raw, self.spans = None, []

    @property
    def by_id(self) -> dict[int, HostOp]:
        return {op.id: op for op in self.ops}

    def by_id_cache(self) -> dict[int, HostOp]:
        """`by_id`, built once."""
        cache = self.__dict__.get("_by_id")
        if cache is None:
            cache = self.__dict__["_by_id"] = self.by_id
        return cache


def _triple(value: Any) -> tuple:
    return (value.get("values", []), value.get("shapes", []), value.get("types", []))


def _op_new(n: dict) -> HostOp:
    """A node of schema >= 1.0.2."""
    attrs = {a["name"]: a.get("value") for a in n.get("attrs", ())}
    parent = n.get("ctrl_deps", 0)
    if isinstance(parent, list):
        parent = parent[0] if parent else 0
    rf = attrs.get("rf_id")
    return HostOp(n["id"], n.get("name", ""), parent or 0, attrs.get("tid", 0) or 0, rf,
                  _triple(n.get("inputs") or {}), _triple(n.get("outputs") or {}), attrs)


def _op_old(n: dict) -> HostOp:
    """A node of schema 1.0.1: flat inputs, attributes as top-level keys."""
    return HostOp(n["id"], n.get("name", ""), n.get("parent", 0) or 0, n.get("tid", 0) or 0,
                  n.get("rf_id"),
                  (n.get("inputs", []), n.get("input_shapes", []), n.get("input_types", [])),
                  (n.get("outputs", []), n.get("output_shapes", []), n.get("output_types", [])),
                  n)


def parse_host(doc: Any, path: str) -> HostTrace:
    """Normalise a loaded host trace. Raises InputError if it is not one."""
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise InputError(f"{path}: not a PyTorch host execution trace (no 'nodes' list)")
    schema = str(doc.get("schema", ""))
    nodes = doc["nodes"]
    flat = schema.startswith("1.0.1") or any("parent" in n or isinstance(n.get("inputs"), list)
                                             for n in nodes[:8] if isinstance(n, dict))
    make = _op_old if flat else _op_new
    try:
        ops = [make(n) for n in nodes]
    except (KeyError, TypeError, AttributeError) as e:
        raise InputError(f"{path}: malformed host trace node ({type(e).__name__}: {e})") from None
    return _collect(HostTrace(path, schema, []), ops)


def _pg_list(op: HostOp, path: str) -> list[dict]:
    """The process-group list of a `## process_group:init ##` node (a JSON string input)."""
    for v in op.in_values:
        if isinstance(v, str) and v.startswith("["):
            try:
                groups = json.loads(v)
            except json.JSONDecodeError:
                raise InputError(f"{path}: node {op.id} ({PG_INIT!r}): unreadable group list") from None
            return [g for g in groups if isinstance(g, dict)]
    return []


# --------------------------------------------------------------------------------------------
# fast path: the layout PyTorch's ExecutionTraceObserver writes (schema >= 1.0.2)
# --------------------------------------------------------------------------------------------
#
# Each node is five lines: `{`, `"id": N, "name": "...", "ctrl_deps": P,`, then one line each
# for inputs, outputs and attrs. Scanning that layout with one regular expression and decoding
# only what a node needs (ids, name, caller, rf_id, tid; its inputs/outputs only for ops the
# converter looks into) is ~10x faster than building the whole JSON document and needs a
# fraction of its memory. The scan must account for every node (`"ctrl_deps": ` count), else the
# file is parsed as plain JSON.

_NODE = re.compile(rb'\{\n[ \t]*"id": (\d+), "name": "((?:[^"\\\n]|\\.)*)", "ctrl_deps": (\d+),\n'
                   rb'[ \t]*"inputs": ([^\n]*),\n[ \t]*"outputs": ([^\n]*),\n'
                   rb'[ \t]*"attrs": \[\{"name": "rf_id", "type": "\w+", "value": (\d+)\},'
                   rb'\{"name": "fw_parent", "type": "\w+", "value": -?\d+\},'
                   rb'\{"name": "seq_id", "type": "\w+", "value": -?\d+\},'
                   rb'\{"name": "scope", "type": "\w+", "value": -?\d+\},'
                   rb'\{"name": "tid", "type": "\w+", "value": (\d+)\}')
_DECODER = json.JSONDecoder()
_SCHEMA = re.compile(rb'"schema": "([^"\n]*)"')
_EMPTY = ((), (), ())


def parse_host_bytes(data: bytes, path: str, needs_args: Callable[[str], bool]) -> HostTrace:
    """A host trace from the file's bytes: the fast layout scan when it applies, else JSON.

    `needs_args(name)` says which ops get their inputs and outputs decoded (the others keep only
    their position in `data`, for `first_readers`).
    """
    from .jsonio import parse_json_bytes, repair_names, unescaped_annotations

    if unescaped_annotations(data):
        data = repair_names(data)
    fast = _parse_fast(data, path, needs_args)
    if fast is not None:
        return fast

    return parse_host(parse_json_bytes(data, path), path)


def _parse_fast(data: bytes, path: str, needs_args) -> HostTrace | None:
    head = _SCHEMA.search(data, 0, 4096)
    if head is None or head.group(1).startswith(b"1.0.1"):
        return None
    expected = data.count(b'"ctrl_deps": ')
    names: dict[bytes, str] = {}
    wanted: dict[str, bool] = {}
    ops = []
    append = ops.append
    end = 0
    for m in _NODE.finditer(data):
        end = m.end()
        nid, raw, parent, rf, tid = m.group(1, 2, 3, 6, 7)
        name = names.get(raw)
        if name is None:
            name = names[raw] = json.loads(b'"' + raw + b'"') if b"\\" in raw else raw.decode()
            wanted[name] = needs_args(name)
        if wanted[name]:
            i, o = _DECODER.decode(m.group(4).decode()), _DECODER.decode(m.group(5).decode())
            op = HostOp(int(nid), name, int(parent), int(tid), int(rf),
                        (i.get("values", []), i.get("shapes", []), i.get("types", [])),
                        (o.get("values", []), o.get("shapes", []), o.get("types", [])), _NO_ATTRS)
        else:
            op = HostOp(int(nid), name, int(parent), int(tid), int(rf), _EMPTY, _EMPTY, _NO_ATTRS)
        op.span = m.start()
        append(op)
    if len(ops) != expected or not ops or not _complete(data, end):
        return None
    return _assemble(path, head.group(1).decode(), ops, data)


_NO_ATTRS: dict = {}


def _complete(data: bytes, last: int) -> bool:
    """Whether the document closes after its last node (a cut file goes to the JSON parser,
    which says where it ends)."""
    return data.find(b"]", last) >= 0 and data.rstrip().endswith(b"}")


def _assemble(path: str, schema: str, ops: list[HostOp], data: bytes) -> HostTrace:
    trace = HostTrace(path, schema, [])
    trace.raw = data
    trace.spans = sorted((op.span, op.id) for op in ops)
    return _collect(trace, ops)


def _collect(trace: HostTrace, ops: list[HostOp]) -> HostTrace:
    """File the ops of a trace in id order: thread roots apart, the process-group list read."""
    ops.sort(key=lambda op: op.id)
    for op in ops:
        if op.name.startswith(ROOT_MARK):
            trace.roots.add(op.id)
        else:
            trace.ops.append(op)
            if op.name == PG_INIT:
                trace.pg_init_id = op.id
                trace.process_groups = _pg_list(op, trace.path)
    return trace
