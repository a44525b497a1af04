"""Typed fields of the JSON documents core decodes (manifest.py, replaydoc.py): each check
returns the value or raises an InputError naming the document (`source`) and the place
(`where`, a key path such as `ranks[3].finish_ns`)."""

from __future__ import annotations

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
        raise InputError(f"{source}: {where} is {type(v).__name__}, not an object")
    return v
