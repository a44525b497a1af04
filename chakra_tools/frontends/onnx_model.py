"""ONNX model -> per-layer parameter table and per-op FLOPs (the ModTrans front end).

ModTrans (the paper) turns an ONNX model into an ASTRA-sim workload by reading the weight tensors:
each layer's "variables" are the elements of its weight, times the element size in bytes, is what
data parallelism all-reduces. A *layer* here is an op that owns a weight: Conv, ConvTranspose,
Gemm, MatMul or Gather (embedding) with a parameter operand, and the recurrent ops. Its `params`
are the weight's elements (what the paper and ASTRA-sim's ResNet-50 workload count); biases are
reported beside (`bias_params`), and trainable parameters of other ops (normalisation scales
and shifts, not BatchNormalization's running statistics) are counted in `other_params`.

Only shapes are needed, never weight values: the model is loaded without its external data (so
models with external data files work, even if the files are absent), and weight-stripped models
(onnx's `light_*` test models) are read through the `<name>__SHAPE` tensor that a ConstantOfShape
turns into the weight. FLOPs come from ONNX shape inference: 2 per multiply-add for the
weight-bearing ops, one per output element for the rest (a compute estimate, not a count of
instructions). Subgraphs (If, Loop) are not entered. `onnx` is optional (`pip install 'chakra-tools[onnx]'`); it is imported here only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import prod
from pathlib import Path
from typing import Any

from chakra_tools.core.errors import InputError

#: ONNX TensorProto data type -> (label, bytes per element).
DTYPES: dict[int, tuple[str, int]] = {
    1: ("FP32", 4), 2: ("UINT8", 1), 3: ("INT8", 1), 4: ("UINT16", 2), 5: ("INT16", 2),
    6: ("INT32", 4), 7: ("INT64", 8), 9: ("BOOL", 1), 10: ("FP16", 2), 11: ("FP64", 8),
    12: ("UINT32", 4), 13: ("UINT64", 8), 16: ("BF16", 2), 17: ("FP8E4M3FN", 1),
    18: ("FP8E4M3FNUZ", 1), 19: ("FP8E5M2", 1), 20: ("FP8E5M2FNUZ", 1),
}
FLOAT_TYPES = frozenset({1, 10, 11, 16, 17, 18, 19, 20})

#: op -> (weight operand positions, bias operand positions)
LAYER_OPS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "Conv": ((1,), (2,)), "ConvTranspose": ((1,), (2,)), "Gemm": ((1, 0), (2,)),
    "MatMul": ((1, 0), ()), "Gather": ((0,), ()), "LSTM": ((1, 2), (3,)), "GRU": ((1, 2), (3,)),
    "RNN": ((1, 2), (3,)), "ConvInteger": ((1,), ()), "MatMulInteger": ((1,), ()),
    "QLinearConv": ((3,), (8,)), "QLinearMatMul": ((3,), ()),
}


#: Inputs that are state, not trainable parameters (BatchNormalization's running mean and var).
BUFFER_INPUTS: dict[str, tuple[int, ...]] = {"BatchNormalization": (3, 4)}


def require_onnx():
    try:
        import onnx
    except ImportError:
        raise InputError("reading ONNX models needs the onnx package: "
                         "pip install 'chakra-tools[onnx]'") from None
    return onnx


@dataclass(frozen=True)
class Param:
    shape: tuple[int, ...]
    dtype: int

    @property
    def elements(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.elements * DTYPES.get(self.dtype, ("?", 4))[1]


@dataclass(frozen=True)
class OpCost:
    """One ONNX node: forward FLOPs, bytes it reads and writes, and its activation tensors."""

    name: str
    op: str
    flops: int
    bytes_touched: int
    in_bytes: int   # activation (non-parameter) inputs
    out_bytes: int
    index: int = 0  # position of the node in the graph


@dataclass(frozen=True)
class LayerParams:
    """One row of the ModTrans table."""

    name: str
    op: str
    params: int
    dtype: str
    bytes: int
    shape: tuple[int, ...]
    bias_params: int = 0
    index: int = 0  # position of the node in the graph
    weight: str = ""  # the weight tensor's name
    flops: int = 0  # forward FLOPs of the layer's own op (0 if shapes are unknown)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "params": self.params, "dtype": self.dtype, "bytes": self.bytes,
                "op": self.op, "weight": self.weight, "shape": list(self.shape),
                "bias_params": self.bias_params, "flops": self.flops}


@dataclass
class ModelSummary:
    source: str
    layers: list[LayerParams]
    ops: list[OpCost]
    other_params: int = 0
    shapes_known: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def total_params(self) -> int:
        return sum(ly.params for ly in self.layers)

    @property
    def total_bytes(self) -> int:
        return sum(ly.bytes for ly in self.layers)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.source, "layers": [ly.to_dict() for ly in self.layers],
                "total_params": self.total_params, "total_bytes": self.total_bytes,
                "total_flops": sum(op.flops for op in self.ops),
                "bias_params": sum(ly.bias_params for ly in self.layers),
                "other_params": self.other_params, "notes": list(self.notes)}


def load_model(path: str | Path):
    """The ModelProto, without external data (only shapes are read)."""
    onnx = require_onnx()
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    try:
        return onnx.load(str(p), load_external_data=False)
    except Exception as e:  # protobuf raises DecodeError, onnx its own errors
        raise InputError(f"{p}: not an ONNX model ({type(e).__name__}: {e})") from None


#: The most elements a tensor may have (2**48, 256 Ti): its bytes, and the sums and FLOPs made of
#: them, then fit the trace's 64-bit fields. A dimension beyond it is damage, not a model.
MAX_ELEMENTS = 1 << 48


def parameters(model) -> dict[str, Param]:
    """Every tensor that holds weights: initializers, and ConstantOfShape outputs fed by a constant
    shape (how weight-stripped models spell a weight). InputError names a tensor whose shape or
    data type no model can have."""
    onnx = require_onnx()

    known_types = set(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
    params = {}
    for t in model.graph.initializer:
        if t.data_type not in known_types:
            raise InputError(f"initializer {t.name!r}: unknown data_type {t.data_type}")
        params[t.name] = Param(_checked_shape(t.dims, f"initializer {t.name!r}"), t.data_type)
    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape" or not node.input or node.input[0] not in params:
            continue
        init = inits[node.input[0]]
        if init.data_location == onnx.TensorProto.EXTERNAL:
            continue
        shape = _checked_shape(_shape_values(init), f"initializer {init.name!r} (the shape of {node.output[0]!r})")
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        dtype = value.data_type if value is not None else 1
        if dtype not in known_types:
            raise InputError(f"node {node.name or node.output[0]!r}: value of unknown data_type {dtype}")
        params[node.output[0]] = Param(shape, dtype)
    stripped = {n.input[0] for n in model.graph.node if n.op_type == "ConstantOfShape"
                and n.input and n.output[0] in params}
    return {k: v for k, v in params.items() if k not in stripped}


def _shape_values(init) -> list[int]:
    """The integers a shape tensor holds (ConstantOfShape's input: INT64 by the ONNX spec)."""
    from onnx import numpy_helper

    try:
        values = numpy_helper.to_array(init).reshape(-1)
    except (ValueError, KeyError, TypeError) as e:  # data that does not match dims or data_type
        raise InputError(f"initializer {init.name!r}: its data cannot be read ({e})") from None
    if values.dtype.kind not in "iu":
        raise InputError(f"initializer {init.name!r}: a shape must hold integers, not {values.dtype}")
    return [int(v) for v in values]


def _checked_shape(dims, what: str) -> tuple[int, ...]:
    shape = tuple(int(d) for d in dims)
    if any(d < 0 for d in shape):
        raise InputError(f"{what}: negative dimension in shape {list(shape)}")
    if prod(shape) > MAX_ELEMENTS:
        raise InputError(f"{what}: shape {list(shape)} has more than 2**48 elements")
    return shape


#: Ops that pass a weight through unchanged in content (a model may reshape or dequantise a
#: weight before the layer uses it).
VIEW_OPS = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast",
                      "DequantizeLinear"})


