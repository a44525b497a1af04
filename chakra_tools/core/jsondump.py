"""A rank set as one valid JSON document, and back, losslessly.

Chakra's own JSON dump is not valid JSON (one text-format protobuf after another). Ours is one
object, readable by any JSON tool, that converts back to byte-identical `.et` files:

    {"format": "chakra-tools-json/1", "prefix": "trace", "comm_groups": {"1": [0, 1]},
     "ranks": [{"rank": 0, "metadata": {"version": "0.0.4", "present": true, "attrs": [...]},
                "nodes": [{"id": 1, "name": "...", "type": "COMP_NODE", "data_deps": [],
                           "ctrl_deps": [], "start_time_micros": 0, "duration_micros": 5,
                           "inputs": null, "outputs": null,
                           "attrs": [{"name": "num_ops", "kind": "int64_val", "value": 10}]}]}]}

Every attribute keeps its oneof kind. Values JSON cannot hold are spelled out: bytes as base64
(`{"base64": "..."}`), non-finite floats as the strings "NaN", "Infinity", "-Infinity".

Reading (`rankset_from_json`, `load`) is the one decode of this document and trusts none of it:
the document may be hand-edited or damaged, and what it says becomes file names and wire-format
integers. Each field is checked where it enters, against what the `.et` protobuf can hold and
what the rank set's own readers accept (ranks 0..MAX_RANK, a prefix that is a plain file name,
comm-group members that are integer ranks), so that `json load` never writes a file its readers
refuse. A field left out takes the value the dump writes for an empty one; a key the format does
not have is refused (it would be dropped without a word). Every refusal is an InputError naming
the file and the key path: `trace.json: ranks[3].nodes[12].attrs[0].value is "x", not ...`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from pathlib import Path
from typing import Any, Callable

from .errors import InputError
from .commit import atomic_output
from .fields import array, obj, shown
from .files import read_json
from .graph import Graph, RankSet, _group_ranks
from .rankfiles import check_prefix
from .model import LIST_KINDS, MAX_RANK, SCALAR_KINDS, Attr, IOInfo, Metadata, Node, NodeType

FORMAT = "chakra-tools-json/1"
_FLOAT_KINDS = {"double_val", "float_val", "double_list", "float_list"}
_BYTES_KINDS = {"bytes_val", "bytes_list"}
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}

#: node ids, dependencies and times are uint64 on the wire
_UINT64 = (0, 2**64 - 1)
_INT32, _INT64, _UINT32 = (-(2**31), 2**31 - 1), (-(2**63), 2**63 - 1), (0, 2**32 - 1)
#: the integers each integer oneof kind holds (protobuf refuses others when the file is written)
_INT_RANGES = {"int32_val": _INT32, "sint32_val": _INT32, "sfixed32_val": _INT32,
               "int64_val": _INT64, "sint64_val": _INT64, "sfixed64_val": _INT64,
               "uint32_val": _UINT32, "fixed32_val": _UINT32, "uint64_val": _UINT64, "fixed64_val": _UINT64}
#: the longest prefix whose largest rank file name (`<prefix>.2147483647.et.gz`) fits in 255 bytes

_TOP_KEYS = ("format", "prefix", "comm_groups", "ranks")
_RANK_KEYS = ("rank", "metadata", "nodes")
_META_KEYS = ("version", "present", "attrs")
_NODE_KEYS = ("id", "name", "type", "data_deps", "ctrl_deps", "start_time_micros", "duration_micros",
              "inputs", "outputs", "attrs")
_ATTR_KEYS = ("name", "kind", "value", "doc")
_IO_KEYS = IOInfo._fields
#: the keys of an attribute `_plain_attr` takes without the full check (no doc)
_PLAIN_ATTR_KEYS = frozenset(("name", "kind", "value"))
_KEY_SETS = {keys: frozenset(keys) for keys in (_TOP_KEYS, _RANK_KEYS, _META_KEYS, _NODE_KEYS, _ATTR_KEYS,
                                                 _IO_KEYS, ("base64",))}


# -- writing --------------------------------------------------------------------------------------

def _encode_scalar(kind: str, v: Any) -> Any:
    if kind in _BYTES_KINDS:
        return {"base64": base64.b64encode(v).decode()}
    if kind in _FLOAT_KINDS and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


def _attrs_to_json(attrs) -> list[dict]:
    out = []
    for name, a in attrs.items():
        d: dict[str, Any] = {"name": name, "kind": a.kind}
        if a.kind is not None:
            d["value"] = ([_encode_scalar(a.kind, x) for x in a.value] if a.kind in LIST_KINDS
                          else _encode_scalar(a.kind, a.value))
        if a.doc:
            d["doc"] = a.doc
        out.append(d)
    return out


def _io(v: IOInfo | None):
    return None if v is None else v._asdict()


def node_to_json(n: Node) -> dict:
    return {"id": n.id, "name": n.name, "type": n.type.name, "data_deps": list(n.data_deps),
            "ctrl_deps": list(n.ctrl_deps), "start_time_micros": n.start_time_micros,
            "duration_micros": n.duration_micros, "inputs": _io(n.inputs), "outputs": _io(n.outputs),
            "attrs": _attrs_to_json(n.attrs)}


def rankset_to_json(rs: RankSet) -> dict:
    ranks = []
    for r, g in zip(rs.ranks, rs):
        meta = g.metadata
        ranks.append({"rank": r,
                      "metadata": {"version": meta.version, "present": meta.present,
                                   "attrs": _attrs_to_json(meta.attrs)},
                      "nodes": [node_to_json(n) for n in list(g) + g.duplicates]})
    return {"format": FORMAT, "prefix": rs.prefix,
            "comm_groups": {k: list(v) for k, v in rs.comm_groups.items()}, "ranks": ranks}


def dump(rs: RankSet, path: str | Path) -> None:
    """Write the JSON document atomically (valid JSON: `allow_nan=False`)."""
    with atomic_output(path, "w") as f:
        json.dump(rankset_to_json(rs), f, allow_nan=False)
        f.write("\n")


# -- reading: one typed decode, every field checked where it enters ------------------------------

def load(path: str | Path) -> RankSet:
    """The rank set of a document `dump` wrote (or one edited by hand); InputError naming the
    file and the key path for anything `json load` could not write as `.et` files its readers take."""
    return rankset_from_json(read_json(path, expect=None), str(path))


def rankset_from_json(doc: Any, source: str = "<json>") -> RankSet:
    """The rank set of a decoded document; InputError naming `source` and the key path."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        what = f"format {doc.get('format')!r}" if isinstance(doc, dict) else f"{shown(doc)}, not an object"
        raise InputError(f"{source}: not a chakra-tools JSON dump ({what}, expected format {FORMAT!r})")
    _known_keys(doc, source, "the document", _TOP_KEYS)
    prefix = check_prefix(doc.get("prefix", "trace"), f"{source}: prefix")
    groups = _comm_groups(doc.get("comm_groups", {}), source)
    graphs: dict[int, Graph] = {}
    where_of: dict[int, str] = {}
    for i, rd in enumerate(array(_required(doc, "ranks", source, "the document"), source, "ranks")):
        graph = _rank(rd, source, f"ranks[{i}]")
        if graph.rank in graphs:
            raise InputError(f"{source}: ranks[{i}].rank: rank {graph.rank} is also {where_of[graph.rank]}; "
                             "each rank appears once")
        graphs[graph.rank], where_of[graph.rank] = graph, f"ranks[{i}]"
    if not graphs:
        raise InputError(f"{source}: ranks is empty; a rank set has at least one rank")
    return RankSet(graphs, groups, prefix)


