"""Mutators: one valid input in, one damaged input out, driven by a `random.Random`.

Each input kind has its own family (bytes, JSON trees, YAML, text workloads, `.et` protobuf
frames, ONNX models); every mutator is a pure function of (rng, input) so that a case is
reproduced from its seed alone. They damage the way real inputs go wrong: truncation and flipped
bytes, values of the wrong type, huge, negative and non-finite numbers, missing keys, deep
nesting, duplicate ids, cycles, corrupt gzip streams.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import random
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
    arrays or objects."""
    text = json.dumps(doc, allow_nan=True, default=str)
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
    from chakra_tools.core.etio import decode_varint

    out, pos = [], 0
    while pos < len(data):
        n, pos = decode_varint(data, pos)
        out.append(data[pos: pos + n])
        pos += n
    return out


def write_frames(frames: list[bytes]) -> bytes:
    out = bytearray()
    for f in frames:
        n = len(f)
        while n > 0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        out += f
    return bytes(out)


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
