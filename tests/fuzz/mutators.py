"""Mutators: one valid input in, one damaged input out, driven by a `random.Random`.

Each input kind has its own family (bytes, JSON trees, YAML, text workloads, `.et` protobuf
frames, ONNX models); every mutator is a pure function of (rng, input) so that a case is
reproduced from its seed alone. They damage the way real inputs go wrong: truncation and flipped
bytes, values of the wrong type, huge, negative and non-finite numbers, missing keys, deep
nesting, duplicate ids, cycles, corrupt gzip streams.

Beside the blind tree mutators, targeted ones know where a document keeps what matters: numbers
past 2**64 inside nested fields, bare `NaN`/`Infinity`/`1e400` tokens, NUL and lone surrogates in
names, nested Kineto `args` and host-trace fields of another type, `parent` cycles, duplicate
ids, hostile output prefixes in a JSON rank-set document, and legacy (2023) `.et` fields.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import random
import re
from typing import Any, Callable

# --------------------------------------------------------------------------------------------
# bytes
# --------------------------------------------------------------------------------------------


def flip_bytes(rng: random.Random, data: bytes) -> bytes:
    """1-4 bytes set to random values."""
    if not data:
        return b"\xff"
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


def truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(max(1, len(data)))]


def splice_junk(rng: random.Random, data: bytes) -> bytes:
    """Random bytes (invalid UTF-8 among them) inserted somewhere."""
    at = rng.randrange(len(data) + 1)
    junk = bytes(rng.choice([0x00, 0xFF, 0xFE, 0x80, 0xC3, rng.randrange(256)]) for _ in range(rng.randint(1, 8)))
    return data[:at] + junk + data[at:]


BYTE_MUTATORS = (flip_bytes, truncate, splice_junk)


def mutate_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    m = rng.choice(BYTE_MUTATORS)
    return m(rng, data), m.__name__


def corrupt_gzip(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """A gzip stream damaged inside the deflate data, in its trailer, or cut short."""
    z = gzip.compress(data, mtime=0)
    how = rng.choice(("deflate", "trailer", "cut"))
    if how == "cut":
        return z[: rng.randrange(10, max(11, len(z) - 1))], "gzip cut short"
    b = bytearray(z)
    at = rng.randrange(10, max(11, len(b) - 8)) if how == "deflate" else len(b) - rng.randint(1, 8)
    b[at] ^= rng.randrange(1, 256)
    return bytes(b), f"gzip {how} byte flipped"


# --------------------------------------------------------------------------------------------
# JSON-like trees
# --------------------------------------------------------------------------------------------

#: a marker the serializer replaces by a deeply nested document (json.dumps itself recurses)
DEEP = "\u0000deep\u0000"
_RAW = "\u0000raw:"
_RAW_RE = re.compile(r'"\\u0000raw:([^"\\]*)\\u0000"')


def raw(token: str) -> str:
    """A marker `dump_json` writes as the bare JSON token `token` (`1e400`, `NaN`, `-Infinity`):
    what json.dumps cannot spell from a Python value."""
    return f"{_RAW}{token}\u0000"


HUGE_INTS = (2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 2**64 + 1, 10**30, -1, -(2**63) - 1, -(10**20), 0)
ODD_FLOATS = (math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, 0.5, -0.0, 1e24)
ODD_STRINGS = ("", "x", "²", "-1", "1e400", "NaN", "\u202e", "é" * 3, "null", "0x10", " 4 ", "a" * 300)


def random_value(rng: random.Random) -> Any:
    """A value of a random type, often an awkward one."""
    return rng.choice((
        lambda: rng.choice(HUGE_INTS),
        lambda: rng.choice(ODD_FLOATS),
        lambda: rng.choice(ODD_STRINGS),
        lambda: None,
        lambda: rng.choice((True, False)),
        lambda: [],
        lambda: {},
        lambda: [rng.choice(HUGE_INTS), "x"],
        lambda: {"x": rng.choice(HUGE_INTS)},
        lambda: DEEP,
    ))()


def _pick(rng: random.Random, doc: Any) -> tuple[Any, Any] | None:
    """A random (container, key) inside `doc`, reached by a random walk from the root."""
    parent, key, node = None, None, doc
    depth = 0
    while isinstance(node, (dict, list)) and node:
        keys = list(node.keys()) if isinstance(node, dict) else range(len(node))
        k = rng.choice(list(keys)) if isinstance(node, dict) else rng.randrange(len(node))
        parent, key, node = node, k, node[k]
        depth += 1
        if not isinstance(node, (dict, list)) or rng.random() < 0.25:
            break
    return None if parent is None else (parent, key)


def swap_type(rng, doc):
    p = _pick(rng, doc)
    if p:
        c, k = p
        c[k] = random_value(rng)
        return f"value at {k!r} -> {c[k]!r:.40}"
    return "nothing to swap"


def odd_number(rng, doc):
    p = _pick(rng, doc)
    if p:
        c, k = p
        c[k] = rng.choice(HUGE_INTS + ODD_FLOATS)
        return f"number at {k!r} -> {c[k]!r}"
    return "no number"


def drop_key(rng, doc):
    p = _pick(rng, doc)
    if p:
        c, k = p
        del c[k]
        return f"dropped {k!r}"
    return "nothing to drop"


def duplicate_item(rng, doc):
    p = _pick(rng, doc)
    if p and isinstance(p[0], list):
        c, k = p
        c.insert(k, copy.deepcopy(c[k]))
        return f"duplicated item {k}"
    if p:
        c, k = p
        c[k] = [c[k], c[k]]
        return f"{k!r} doubled into a list"
    return "nothing to duplicate"


def deep_nest(rng, doc):
    p = _pick(rng, doc)
    if p:
        c, k = p
        c[k] = DEEP
        return f"{k!r} -> deeply nested"
    return "nothing to nest"


def empty_container(rng, doc):
    p = _pick(rng, doc)
    if p:
        c, k = p
        c[k] = rng.choice(([], {}, ""))
        return f"{k!r} emptied"
    return "nothing to empty"


JSON_MUTATORS: tuple[Callable, ...] = (swap_type, swap_type, odd_number, odd_number, drop_key, duplicate_item,
                                      deep_nest, empty_container)


def mutate_tree(rng: random.Random, doc: Any, n: int | None = None) -> tuple[Any, str]:
    """1-3 tree mutations of `doc` (in place when it is a container; the result is returned)."""
    if not isinstance(doc, (dict, list)) or not doc:
        return random_value(rng), "document replaced"
    notes = []
    for _ in range(n or rng.randint(1, 3)):
        m = rng.choice(JSON_MUTATORS)
        notes.append(m(rng, doc))
    return doc, "; ".join(notes)


def dump_json(rng: random.Random, doc: Any) -> bytes:
    """JSON text (NaN/Infinity literals allowed), DEEP markers replaced by 2,000-20,000 nested
    arrays or objects, `raw` markers by their bare tokens."""
    text = _RAW_RE.sub(r"\1", json.dumps(doc, allow_nan=True, default=str))
    marker = json.dumps(DEEP)
    while marker in text:
        n = rng.choice((2000, 5000, 20000))
        inner = ("[" * n + "]" * n) if rng.random() < 0.5 else ('{"a":' * n + "1" + "}" * n)
        text = text.replace(marker, inner, 1)
    return text.encode()


def mutate_json_bytes(rng: random.Random, doc: Any, *, gz: bool = False) -> tuple[bytes, str]:
    """A mutated serialization of `doc` (which is changed in place): mostly tree mutations, some
    byte damage; gzip-compressed when `gz`, sometimes with the gzip stream itself corrupted."""
    r = rng.random()
    if r < 0.75:
        doc, what = mutate_tree(rng, doc)
        data = dump_json(rng, doc)
    else:
        data, what = mutate_bytes(rng, json.dumps(doc).encode())
    if gz:
        if rng.random() < 0.2:
            return corrupt_gzip(rng, data)
        data = gzip.compress(data, mtime=0)
    return data, what


# --------------------------------------------------------------------------------------------
# targeted JSON mutations: inside one item (a host node, a Kineto event, a rank-set node)
# --------------------------------------------------------------------------------------------

#: numbers past what uint64 holds, and below what int64 holds, for nested fields
PAST_64 = (2**64, 2**64 + 1, 2**70, 10**30, -(2**63) - 1, -(2**64))
#: bare JSON tokens Python's json reads as non-finite floats (`1e400` overflows to inf)
NONFINITE_TOKENS = ("NaN", "Infinity", "-Infinity", "1e400", "-1e400")
#: names with NUL, a lone surrogate, astral, bidi, combining, path and control characters
ODD_NAMES = ("a\x00b", "\x00", "\ud800", "名前", "\U0001f600" * 3, "\u202eevil", "a/b", "..", "\n",
             "e\u0301", "", "\x7f\x1b[31m")


def _leaves(item: Any, want: Callable[[Any, Any], bool]) -> list[tuple[Any, Any, str]]:
    """(container, key, path) of every value under `item` for which want(key, value), found with
    an explicit stack (a document may be deep); containers count as values too."""
    out, stack = [], [(item, "")]
    while stack:
        node, path = stack.pop()
        for k, v in (node.items() if isinstance(node, dict) else enumerate(node)):
            here = f"{path}.{k}" if isinstance(node, dict) else f"{path}[{k}]"
            if want(k, v):
                out.append((node, k, here))
            if isinstance(v, (dict, list)):
                stack.append((v, here))
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _set_leaf(rng, item, want, values, what: str) -> str:
    found = _leaves(item, want) if isinstance(item, (dict, list)) else []
    if not found:
        return f"no {what}"
    c, k, path = rng.choice(found)
    c[k] = rng.choice(values)
    return f"{path.lstrip('.')} -> {_shown(c[k])}"


def _shown(v: Any) -> str:
    """A value as a case's description shows it: raw markers as their bare tokens."""
    return re.sub(r"'\\x00raw:([^'\\]*)\\x00'", r"\1", repr(v))[:40]