def _comm_groups(v: Any, source: str) -> dict[str, tuple[int, ...]]:
    """Group id -> member ranks, checked as comm_group.json is when read back (graph.py)."""
    groups = obj(v, source, "comm_groups")
    return {k: _group_ranks(members, f"{source}: comm_groups", k) for k, members in groups.items()}


def _rank(v: Any, source: str, where: str) -> Graph:
    d = obj(v, source, where)
    _known_keys(d, source, where, _RANK_KEYS)
    rank = _int(_required(d, "rank", source, where), source, f"{where}.rank", (0, MAX_RANK), "a rank")
    meta = _metadata(d.get("metadata", {}), source, f"{where}.metadata")
    nodes = array(_required(d, "nodes", source, where), source, f"{where}.nodes")
    decoded, first = [], {}
    for j, nd in enumerate(nodes):
        node = _node(nd, source, f"{where}.nodes[{j}]")
        if node.id in first:  # Graph.write keeps one node per id: the other would be lost
            raise InputError(f"{source}: {where}.nodes[{j}].id: node id {node.id} is also "
                             f"{where}.nodes[{first[node.id]}]'s; a rank file holds each id once")
        first[node.id] = j
        decoded.append(node)
    return Graph(decoded, rank=rank, metadata=meta, source=source)


