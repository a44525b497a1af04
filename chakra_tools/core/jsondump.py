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
"""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path
from typing import Any

from .errors import InputError
from .etio import atomic_output
from .files import read_json
from .graph import Graph, RankSet
from .model import LIST_KINDS, SCALAR_KINDS, Attr, IOInfo, Metadata, Node, NodeType

FORMAT = "chakra-tools-json/1"
_FLOAT_KINDS = {"double_val", "float_val", "double_list", "float_list"}
_BYTES_KINDS = {"bytes_val", "bytes_list"}
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _encode_scalar(kind: str, v: Any) -> Any:
    if kind in _BYTES_KINDS:
        return {"base64": base64.b64encode(v).decode()}
    if kind in _FLOAT_KINDS and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


def _decode_scalar(kind: str, v: Any) -> Any:
    if kind in _BYTES_KINDS:
        return base64.b64decode(v["base64"])
    if kind in _FLOAT_KINDS and isinstance(v, str):
        return _SPECIAL[v]
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


def _attrs_from_json(items: list[dict]) -> dict[str, Attr]:
    attrs = {}
    for d in items:
        kind = d.get("kind")
        if kind is not None and kind not in SCALAR_KINDS and kind not in LIST_KINDS:
            raise ValueError(f"attribute {d.get('name')!r}: unknown kind {kind!r}")
        value = None
        if kind in LIST_KINDS:
            value = tuple(_decode_scalar(kind, x) for x in d["value"])
        elif kind is not None:
            value = _decode_scalar(kind, d["value"])
        attrs[d["name"]] = Attr(kind, value, d.get("doc", ""))
    return attrs


def _io(v: IOInfo | None):
    return None if v is None else v._asdict()


def node_to_json(n: Node) -> dict:
    return {"id": n.id, "name": n.name, "type": n.type.name, "data_deps": list(n.data_deps),
            "ctrl_deps": list(n.ctrl_deps), "start_time_micros": n.start_time_micros,
            "duration_micros": n.duration_micros, "inputs": _io(n.inputs), "outputs": _io(n.outputs),
            "attrs": _attrs_to_json(n.attrs)}


def node_from_json(d: dict) -> Node:
    io_in, io_out = d.get("inputs"), d.get("outputs")
    return Node(int(d["id"]), d.get("name", ""), NodeType[d["type"]], tuple(d.get("data_deps", ())),
                tuple(d.get("ctrl_deps", ())), d.get("start_time_micros", 0), d.get("duration_micros", 0),
                _attrs_from_json(d.get("attrs", [])),
                IOInfo(**io_in) if io_in is not None else None,
                IOInfo(**io_out) if io_out is not None else None)


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


def rankset_from_json(doc: dict, source: str = "<json>") -> RankSet:
    if doc.get("format") != FORMAT:
        raise InputError(f"{source}: not a chakra-tools JSON dump (format {doc.get('format')!r}, "
                         f"expected {FORMAT!r})")
    graphs = {}
    for rd in doc["ranks"]:
        rank = int(rd["rank"])
        try:
            nodes = [node_from_json(d) for d in rd["nodes"]]
            m = rd.get("metadata") or {}
            meta = Metadata(m.get("version", ""), _attrs_from_json(m.get("attrs", [])), m.get("present", True))
        except (KeyError, ValueError, TypeError) as e:
            raise InputError(f"{source}: rank {rank}: malformed node or metadata: {e}") from None
        graphs[rank] = Graph(nodes, rank=rank, metadata=meta, source=source)
    groups = {str(k): tuple(v) for k, v in doc.get("comm_groups", {}).items()}
    return RankSet(graphs, groups, doc.get("prefix", "trace"))


def dump(rs: RankSet, path: str | Path) -> None:
    """Write the JSON document atomically (valid JSON: `allow_nan=False`)."""
    with atomic_output(path, "w") as f:
        json.dump(rankset_to_json(rs), f, allow_nan=False)
        f.write("\n")


def load(path: str | Path) -> RankSet:
    return rankset_from_json(read_json(path), str(path))