def past_64(rng, item) -> str:
    """A nested number past 2**64 or below -2**63."""
    return _set_leaf(rng, item, lambda k, v: _is_number(v), PAST_64, "number")


def nonfinite(rng, item) -> str:
    """A nested number written as a bare NaN, Infinity or 1e400 token."""
    return _set_leaf(rng, item, lambda k, v: _is_number(v), [raw(t) for t in NONFINITE_TOKENS], "number")


def odd_name(rng, item) -> str:
    """A name (any string under a key with "name" in it, else any string) with NUL, a lone
    surrogate, bidi or control characters."""
    named = lambda k, v: isinstance(v, str) and "name" in str(k).lower()  # noqa: E731
    if isinstance(item, (dict, list)) and not _leaves(item, named):
        named = lambda k, v: isinstance(v, str)  # noqa: E731
    return _set_leaf(rng, item, named, ODD_NAMES, "name")


def other_type(rng: random.Random, v: Any) -> Any:
    """A value of another JSON type than `v`."""
    if isinstance(v, list):
        return rng.choice((0, "x", {}, None, {"x": 1}, True))
    if isinstance(v, dict):
        return rng.choice(([], 0, "x", None, [v]))
    if isinstance(v, bool) or v is None:
        return rng.choice(("true", 2, [], {}))
    if _is_number(v):
        return rng.choice(("x", str(v), [], {}, None, [v], True))
    return rng.choice((0, [], {}, None, [v], 1.5))


def swap_nested(rng, item) -> str:
    """A value inside `item` (a leaf or a container, at any depth) of another type."""
    found = _leaves(item, lambda k, v: True) if isinstance(item, (dict, list)) else []
    if not found:
        return "nothing nested"
    c, k, path = rng.choice(found)
    c[k] = other_type(rng, c[k])
    return f"{path.lstrip('.')} -> {_shown(c[k])}"