def _metadata(v: Any, source: str, where: str) -> Metadata:
    d = obj(v, source, where)
    _known_keys(d, source, where, _META_KEYS)
    present = d.get("present", True)
    if type(present) is not bool:
        raise InputError(f"{source}: {where}.present is {shown(present)}, not true or false")
    return Metadata(_text(d.get("version", ""), source, f"{where}.version"),
                    _attrs(d.get("attrs", []), source, f"{where}.attrs"), present)


def _node(v: Any, source: str, where: str) -> Node:
    d = obj(v, source, where)
    _known_keys(d, source, where, _NODE_KEYS)
    node = Node(
        id=_int(_required(d, "id", source, where), source, f"{where}.id", _UINT64, "a node id"),
        name=_text(d.get("name", ""), source, f"{where}.name"),
        type=_node_type(_required(d, "type", source, where), source, f"{where}.type"),
        data_deps=_ids(d.get("data_deps", []), source, f"{where}.data_deps"),
        ctrl_deps=_ids(d.get("ctrl_deps", []), source, f"{where}.ctrl_deps"),
        start_time_micros=_int(d.get("start_time_micros", 0), source, f"{where}.start_time_micros",
                               _UINT64, "a time in microseconds"),
        duration_micros=_int(d.get("duration_micros", 0), source, f"{where}.duration_micros",
                             _UINT64, "a duration in microseconds"),
        attrs=_attrs(d.get("attrs", []), source, f"{where}.attrs"),
        inputs=_io_info(d.get("inputs"), source, f"{where}.inputs"),
        outputs=_io_info(d.get("outputs"), source, f"{where}.outputs"))
    if node == Node(0, "", NodeType.INVALID_NODE):
        raise InputError(f"{source}: {where}: a node with nothing set (id 0, no name, INVALID_NODE) "
                         "encodes to zero bytes, which readers take as the end of the file; give it "
                         "a name or a type")
    return node


def _node_type(v: Any, source: str, where: str) -> NodeType:
    if type(v) is not str or v not in NodeType.__members__:
        raise InputError(f"{source}: {where} is {shown(v)}, not a node type ({', '.join(NodeType.__members__)})")
    return NodeType[v]


def _ids(v: Any, source: str, where: str) -> tuple[int, ...]:
    if type(v) is list and all(type(x) is int and 0 <= x <= _UINT64[1] for x in v):
        return tuple(v)
    return tuple(_int(x, source, f"{where}[{i}]", _UINT64, "a node id")
                 for i, x in enumerate(array(v, source, where)))


def _io_info(v: Any, source: str, where: str) -> IOInfo | None:
    if v is None:
        return None
    d = obj(v, source, where)
    _known_keys(d, source, where, _IO_KEYS)
    return IOInfo(*(_text(d.get(k, ""), source, f"{where}.{k}") for k in _IO_KEYS))


def _attrs(v: Any, source: str, where: str) -> dict[str, Attr]:
    attrs: dict[str, Attr] = {}
    for i, item in enumerate(array(v, source, where)):
        if _plain_attr(item) and item["name"] not in attrs:  # most attributes: one call, no key paths
            attrs[item["name"]] = Attr(item["kind"], item["value"])
            continue
        at = f"{where}[{i}]"
        d = obj(item, source, at)
        _known_keys(d, source, at, _ATTR_KEYS)
        name = _text(_required(d, "name", source, at), source, f"{at}.name")
        if name in attrs:
            raise InputError(f"{source}: {at}.name: attribute {name!r} is given twice in {where}")
        attrs[name] = _attr(d, source, at)
    return attrs


def _plain_attr(d: Any) -> bool:
    """Whether `d` is an attribute `_attr` plainly takes as it is: an integer, bool or ASCII
    string value of its kind, no doc. A shortcut for what a dump holds most (the rest take the
    full check, which alone words the refusals)."""
    if type(d) is not dict or not d.keys() <= _PLAIN_ATTR_KEYS:
        return False
    name, kind, value = d.get("name"), d.get("kind"), d.get("value")
    if type(name) is not str or not name.isascii() or type(kind) is not str:
        return False
    bounds = _INT_RANGES.get(kind)
    if bounds is not None:
        return type(value) is int and bounds[0] <= value <= bounds[1]
    if kind == "bool_val":
        return type(value) is bool
    return kind == "string_val" and type(value) is str and value.isascii()


