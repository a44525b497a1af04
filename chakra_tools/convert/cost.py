"""Compute cost of host ops from their recorded shapes: `num_ops` (floating-point operations) and
`tensor_size` (bytes read and written), for roofline simulation.

One small function per op family, in a registry keyed by op name. Shapes are the host trace's
`input_shapes` / `output_shapes`; element sizes come from the recorded tensors (or type names).
A multiply-add counts as 2 operations. Ops not in the registry get no cost (0), which simulators
read as "use the measured duration".
"""

from __future__ import annotations

from math import prod
from typing import Callable

from chakra_tools.core.errors import InputError

from .hostet import HostOp
from .schema import INT64_MAX
from .hotloops import tensor_bytes
from .tensors import is_shape, shape_numel, shapes_bytes

FlopFn = Callable[[list, list], int]
REGISTRY: dict[str, FlopFn] = {}


def register(*names: str):
    def deco(fn: FlopFn) -> FlopFn:
        for n in names:
            REGISTRY[n] = fn
        return fn
    return deco


def _shape(shapes: list, i: int) -> list[int] | None:
    s = shapes[i] if i < len(shapes) else None
    return s if is_shape(s) and s else None


@register("aten::mm")
def _mm(ins: list, outs: list) -> int:
    a, b = _shape(ins, 0), _shape(ins, 1)
    return 2 * a[0] * a[1] * b[1] if a and b and len(a) == 2 and len(b) == 2 else 0


@register("aten::addmm")
def _addmm(ins: list, outs: list) -> int:
    a, b = _shape(ins, 1), _shape(ins, 2)
    if not (a and b and len(a) == 2 and len(b) == 2):
        return 0
    return 2 * a[0] * a[1] * b[1] + a[0] * b[1]


@register("aten::bmm", "aten::baddbmm")
def _bmm(ins: list, outs: list) -> int:
    off = 1 if len(ins) > 2 and _shape(ins, 0) and len(_shape(ins, 0)) == 3 and len(ins) >= 3 and _shape(ins, 2) else 0
    a, b = _shape(ins, off), _shape(ins, off + 1)
    return 2 * a[0] * a[1] * a[2] * b[2] if a and b and len(a) == 3 and len(b) == 3 else 0


@register("aten::matmul")
def _matmul(ins: list, outs: list) -> int:
    a, b, o = _shape(ins, 0), _shape(ins, 1), _shape(outs, 0)
    if not (a and b):
        return 0
    k = a[-1]
    return 2 * k * (shape_numel(o) if o else shape_numel(a[:-1]) * (b[-1] if len(b) > 1 else 1))


@register("aten::linear")
def _linear(ins: list, outs: list) -> int:
    x, w = _shape(ins, 0), _shape(ins, 1)
    if not (x and w and len(w) == 2):
        return 0
    rows = shape_numel(x[:-1]) if len(x) > 1 else 1
    return 2 * rows * w[1] * w[0] + (rows * w[0] if _shape(ins, 2) else 0)


@register("aten::convolution", "aten::_convolution", "aten::conv1d", "aten::conv2d",
          "aten::conv3d", "aten::cudnn_convolution", "aten::mkldnn_convolution")
def _conv(ins: list, outs: list) -> int:
    w, o = _shape(ins, 1), _shape(outs, 0)
    if not (w and o and len(w) >= 3 and len(o) == len(w)):
        return 0
    per_output = prod(w[1:])  # (C_in / groups) x kernel
    return 2 * shape_numel(o) * per_output


@register("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
          "aten::_scaled_dot_product_efficient_attention", "aten::_flash_attention_forward",
          "aten::_efficient_attention_forward", "aten::_scaled_dot_product_attention_math",
          "aten::_scaled_dot_product_flash_attention_for_cpu")
def _attention(ins: list, outs: list) -> int:
    q, k = _shape(ins, 0), _shape(ins, 1)
    if not (q and k and len(q) >= 3 and len(k) >= 3):
        return 0
    batch = shape_numel(q[:-2])
    return 4 * batch * q[-2] * k[-2] * q[-1]  # QK^T and PV, 2 flops per multiply-add


ELEMENTWISE = ("add", "sub", "mul", "div", "relu", "gelu", "silu", "sigmoid", "tanh", "exp",
               "log", "neg", "sqrt", "rsqrt", "pow", "clamp", "clamp_min", "clamp_max",
               "threshold_backward", "gelu_backward", "silu_backward", "sigmoid_backward",
               "tanh_backward", "addcmul", "addcdiv", "where", "maximum", "minimum", "abs",
               "reciprocal", "erf", "hardtanh", "leaky_relu", "dropout", "native_dropout",
               "lerp", "sin", "cos", "square")
for _n in ELEMENTWISE:
    for _v in (f"aten::{_n}", f"aten::{_n}_"):
        REGISTRY[_v] = lambda ins, outs: _numel_out(ins, outs)


def _numel_out(ins: list, outs: list) -> int:
    o = _shape(outs, 0) or _shape(ins, 0)
    return shape_numel(o) if o else 0


@register("aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax",
          "aten::_softmax_backward_data", "aten::_log_softmax_backward_data")
def _softmax(ins: list, outs: list) -> int:
    return 5 * _numel_out(ins, outs)  # max, subtract, exp, sum, divide


@register("aten::layer_norm", "aten::native_layer_norm", "aten::batch_norm",
          "aten::native_batch_norm", "aten::group_norm", "aten::native_group_norm",
          "aten::rms_norm", "aten::_fused_rms_norm", "aten::instance_norm",
          "aten::native_layer_norm_backward", "aten::native_batch_norm_backward")
def _norm(ins: list, outs: list) -> int:
    return 8 * _numel_out(ins, outs)  # mean, variance, normalise, scale and shift


def op_cost(op: HostOp) -> tuple[int, int]:
    """(num_ops, tensor_size) of a host op; (0, 0) if the op is not a known compute op.
    InputError (naming the node) for a cost beyond int64: shapes no real tensor has.

    >>> from chakra_tools.convert.hostet import HostOp
    >>> a = [1, 1, 0, 8 * 16, 4, "cpu"]; b = [2, 2, 0, 16 * 4, 4, "cpu"]; c = [3, 3, 0, 32, 4, "cpu"]
    >>> op = HostOp(5, "aten::mm", 1, 1, None, ([a, b], [[8, 16], [16, 4]], ["Tensor(float)"] * 2),
    ...             ([c], [[8, 4]], ["Tensor(float)"]), {})
    >>> op_cost(op)
    (1024, 896)
    """
    fn = REGISTRY.get(op.name)
    if fn is None:
        return 0, 0
    try:
        flops = int(fn(op.in_shapes, op.out_shapes))
    except (TypeError, IndexError, ValueError):
        return 0, 0
    if flops <= 0:
        return 0, 0
    size = _bytes(op)
    if flops > INT64_MAX or not 0 <= size <= INT64_MAX:
        raise InputError(f"node {op.id} ({op.name!r}): its recorded shapes and tensors make "
                         f"{flops} operations on {size} bytes, beyond what a tensor can be (int64)")
    return flops, size


def _bytes(op: HostOp) -> int:
    b = tensor_bytes(op.in_values) + tensor_bytes(op.out_values)
    if b:
        return b
    return (sum(shapes_bytes(s, t) for s, t in zip(op.in_shapes, op.in_types))
            + sum(shapes_bytes(s, t) for s, t in zip(op.out_shapes, op.out_types)))