def duplicate_id(rng, items: list, key: str = "id") -> str:
    """One item's `key` set to another's."""
    having = [x for x in items if isinstance(x, dict) and key in x]
    if len(having) < 2:
        return f"no two {key}s"
    a, b = rng.sample(having, 2)
    a[key] = b[key]
    return f"{key} {_shown(b[key])} twice"


ITEM_MUTATORS: tuple[Callable, ...] = (past_64, nonfinite, odd_name, swap_nested, swap_nested)


# --------------------------------------------------------------------------------------------
# PyTorch host traces and Kineto traces
# --------------------------------------------------------------------------------------------


def parent_cycle(rng: random.Random, nodes: list) -> str:
    """A host node's `parent` set to one of its descendants (or to itself): a caller loop."""
    nodes = [n for n in nodes if isinstance(n, dict) and "id" in n]
    children: dict[Any, list] = {}
    for n in nodes:
        children.setdefault(n.get("parent"), []).append(n)
    callers = [n for n in nodes if children.get(n["id"])]
    if not callers or rng.random() < 0.15:
        n = rng.choice(nodes)
        n["parent"] = n["id"]
        return f"node {n['id']}: its own parent"
    n = rng.choice(callers)
    below, seen, stack = [], {n["id"]}, list(children[n["id"]])
    while stack:
        c = stack.pop()
        if c["id"] in seen:
            continue
        seen.add(c["id"])
        below.append(c)
        stack.extend(children.get(c["id"], ()))
    d = rng.choice(below)
    n["parent"] = d["id"]
    return f"node {n['id']}: parent -> its descendant {d['id']} (a cycle)"


def mutate_host_trace(rng: random.Random, doc: dict) -> str:
    """A targeted damage to a host trace: a parent cycle, a duplicate id, or one node's nested
    field (inputs, shapes, types, attrs) of another type, past 2**64, non-finite, oddly named."""
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, list) or not nodes:
        return mutate_tree(rng, doc)[1]
    how = rng.choice(("cycle", "cycle", "dup-id", "item", "item", "item"))
    if how == "cycle":
        return parent_cycle(rng, nodes)
    if how == "dup-id":
        return "nodes: " + duplicate_id(rng, nodes)
    n = rng.choice(nodes)
    return f"node {n.get('id')!r:.20}: " + rng.choice(ITEM_MUTATORS)(rng, n)


#: Kineto `args` the converter reads, and values of the wrong type or range for each
KINETO_ARGS = {
    "Input Dims": (0, "x", {}, [0], [[-1]], [[2**64]], [["x"]], [None], [[raw("1e400")]], [{}], [[[1]]]),
    "Input type": ({}, 0, [0], [{}], [None], "float", [["float"]], [raw("NaN")]),
    "Input Strides": (0, [[-1]], [{}], "x"),
    "Concrete Inputs": (0, {}, [{}], ["", 2**64], [[]], "x"),
    "External id": ("x", 2**64, -1, 1.5, {}, None, raw("1e400")),
    "Record function id": ("x", 2**64, -1, [], None),
    "correlation": ("x", 2**64, -(2**63) - 1, {}, raw("NaN")),
    "stream": ("x", 2**64, -1, [], None, 1.5),
    "device": ("x", 2**64, -1, {}, None),
    "Sequence number": ("x", 2**64, {}, raw("Infinity")),
    "Fwd thread id": ("x", 2**64, []),
    "Collective name": (0, {}, "", "all_reduce\x00"),
    "In msg nelems": ("x", -1, 2**64, raw("1e400")),
    "Out msg nelems": ("x", -1, 2**64),
    "Group size": (0, -1, 2**64, "x"),
    "Process Group Ranks": ("[0, 1", [0], 0, "[2**64]", "[-1, 0]", "x"),
    "Process Group Name": (0, {}, "\x00", ""),
    "dtype": (0, {}, "\ud800"),
}
#: top-level fields of a Kineto event, and wrong values for them
KINETO_FIELDS = {"ts": (raw("1e400"), raw("NaN"), "x", -1, 2**64, None), "dur": (-1, 2**64, raw("Infinity"), "x"),
                 "pid": ({}, "x", 2**64, None), "tid": ({}, [1], 2**64, None), "ph": (0, "", "Z", None),
                 "name": ODD_NAMES + (0, None), "cat": (0, "", None), "id": ("x", 2**64, {}), "args": ("x", [], 0, None)}