def weight_origins(model, params: dict[str, Param]) -> dict[str, str]:
    """tensor name -> the parameter it is a view of (a parameter is its own origin)."""
    origin = {k: k for k in params}
    for node in model.graph.node:
        if node.op_type in VIEW_OPS and node.input and node.input[0] in origin:
            origin[node.output[0]] = origin[node.input[0]]
    return origin


def summarize(path: str | Path) -> ModelSummary:
    """Read a model file: its layer table and per-op costs."""
    model = load_model(path)
    try:
        return summarize_model(model, source=Path(path).name)
    except InputError as e:
        raise e.add_context(str(path))


def summarize_model(model, source: str = "<model>") -> ModelSummary:
    params = parameters(model)
    origin = weight_origins(model, params)
    shapes, known, notes = _infer_shapes(model)
    layers, ops, used = [], [], set()
    for idx, node in enumerate(model.graph.node):
        if node.output and node.output[0] in origin:
            continue  # builds or reshapes a weight: not compute of the model
        name = node.name or f"{node.op_type}_{idx}"
        ops.append(_op_cost(node, name, idx, origin, shapes))
        layer = _layer_row(node, name, idx, params, origin)
        if layer is not None:
            layers.append(replace(layer, flops=ops[-1].flops))
            used.update(origin[i] for i in node.input if i in origin)
    buffers = {origin.get(n.input[i], n.input[i]) for n in model.graph.node
               for i in BUFFER_INPUTS.get(n.op_type, ()) if i < len(n.input)}
    consumed = {origin.get(i, i) for n in model.graph.node for i in n.input}
    other = sum(p.elements for n, p in params.items()
                if n not in used and n not in buffers and n in consumed and p.dtype in FLOAT_TYPES)
    return ModelSummary(source, layers, ops, other, known, notes)


