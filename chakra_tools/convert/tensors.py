"""Tensors as the host trace records them, and their sizes.

A tensor value is `[tensor_id, storage_id, offset, numel, itemsize, device]`; lists of tensors are
nested lists. Device-only traces have no values, only shapes (`Input Dims`) and type names
(`float`, `c10::BFloat16`); sizes then come from the shape and the type's element size.
"""

from __future__ import annotations

from typing import Any, Iterator


ELEM_BYTES = {
    "float": 4, "double": 8, "c10::half": 2, "half": 2, "c10::bfloat16": 2, "bfloat16": 2,
    "long int": 8, "long": 8, "int": 4, "short int": 2, "short": 2, "signed char": 1,
    "unsigned char": 1, "bool": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
    "float32": 4, "float64": 8, "float16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint8": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "byte": 1, "char": 1,  # Kineto's `dtype` names: Float, Long, Byte, Char...
}

DTYPE_NAMES = {
    "float": "float32", "double": "float64", "c10::half": "float16", "half": "float16",
    "c10::bfloat16": "bfloat16", "long int": "int64", "long": "int64", "int": "int32",
    "short int": "int16", "signed char": "int8", "unsigned char": "uint8", "bool": "bool",
}


def is_tensor(v: Any) -> bool:
    """A recorded tensor: six items, integers (id, storage, offset, numel, itemsize) then a device
    string; the numel and itemsize its bytes are made of checked (a damaged trace's None there
    was a TypeError)."""
    return (type(v) is list and len(v) == 6 and type(v[5]) is str and type(v[3]) is int
            and type(v[4]) is int and type(v[0]) is int)


def iter_tensors(v: Any) -> Iterator[list]:
    """Every tensor in a (nested) value."""
    if type(v) is list:
        if is_tensor(v):
            yield v
        else:
            for x in v:
                yield from iter_tensors(x)


def tensor_numel(v: Any) -> int:
    return sum(t[3] for t in iter_tensors(v))


def type_inner(type_name: str) -> str:
    """`Tensor(c10::BFloat16)` -> `c10::bfloat16`; `GenericList[Tensor(float)]` -> `float`; a
    type recorded as something else than text is no type ("": no element size, no dtype)."""
    if type(type_name) is not str:
        return ""
    s = type_name
    i = s.find("Tensor(")
    if i >= 0:
        s = s[i + 7:]
        j = s.find(")")
        s = s[:j] if j >= 0 else s
    return s.strip().lower()


def elem_bytes_of(type_name: str) -> int:
    return ELEM_BYTES.get(type_inner(type_name), 0)


def dtype_name(type_name: str) -> str:
    inner = type_inner(type_name)
    return DTYPE_NAMES.get(inner, inner.replace("c10::", ""))


def shape_numel(shape: Any) -> int:
    """Elements of a shape `[d0, d1, ...]`; 1 for a scalar `[]`; 0 if not a shape."""
    if type(shape) is not list:
        return 0
    n = 1
    for d in shape:
        if type(d) is not int:
            return 0
        n *= d
    return n


def is_shape(shape: Any) -> bool:
    return type(shape) is list and all(type(d) is int for d in shape)


def shapes_bytes(shape: Any, type_name: str) -> int:
    """Bytes of a shape or list of shapes of the given type (for traces without values)."""
    eb = elem_bytes_of(type_name) if type_name else 0
    if not eb:
        return 0
    if is_shape(shape):
        return shape_numel(shape) * eb if shape else 0
    if type(shape) is list:
        return sum(shape_numel(s) * eb for s in shape if is_shape(s) and s)
    return 0