def mutate_kineto_trace(rng: random.Random, doc: dict) -> str:
    """A targeted damage to a Kineto trace: an event's `args` entry (`Input Dims` as 0, `Input
    type` as an object, ...) or top-level field of the wrong type or range, a duplicate
    correlation or External id, or a nested value in distributedInfo."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list) or not events:
        return mutate_tree(rng, doc)[1]
    events = [e for e in events if isinstance(e, dict)] or [{}]
    how = rng.choice(("args", "args", "args", "field", "dup", "item", "dist"))
    ops = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation", "kernel", "cuda_runtime",
                                                   "gpu_memcpy", "ac2g")] or events
    e = rng.choice(ops)
    if how == "args":
        key = rng.choice(list(KINETO_ARGS))
        if not isinstance(e.get("args"), dict):
            e["args"] = {}
        e["args"][key] = rng.choice(KINETO_ARGS[key])
        return f"{e.get('name')!r:.30}: args[{key!r}] -> {_shown(e['args'][key])}"
    if how == "field":
        key = rng.choice(list(KINETO_FIELDS))
        e[key] = rng.choice(KINETO_FIELDS[key])
        return f"{e.get('name')!r:.30}: {key} -> {_shown(e[key])}"
    if how == "dup":
        key = rng.choice(("External id", "correlation"))
        having = [x["args"] for x in events if isinstance(x.get("args"), dict) and key in x["args"]]
        return "args: " + duplicate_id(rng, having, key)
    if how == "dist" and isinstance(doc.get("distributedInfo"), dict):
        return "distributedInfo: " + rng.choice(ITEM_MUTATORS)(rng, doc["distributedInfo"])
    return f"{e.get('name')!r:.30}: " + rng.choice(ITEM_MUTATORS)(rng, e)


# --------------------------------------------------------------------------------------------
# a rank set as one JSON document (`chakra-tools json dump`)
# --------------------------------------------------------------------------------------------


def hostile_prefixes(outside: str) -> tuple[str, ...]:
    """File prefixes that leave the output folder or are no file name: relative climbs (at most
    three levels, so they stay inside the harness's case box), an absolute one into the
    sentinel folder `outside` (never a real system path), empty, dots, a slash, NUL."""
    return ("../x", "../../x", "../../../x", f"{outside}/abs", f"{outside}/", "", ".", "..", "a/b", "sub/",
            "a\x00b", "x/../../y")


RANKS_ODD = (-1, "x", raw("1e400"), 2**64, 2**63, 2**31, 1.5, None, True, [0])
MEMBERS_ODD = ([0.0, 1.0], [1.5], [0, 0], [0, 0, 1], [-1, 0], [2**64], [raw("1e400")], "0,1", 0, [None], [[0]],
               [], {"0": 1})
IDS_ODD = PAST_64 + (raw("1e400"), raw("NaN"), "1", 1.5, None, -1, True)
ATTR_VALUES_ODD = (2**64, -(2**63) - 1, "x", 1.5, raw("NaN"), raw("1e400"), [1], {}, None, {"base64": "!!"},
                   {"base64": 0}, "nan", [raw("Infinity")])


def _doc_ranks(doc) -> list:
    ranks = doc.get("ranks") if isinstance(doc, dict) else None
    return [r for r in ranks if isinstance(r, dict)] if isinstance(ranks, list) else []


def _doc_nodes(doc) -> list:
    return [n for r in _doc_ranks(doc) if isinstance(r.get("nodes"), list) for n in r["nodes"]
            if isinstance(n, dict)]


#: prefixes that are odd but plain file names: a load writes them
ODD_PREFIXES = ("x.y", "名前", "a b", "-x", "x" * 200, "CON")


def _rd_prefix(rng, doc, outside):
    doc["prefix"] = rng.choice(hostile_prefixes(outside) if rng.random() < 0.7 else ODD_PREFIXES)
    return f"prefix -> {doc['prefix']!r}"


def _rd_rank(rng, doc, outside):
    r = rng.choice(_doc_ranks(doc))
    r["rank"] = rng.choice(RANKS_ODD)
    return f"a rank -> {_shown(r['rank'])}"


def _rd_rank_twice(rng, doc, outside):
    return "ranks: " + duplicate_id(rng, _doc_ranks(doc), "rank")


def _rd_null(rng, doc, outside):
    ranks = doc["ranks"]
    if rng.random() < 0.5:
        ranks[rng.randrange(len(ranks))] = None
        return "a rank -> null"
    r = rng.choice(_doc_ranks(doc))
    if isinstance(r.get("nodes"), list) and r["nodes"]:
        r["nodes"][rng.randrange(len(r["nodes"]))] = None
        return f"rank {_shown(r.get('rank'))}: a node -> null"
    r["nodes"] = None
    return f"rank {_shown(r.get('rank'))}: nodes -> null"


def _rd_members(rng, doc, outside):
    groups = doc.get("comm_groups")
    if not isinstance(groups, dict):
        groups = doc["comm_groups"] = {}
    key = rng.choice(list(groups) + ["1"])
    groups[key] = rng.choice(MEMBERS_ODD)
    return f"comm group {key!r}: members -> {_shown(groups[key])}"


def _rd_shape(rng, doc, outside):
    where = rng.choice(("comm_groups", "metadata", "ranks", "nodes", "format"))
    if where == "comm_groups":
        doc["comm_groups"] = rng.choice(([[0, 1]], "x", None, 0))
        return f"comm_groups -> {doc['comm_groups']!r}"
    if where == "format":
        doc["format"] = rng.choice(("chakra-tools-json/2", None, 1, ""))
        return f"format -> {doc['format']!r}"
    if where == "ranks":
        doc["ranks"] = rng.choice(({}, "x", None, [[]], [1]))
        return f"ranks -> {doc['ranks']!r}"
    r = rng.choice(_doc_ranks(doc))
    r[where] = rng.choice(([], "x", 0, None) if where == "metadata" else ({}, "x", 0))
    return f"rank {_shown(r.get('rank'))}: {where} -> {r[where]!r}"


def _rd_node_id(rng, doc, outside):
    n = rng.choice(_doc_nodes(doc))
    key = rng.choice(("id", "id", "data_deps", "ctrl_deps"))
    n[key] = rng.choice(IDS_ODD) if key == "id" else [rng.choice(IDS_ODD)]
    return f"node: {key} -> {_shown(n[key])}"


def _rd_node_twice(rng, doc, outside):
    r = rng.choice([r for r in _doc_ranks(doc) if isinstance(r.get("nodes"), list)] or [{"nodes": []}])
    if len(r["nodes"]) > 1:
        return f"rank {_shown(r.get('rank'))}: " + duplicate_id(rng, r["nodes"])
    r["nodes"] = r["nodes"] * 2
    return f"rank {_shown(r.get('rank'))}: its node twice"


def _rd_attrs(rng, doc, outside):
    holders = _doc_nodes(doc) + [r["metadata"] for r in _doc_ranks(doc) if isinstance(r.get("metadata"), dict)]
    h = rng.choice(holders)
    attrs = h.get("attrs")
    how = rng.choice(("string", "value", "value", "kind", "name"))
    if how == "string" or not isinstance(attrs, list) or not attrs or not isinstance(attrs[0], dict):
        h["attrs"] = rng.choice(("x", {"a": 1}, 0, [None], ["x"]))
        return f"attrs -> {h['attrs']!r}"
    a = rng.choice([x for x in attrs if isinstance(x, dict)])
    if how == "value":
        a["value"] = rng.choice(ATTR_VALUES_ODD)
        return f"attr {a.get('name')!r} ({a.get('kind')}): value -> {_shown(a['value'])}"
    if how == "kind":
        a["kind"] = rng.choice(("int8_val", 0, None, "bytes_val", "double_list", "string_val", ""))
        return f"attr {a.get('name')!r}: kind -> {a['kind']!r}"
    a["name"] = rng.choice(ODD_NAMES + (None, 0))
    return f"attr name -> {a['name']!r}"


def _rd_node_field(rng, doc, outside):
    n = rng.choice(_doc_nodes(doc))
    key = rng.choice(("type", "inputs", "outputs", "start_time_micros", "duration_micros", "name"))
    n[key] = rng.choice({"type": ("FOO", 4, None, "INVALID_NODE", ""), "inputs": ({"x": 1}, "x", [1], {}),
                         "outputs": ({"values": 1}, 0), "name": ODD_NAMES + (None, 0)}.get(
                             key, IDS_ODD + ("x",)))
    return f"node {_shown(n.get('id'))}: {key} -> {_shown(n[key])}"


def _rd_item(rng, doc, outside):
    n = rng.choice(_doc_nodes(doc))
    return f"node {_shown(n.get('id'))}: " + rng.choice(ITEM_MUTATORS)(rng, n)


RANKSET_DOC_MUTATORS: tuple[Callable, ...] = (_rd_prefix, _rd_prefix, _rd_rank, _rd_rank_twice, _rd_null,
                                             _rd_members, _rd_members, _rd_shape, _rd_node_id, _rd_node_twice,
                                             _rd_attrs, _rd_attrs, _rd_node_field, _rd_item)


def mutate_rankset_doc(rng: random.Random, doc: dict, outside: str) -> str:
    """1-2 targeted damages to a `json dump` document (changed in place): hostile prefixes
    (`outside`: the sentinel folder an absolute one points into), odd ranks, comm-group members
    and node ids, duplicates, nulls, attrs and containers of another type."""
    notes = []
    for _ in range(rng.choice((1, 1, 2))):
        if not _doc_ranks(doc) or not _doc_nodes(doc):
            notes.append(_rd_prefix(rng, doc, outside) if isinstance(doc, dict) else "no document")
            continue
        notes.append(rng.choice(RANKSET_DOC_MUTATORS)(rng, doc, outside))
    return "; ".join(notes)


# --------------------------------------------------------------------------------------------
# YAML (network configs)
# --------------------------------------------------------------------------------------------


def mutate_yaml(rng: random.Random, text: str) -> tuple[bytes, str]:
    import yaml

    r = rng.random()
    if r < 0.2:
        return mutate_bytes(rng, text.encode())
    if r < 0.3:
        n = rng.choice((2000, 20000))
        return (text + f"\nextra: {'[' * n}{']' * n}\n").encode(), "deeply nested value"
    if r < 0.4:
        key = rng.choice([ln.split(":")[0] for ln in text.splitlines() if ":" in ln] or ["topology"])
        return (f"{key}: [ \xff\xfe ]\n" + text).encode("latin-1", "replace"), f"non-UTF-8 bytes in {key}"
    doc = yaml.safe_load(text)
    doc, what = mutate_tree(rng, doc)
    if _has_deep(doc):
        return dump_json(rng, doc), what + " (as JSON, which YAML reads)"
    return yaml.safe_dump(doc, default_flow_style=True).encode(), what


def _has_deep(doc) -> bool:
    return DEEP in json.dumps(doc, default=str)


# --------------------------------------------------------------------------------------------
# ASTRA-sim 1.0 text workloads
# --------------------------------------------------------------------------------------------

ODD_TOKENS = ("²", "-1", "0", "1e3", "1e400", "nan", "inf", "-5", "", "NONE", "ALLREDUCE", "ALLTOALL",
              "x", "99999999999999999999999", "4.5", "٣", "HYBRID_TRANSFORMER_FWD_IN_BCKWD")


def mutate_text_workload(rng: random.Random, text: str) -> tuple[bytes, str]:
    """Tokens replaced, dropped or added; rows dropped, doubled or cut; the count line changed;
    byte damage."""
    lines = text.splitlines()
    r = rng.random()
    if r < 0.15 or not lines:
        return mutate_bytes(rng, text.encode())
    i = rng.randrange(len(lines))
    toks = lines[i].split()
    how = rng.choice(("token", "token", "drop-token", "add-token", "drop-row", "dup-row", "count", "tabs",
                      "policy", "extra-columns"))
    if how == "token" and toks:
        j = rng.randrange(len(toks))
        toks[j] = rng.choice(ODD_TOKENS)
        lines[i] = " ".join(toks)
    elif how == "drop-token" and toks:
        del toks[rng.randrange(len(toks))]
        lines[i] = " ".join(toks)
    elif how == "add-token":
        toks.insert(rng.randrange(len(toks) + 1), rng.choice(ODD_TOKENS))
        lines[i] = " ".join(toks)
    elif how == "drop-row":
        del lines[i]
    elif how == "dup-row":
        lines.insert(i, lines[i])
    elif how == "policy":
        head = lines[0].split()
        head[0] = rng.choice(("MICRO", "DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_DLRM",
                              "HYBRID_TRANSFORMER", "HYBRID_CUSTOMIZED", "DISTRIBUTED_INFERENCE", "HYBRID_DLRM_ENHANCED"))
        lines[0] = " ".join(head)
        how += f" {head[0]}"
    elif how == "extra-columns" and toks:  # ASTRA-sim's two memory columns, or a layer's own policy
        lines[i] = " ".join(toks + rng.choice((["64", "64"], ["DATA"], ["HYBRID_TRANSFORMER"], ["x", "y", "z"])))
    elif how == "count" and len(lines) > 1:
        lines[1] = rng.choice(("0", "-1", "²", "100", "1.5", "", "3 4"))
    else:
        lines[i] = "\t".join(toks) + "\t\t"
    return ("\n".join(lines) + "\n").encode(), f"line {i + 1}: {how}"


# --------------------------------------------------------------------------------------------
# .et files (length-delimited protobuf frames: GlobalMetadata, then Nodes)
# --------------------------------------------------------------------------------------------


def read_frames(data: bytes) -> list[bytes]:
    """The frames of a valid `.et` file (the seeds are valid)."""
    from chakra_tools.core.framing import decode_varint

    out, pos = [], 0
    while pos < len(data):
        n, pos = decode_varint(data, pos)
        out.append(data[pos: pos + n])
        pos += n
    return out


def varint(n: int) -> bytes:
    """Protobuf's varint of a non-negative int (past 2**64 it runs over the 10 bytes a reader
    takes: one of the mutations)."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def write_frames(frames: list[bytes]) -> bytes:
    return b"".join(varint(len(f)) + f for f in frames)