def _layer_row(node, name: str, idx: int, params: dict[str, Param],
               origin: dict[str, str]) -> LayerParams | None:
    spec = LAYER_OPS.get(node.op_type)
    if spec is None:
        return None
    weight_pos, bias_pos = spec
    inputs = [origin.get(i, i) for i in node.input]
    wnames = [inputs[i] for i in weight_pos if i < len(inputs) and inputs[i] in params]
    if node.op_type in ("Gemm", "MatMul"):
        wnames = wnames[:1]  # the parameter operand; the other one is the activation
    if not wnames:
        return None
    weights = [params[w] for w in wnames]
    biases = [params[inputs[i]] for i in bias_pos if i < len(inputs) and inputs[i] in params]
    label = DTYPES.get(weights[0].dtype, (f"type{weights[0].dtype}", 4))[0]
    return LayerParams(name, node.op_type, sum(w.elements for w in weights), label,
                       sum(w.nbytes for w in weights), weights[0].shape,
                       sum(b.elements for b in biases), idx, wnames[0])


# -- shapes and FLOPs ----------------------------------------------------------------------------

def _infer_shapes(model) -> tuple[dict[str, tuple[tuple[int, ...], int]], bool, list[str]]:
    """name -> (shape, dtype) for every tensor whose shape is fully known."""
    onnx = require_onnx()
    notes: list[str] = []
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as e:
        notes.append(f"shape inference failed ({e}); FLOPs are unknown")
        inferred = model
    out: dict[str, tuple[tuple[int, ...], int]] = {}
    g = inferred.graph
    for t in g.initializer:
        out[t.name] = (tuple(t.dims), t.data_type)
    for v in [*g.input, *g.value_info, *g.output]:
        tt = v.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
        if tt.HasField("shape") and all(d >= 0 for d in dims):
            out[v.name] = (dims, tt.elem_type)
    wanted = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    missing = sum(1 for n in g.node for o in n.output if o in wanted and o not in out)
    if missing:
        notes.append(f"{missing} tensors have no static shape (symbolic dims?): their ops count 0 FLOPs")
    return out, not missing, notes


def _nbytes(entry) -> int:
    shape, dtype = entry
    return prod(shape) * DTYPES.get(dtype, ("?", 4))[1]


def _op_cost(node, name: str, idx: int, origin: dict[str, str], shapes) -> OpCost:
    """FLOPs and bytes of one node; `origin` names the tensors that are weights."""
    ins = [shapes.get(i) for i in node.input]
    outs = [shapes.get(o) for o in node.output if o]
    touched = sum(_nbytes(e) for e in [*ins, *outs] if e is not None)
    act_in = sum(_nbytes(e) for i, e in zip(node.input, ins) if e is not None and i not in origin)
    out_bytes = sum(_nbytes(e) for e in outs if e is not None)
    flops = _flops(node, [e[0] if e else None for e in ins], [e[0] if e else None for e in outs])
    return OpCost(name, node.op_type, flops, touched, act_in, out_bytes, idx)


def _attr(node, key: str, default=None):
    for a in node.attribute:
        if a.name == key:
            return list(a.ints) if a.ints else (a.i if a.type == 2 else default)
    return default


def _flops(node, ins: list, outs: list) -> int:
    """Forward FLOPs from shapes; 0 where a needed shape is unknown."""
    out = outs[0] if outs else None
    op = node.op_type
    try:
        if op in ("Conv", "ConvInteger", "QLinearConv"):
            w = ins[3] if op == "QLinearConv" else ins[1]
            return 2 * prod(out) * prod(w[1:])
        if op == "ConvTranspose":
            return 2 * prod(ins[0]) * prod(ins[1][1:])
        if op == "Gemm":
            a = ins[0]
            k = a[0] if _attr(node, "transA", 0) else a[1]
            return 2 * prod(out) * k
        if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
            return 2 * prod(out) * ins[0][-1]
        if op in ("LSTM", "GRU", "RNN"):
            seq, batch = ins[0][0], ins[0][1]
            return 2 * seq * batch * (prod(ins[1]) + prod(ins[2]))
        if op in ("Gather", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Shape",
                  "Identity", "Dropout", "Constant", "ConstantOfShape", "Concat", "Slice", "Split"):
            return 0
        if op in ("MaxPool", "AveragePool"):
            return prod(out) * prod(_attr(node, "kernel_shape", [1]))
        if op in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum"):
            return prod(ins[0])
        return prod(out) if out is not None else 0
    except (TypeError, IndexError):
        return 0