def _attr(d: dict, source: str, at: str) -> Attr:
    kind, doc = d.get("kind"), _text(d.get("doc", ""), source, f"{at}.doc")
    if kind is None:
        if d.get("value") is not None:
            raise InputError(f"{source}: {at}.value: a value without a kind (set {at}.kind)")
        return Attr(None, None, doc)
    if type(kind) is not str or (kind not in SCALAR_KINDS and kind not in LIST_KINDS):
        raise InputError(f"{source}: {at}.kind is {shown(kind)}, not an attribute kind "
                         f"(int64_val, string_list, ... or null)")
    value = _required(d, "value", source, at)
    if kind in LIST_KINDS:
        scalar = kind[: -len("_list")] + "_val"
        check = _SCALAR_CHECKS[scalar]
        return Attr(kind, tuple(check(x, source, f"{at}.value[{i}]", scalar)
                                for i, x in enumerate(array(value, source, f"{at}.value"))), doc)
    return Attr(kind, _SCALAR_CHECKS[kind](value, source, f"{at}.value", kind), doc)


# -- one value each: the value, or an InputError naming the file and the key path ----------------

def _int(v: Any, source: str, where: str, bounds: tuple[int, int], what: str) -> int:
    """An int in bounds (not a bool, float or digit string: JSON's 1.0 is no integer)."""
    lo, hi = bounds
    if type(v) is not int or not lo <= v <= hi:
        raise InputError(f"{source}: {where} is {shown(v)}, not {what} (an integer in {lo}..{hi})")
    return v


def _kind_int(v: Any, source: str, where: str, kind: str) -> int:
    return _int(v, source, where, _INT_RANGES[kind], f"a value of {kind}")


def _number(v: Any, source: str, where: str, kind: str) -> float:
    """A double: a JSON number, or "NaN", "Infinity", "-Infinity" as the dump spells them."""
    if type(v) is str and v in _SPECIAL:
        return _SPECIAL[v]
    if type(v) is int:
        try:
            return float(v)
        except OverflowError:
            pass
    elif type(v) is float and math.isfinite(v):
        return v
    raise InputError(f"{source}: {where} is {shown(v)}, not a value of {kind} (a finite number, or "
                     '"NaN", "Infinity", "-Infinity" as strings)')


def _float32(v: Any, source: str, where: str, kind: str) -> float:
    x = _number(v, source, where, kind)
    try:
        struct.pack("<f", x)
    except OverflowError:  # protobuf would store infinity without a word
        raise InputError(f"{source}: {where} is {shown(v)}, beyond what a {kind} holds "
                         "(a 32-bit float: at most 3.4028235e38 in size)") from None
    return x


def _bool(v: Any, source: str, where: str, kind: str) -> bool:
    if type(v) is not bool:
        raise InputError(f"{source}: {where} is {shown(v)}, not a value of {kind} (true or false)")
    return v


def _string(v: Any, source: str, where: str, kind: str = "") -> str:
    return _text(v, source, where)


def _bytes(v: Any, source: str, where: str, kind: str) -> bytes:
    d = obj(v, source, where)
    _known_keys(d, source, where, ("base64",))
    text = _text(_required(d, "base64", source, where), source, f"{where}.base64")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InputError(f"{source}: {where}.base64 is {shown(text)}, not base64") from None


_SCALAR_CHECKS: dict[str, Callable[[Any, str, str, str], Any]] = {
    **{k: _kind_int for k in _INT_RANGES}, "double_val": _number, "float_val": _float32,
    "bool_val": _bool, "string_val": _string, "bytes_val": _bytes}


def _text(v: Any, source: str, where: str) -> str:
    """A string protobuf can encode (UTF-8: JSON's "\\ud800" decodes to a lone surrogate)."""
    if type(v) is str and v.isascii():  # nearly every string: the rest are checked below
        return v
    if type(v) is not str:
        raise InputError(f"{source}: {where} is {shown(v)}, not a string")
    if not _utf8(v):
        raise InputError(f"{source}: {where} is {shown(v)}, not valid Unicode (a lone surrogate)")
    return v


def _utf8(s: str) -> bool:
    if s.isascii():
        return True
    try:
        s.encode()
    except UnicodeEncodeError:
        return False
    return True


def _required(d: dict, key: str, source: str, where: str) -> Any:
    if key not in d:
        raise InputError(f"{source}: {where} has no {key!r}")
    return d[key]


def _known_keys(d: dict, source: str, where: str, known: tuple[str, ...]) -> None:
    if d.keys() <= _KEY_SETS[known]:
        return
    unknown = [k for k in d if k not in known]
    if unknown:
        raise InputError(f"{source}: {where} has a key the format does not have: {unknown[0]!r} "
                         f"(it has {', '.join(known)})")