U64_ODD = (0, 1, 7, 2**31, 2**32 + 5, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1)
ATTR_KINDS = ("int64_val", "uint64_val", "int32_val", "string_val", "bool_val", "double_val", "float_val",
              "int64_list", "bool_list", "string_list", "bytes_val", "sint64_val", "fixed64_val")


def _set_attr(rng, a, kind: str) -> None:
    if kind.endswith("_list"):
        vals = {"int64_list": [rng.choice((-1, 2**62, 0))], "bool_list": [True, False],
                "string_list": ["x", "²"]}[kind]
        getattr(a, kind).values.extend(vals)
    else:
        val = {"int64_val": rng.choice((-1, -(2**63), 2**63 - 1, 0)), "uint64_val": rng.choice(U64_ODD),
               "int32_val": rng.choice((-1, 2**31 - 1)), "string_val": rng.choice(ODD_STRINGS),
               "bool_val": True, "double_val": rng.choice(ODD_FLOATS), "float_val": rng.choice((math.nan, 3e38)),
               "bytes_val": b"\xff\x00", "sint64_val": rng.choice((-1, 2**62)),
               "fixed64_val": rng.choice(U64_ODD)}[kind]
        setattr(a, kind, val)


def _absent_id(rng: random.Random, ids: list[int]) -> int:
    """A uint64 id no node has: just past the largest, or (when an earlier mutation made that
    2**64 - 1) just below the smallest."""
    k = rng.randint(1, 1000)
    top, bottom = max(ids), min(ids)
    return top + k if top + k < 2**64 else max(bottom - k, 0) if bottom > 0 else next(
        x for x in range(1, len(ids) + 2) if x not in ids)


