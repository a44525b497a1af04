"""Typed fields of the JSON documents core decodes (manifest.py, replaydoc.py, jsondump.py): each
check returns the value or raises an InputError naming the document (`source`) and the place
(`where`, a key path such as `ranks[3].finish_ns`) and the value found, as the document spells it."""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import InputError


def integer(v: Any, source: str, where: str) -> int:
    """An int, and not a bool, float or digit string."""
    if type(v) is not int:
        raise InputError(f"{source}: {where} is {v!r}, not an integer")
    return v


def optional_integer(v: Any, source: str, where: str) -> int | None:
    return None if v is None else integer(v, source, where)


def obj(v: Any, source: str, where: str) -> dict:
    if not isinstance(v, dict):
        raise InputError(f"{source}: {where} is {shown(v)}, not an object")
    return v


def array(v: Any, source: str, where: str) -> list:
    if not isinstance(v, list):
        raise InputError(f"{source}: {where} is {shown(v)}, not a list")
    return v


def shown(v: Any) -> str:
    """A JSON value as the document spells it, shortened; lists and objects by their kind."""
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    if type(v) is float and not math.isfinite(v):
        return "NaN" if math.isnan(v) else f"{'-' if v < 0 else ''}Infinity (or a number beyond a double's range)"
    if type(v) is int and v.bit_length() > 128:  # more digits than str() may convert
        return f"an integer of {v.bit_length()} bits"
    text = json.dumps(v)
    return text if len(text) <= 60 else text[:57] + "..."