def mutate_node(rng: random.Random, nodes: list, i: int) -> str:
    """One field of nodes[i] (protobuf messages) damaged; may touch its neighbours (cycles,
    duplicate ids)."""
    n = nodes[i]
    ids = [m.id for m in nodes]
    how = rng.choice(("type", "id", "dup-id", "dep-missing", "dep-self", "cycle", "dep-huge", "attr-kind",
                      "attr-value", "attr-drop", "attr-dup", "time", "name", "drop-node", "dup-node"))
    if how == "type":
        n.type = rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, 2**31 - 1, -1))
    elif how == "id":
        n.id = rng.choice(U64_ODD)
    elif how == "dup-id" and len(nodes) > 1:
        n.id = rng.choice([x for j, x in enumerate(ids) if j != i] or [n.id])
    elif how == "dep-missing":
        n.data_deps.append(_absent_id(rng, ids))
    elif how == "dep-self":
        rng.choice((n.data_deps, n.ctrl_deps)).append(n.id)
    elif how == "cycle" and len(nodes) > 1:
        j = rng.randrange(len(nodes))
        nodes[j].ctrl_deps.append(n.id)
        n.data_deps.append(nodes[j].id)
    elif how == "dep-huge":
        rng.choice((n.data_deps, n.ctrl_deps)).append(rng.choice(U64_ODD))
    elif how in ("attr-kind", "attr-value") and len(n.attr):
        a = n.attr[rng.randrange(len(n.attr))]
        kind = rng.choice(ATTR_KINDS) if how == "attr-kind" else (a.WhichOneof("value") or "int64_val")
        name = a.name
        a.Clear()
        a.name = name
        _set_attr(rng, a, kind)
        how += f" {name}->{kind}"
    elif how == "attr-drop" and len(n.attr):
        del n.attr[rng.randrange(len(n.attr))]
    elif how == "attr-dup" and len(n.attr):
        n.attr.add().CopyFrom(n.attr[rng.randrange(len(n.attr))])
    elif how == "time":
        setattr(n, rng.choice(("start_time_micros", "duration_micros")), rng.choice(U64_ODD))
    elif how == "name":
        n.name = rng.choice(ODD_STRINGS)
    elif how == "drop-node":
        del nodes[i]
    elif how == "dup-node":
        nodes.insert(i, copy.deepcopy(n))
    else:
        a = n.attr.add()
        a.name = rng.choice(("comm_type", "comm_size", "pg_name", "comm_src", "comm_dst", "is_cpu_op",
                             "num_ops", "involved_dim", "comm_tag"))
        _set_attr(rng, a, rng.choice(ATTR_KINDS))
        how = f"attr {a.name} added"
    return f"node #{i}: {how}"


def mutate_et(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """A damaged `.et` file: 1-3 node mutations (on the decoded protobuf), or byte damage, or a
    damaged GlobalMetadata."""
    from chakra_tools.core.schema import et_def_pb2 as pb

    r = rng.random()
    if r < 0.2:
        return mutate_bytes(rng, data)
    frames = read_frames(data)
    if not frames:
        return data, "empty seed"
    meta = pb.GlobalMetadata.FromString(frames[0])
    nodes = [pb.Node.FromString(f) for f in frames[1:]]
    if r < 0.28 or not nodes:
        meta.version = rng.choice(ODD_STRINGS)
        a = meta.attr.add()
        a.name = rng.choice(("schema", "rank", "world_size", "pg_name"))
        _set_attr(rng, a, rng.choice(ATTR_KINDS))
        what = f"GlobalMetadata: version {meta.version!r:.20}, attr {a.name}"
    else:
        what = "; ".join(mutate_node(rng, nodes, rng.randrange(len(nodes))) for _ in range(rng.randint(1, 3))
                         if nodes)
    return write_frames([meta.SerializeToString()] + [n.SerializeToString() for n in nodes]), what


# --------------------------------------------------------------------------------------------
# legacy (2023) .et files: the same framing, proto2-era node fields (core/legacy.py)
# --------------------------------------------------------------------------------------------


def encode_fields(fields: list[tuple[int, int, Any]]) -> bytes:
    """A protobuf message from (field number, wire type, value): varints as ints, length-delimited
    values as bytes, fixed-size ones as their bytes (legacy.fields' output, read back)."""
    out = bytearray()
    for num, wire, value in fields:
        out += varint(num << 3 | wire)
        if wire == 0:
            out += varint(value)
        elif wire == 2:
            out += varint(len(value)) + value
        else:
            out += value
    return bytes(out)


def cut_at(data: bytes, at: int) -> tuple[bytes, str]:
    """`data` cut after `at` bytes (the deterministic truncation: a case's ordinal picks `at`)."""
    return data[:at], f"cut at byte {at} of {len(data)}"


LEGACY_U64 = (0, 2**31, 2**63, 2**64 - 1, 2**64, 2**70)  # the last two run past a varint's 10 bytes


def _legacy_ids(msgs: list[list]) -> list[tuple[int, list[int]]]:
    """(id, parents) of each decoded legacy node."""
    out = []
    for f in msgs:
        nid = next((v for n, w, v in f if n == 1 and w == 0), 0)
        out.append((nid, [v for n, w, v in f if n == 4 and w == 0]))
    return out


def _legacy_descendant(rng, ids: list[tuple[int, list[int]]], i: int) -> int | None:
    """The id of a node whose parent chain reaches node i, if any."""
    below, frontier = set(), {ids[i][0]}
    while frontier:
        frontier = {nid for nid, parents in ids if set(parents) & frontier} - below - {ids[i][0]}
        below |= frontier
    return rng.choice(sorted(below)) if below else None


def _legacy_attr(rng, body: bytes) -> tuple[bytes, str]:
    from chakra_tools.core.legacy import fields

    try:
        f = fields(body)
    except ValueError:  # damaged by an earlier mutation of this case: damage it further
        return body + b"\x80", "attr: cut varint appended"
    name = next((v for n, w, v in f if n == 1 and w == 2), b"?").decode("utf-8", "replace")
    how = rng.choice(("int", "int", "string", "bools", "float-cut", "name", "no-type", "wire"))
    if how == "int":
        f = [x for x in f if x[0] not in (7, 8)] + [(7, 0, rng.choice(LEGACY_U64 + (99, 5)))]
    elif how == "string":
        f = [x for x in f if x[0] not in (7, 8)] + [(8, 2, rng.choice((b"\xff\xfe", b"", b"1e400", b"\x00")))]
    elif how == "bools":
        f += [(9, 0, rng.choice((2, 2**64 - 1))), (9, 2, rng.choice((b"\x01\x80", b"\xff" * 11)))]
    elif how == "float-cut":
        f += [(5, 5, b"\x00\x00")]  # a 32-bit float of two bytes
    elif how == "name":
        f = [x for x in f if x[0] != 1] + [(1, 2, rng.choice(ODD_NAMES).encode("utf-8", "surrogatepass"))]
    elif how == "no-type":
        f = [x for x in f if x[0] != 2]
    else:  # a field of another wire type than its own
        wire = rng.choice((0, 1, 2, 5))
        f += [(rng.choice((1, 7, 8)), wire, {0: 1, 1: b"\x01" * 8, 2: b"x", 5: b"\x01" * 4}[wire])]
    return encode_fields(f), f"attr {name}: {how}"


def _legacy_node(rng, msgs: list[list], i: int) -> str:
    """One field of legacy node i (its decoded fields, changed in place) damaged."""
    f = msgs[i]
    ids = _legacy_ids(msgs)
    how = rng.choice(("id", "dup-id", "type", "parent-self", "parent-missing", "parent-cycle", "parent-cycle",
                      "parent-huge", "parent-packed", "name", "attr", "attr", "attr", "wire", "unknown",
                      "strings-as-varints", "drop-attrs"))
    keep = lambda *nums: [x for x in f if x[0] not in nums]  # noqa: E731
    if how == "id":
        f[:] = keep(1) + [(1, 0, rng.choice(LEGACY_U64))]
    elif how == "dup-id" and len(ids) > 1:
        f[:] = keep(1) + [(1, 0, rng.choice([nid for j, (nid, _) in enumerate(ids) if j != i]))]
    elif how == "type":
        f[:] = keep(3) + [(3, 0, rng.choice((0, 1, 9, 99, 2**31, 2**64 - 1)))]
    elif how == "parent-self":
        f.append((4, 0, ids[i][0]))
    elif how == "parent-cycle":
        below = _legacy_descendant(rng, ids, i)
        f.append((4, 0, ids[i][0] if below is None else below))
        how += "" if below is not None else " (itself)"
    elif how in ("parent-missing", "parent-huge"):
        f.append((4, 0, max(n for n, _ in ids) + 1000 if how == "parent-missing" else rng.choice(LEGACY_U64)))
    elif how == "parent-packed":
        f.append((4, 2, rng.choice((b"\xff\xff", b"\x01\x02\x80", b""))))
    elif how == "name":
        f[:] = keep(2) + [(2, 2, rng.choice(ODD_NAMES).encode("utf-8", "surrogatepass") if rng.random() < 0.7
                           else b"\xff\xfe\x00")]
    elif how == "attr" and any(n == 11 and w == 2 for n, w, _ in f):
        k = rng.choice([j for j, (n, w, _) in enumerate(f) if n == 11 and w == 2])
        body, how = _legacy_attr(rng, f[k][2])
        f[k] = (11, 2, body)
    elif how == "wire":
        num = rng.choice((1, 2, 3, 4, 11))
        f[:] = keep(num) + [(num, *rng.choice(((0, 5), (2, b"x"), (1, b"\x00" * 8), (5, b"\x00" * 4))))]
        how += f" of field {num}"
    elif how == "unknown":
        f.append((rng.choice((12, 15, 99, 2**29 - 1)), *rng.choice(((0, 1), (2, b"\x00"), (1, b"\x00" * 8),
                                                                    (3, b""), (4, b""), (7, b"")))))
    elif how == "strings-as-varints":
        f[:] = keep(6, 7) + [(6, 0, 100), (7, 0, 5)]  # today's start time and duration
    else:
        f[:] = keep(11)
        how = "attributes dropped"
    return f"node #{i}: {how}"


def mutate_legacy(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """A damaged legacy `.et` file: byte damage, frames dropped, doubled, reordered or mixed with
    today's, or 1-2 node fields (id, type, `parent` cycles and huge values, names, attributes,
    wire types, unknown fields) damaged."""
    from chakra_tools.core.legacy import fields
    from chakra_tools.core.schema import et_def_pb2 as pb

    r = rng.random()
    frames = read_frames(data)
    if r < 0.2 or not frames:
        return mutate_bytes(rng, data)
    if r < 0.35:
        how = rng.choice(("drop", "dup", "reverse", "today-node", "today-meta", "empty", "long-length"))
        i = rng.randrange(len(frames))
        if how == "drop":
            del frames[i]
        elif how == "dup":
            frames.insert(i, frames[i])
        elif how == "reverse":
            frames.reverse()
        elif how == "today-node":
            frames.insert(i, pb.Node(id=rng.choice((0, 1, 7)), name="now", type=4, duration_micros=3).SerializeToString())
        elif how == "today-meta":
            frames.insert(0, pb.GlobalMetadata(version="0.0.4").SerializeToString())
        elif how == "empty":
            frames.insert(i, b"")
        else:  # the length prefix over-long (11 bytes): the framing itself damaged
            return data + b"\xff" * 10 + b"\x01", "frame length past 10 bytes"
        return write_frames(frames), f"frames: {how} (#{i})"
    msgs = [fields(m) for m in frames]
    what = "; ".join(_legacy_node(rng, msgs, rng.randrange(len(msgs))) for _ in range(rng.randint(1, 2)))
    return write_frames([encode_fields(m) for m in msgs]), what


# --------------------------------------------------------------------------------------------
# ONNX models
# --------------------------------------------------------------------------------------------


def mutate_onnx(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """A damaged ONNX model: initializer dims huge/negative/zero, unknown data_type, attributes
    of another type or value, shapes on graph inputs, nodes dropped; or byte damage."""
    import onnx

    r = rng.random()
    if r < 0.15:
        return mutate_bytes(rng, data)
    m = onnx.ModelProto.FromString(data)
    g = m.graph
    how = rng.choice(("init-dim", "init-dim", "init-type", "init-drop", "attr", "attr", "input-dim",
                      "node-drop", "op-type", "node-input", "opset"))
    if how == "init-dim" and len(g.initializer):
        t = g.initializer[rng.randrange(len(g.initializer))]
        v = rng.choice((2**62, 2**63 - 1, -1, -(2**40), 0, 2**31))
        if len(t.dims) and rng.random() < 0.8:
            t.dims[rng.randrange(len(t.dims))] = v
        else:
            t.dims.append(v)
        return m.SerializeToString(), f"initializer {t.name}: a dim -> {v}"
    if how == "init-type" and len(g.initializer):
        t = g.initializer[rng.randrange(len(g.initializer))]
        t.data_type = rng.choice((0, 8, 17, 23, 99, 12345, 2**31 - 1))
        return m.SerializeToString(), f"initializer {t.name}: data_type {t.data_type}"
    if how == "init-drop" and len(g.initializer):
        del g.initializer[rng.randrange(len(g.initializer))]
        return m.SerializeToString(), "an initializer dropped"
    if how == "attr":
        nodes = [n for n in g.node if len(n.attribute)]
        if nodes:
            a = rng.choice(nodes).attribute
            a = a[rng.randrange(len(a))]
            if a.ints and rng.random() < 0.6:
                a.ints[rng.randrange(len(a.ints))] = rng.choice((-1, 0, 2**62, -(2**62)))
            else:
                name = a.name
                a.Clear()
                a.name = name
                a.type = rng.choice((1, 2, 3, 7, 8))
                if a.type == 1:
                    a.f = rng.choice(ODD_FLOATS)
                elif a.type == 2:
                    a.i = rng.choice((-1, 2**62))
                elif a.type == 3:
                    a.s = b"\xff"
                elif a.type == 7:
                    a.ints.extend([2**62, -1])
            return m.SerializeToString(), f"attribute {a.name} damaged"
    if how == "input-dim" and len(g.input):
        i = g.input[rng.randrange(len(g.input))]
        dims = i.type.tensor_type.shape.dim
        if len(dims):
            d = dims[rng.randrange(len(dims))]
            if rng.random() < 0.5:
                d.dim_value = rng.choice((-1, 0, 2**62))
            else:
                d.dim_param = rng.choice(("N", "", "²"))
        return m.SerializeToString(), f"input {i.name}: a dim damaged"
    if how == "node-drop" and len(g.node):
        del g.node[rng.randrange(len(g.node))]
        return m.SerializeToString(), "a node dropped"
    if how == "op-type" and len(g.node):
        n = g.node[rng.randrange(len(g.node))]
        n.op_type = rng.choice(("Conv", "Gemm", "MatMul", "Unknown", "", "LSTM", "Einsum"))
        return m.SerializeToString(), f"node {n.name}: op_type {n.op_type!r}"
    if how == "node-input" and len(g.node):
        n = g.node[rng.randrange(len(g.node))]
        n.input.append(rng.choice(("missing", "")))
        return m.SerializeToString(), f"node {n.name}: extra input"
    if how == "opset" and len(m.opset_import):
        m.opset_import[0].version = rng.choice((0, -1, 999))
        return m.SerializeToString(), "opset version"
    return mutate_bytes(rng, data)
