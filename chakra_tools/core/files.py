"""Reading small user files (JSON, YAML) with errors that name the file and the line.

Every stage reads a config or a side file somewhere; they all fail the same way on a missing
file or a syntax error, so they read through here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .errors import InputError


def read_json(path: str | Path, *, expect: type | None = dict, what: str = "a JSON object") -> Any:
    """The parsed document; InputError for a missing file, bad JSON (with its line) or a document
    that is not of type `expect`."""
    text = _read_text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: line {e.lineno} column {e.colno}: not valid JSON: {e.msg}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to read (over {sys.getrecursionlimit()} levels)") from None
    except ValueError as e:  # an integer past Python's 4,300 digits
        raise InputError(f"{path}: cannot read a number in it ({str(e).split(';')[0]})") from None
    if expect is not None and not isinstance(doc, expect):
        raise InputError(f"{path}: expected {what}")
    return doc


def read_yaml_mapping(path: str | Path, *, what: str = "a mapping of settings") -> dict:
    """A YAML file that must hold a mapping (an empty file is an empty mapping)."""
    import yaml

    text = _read_text(path)
    try:
        doc = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        raise InputError(f"{path}: {where}not valid YAML: {e.problem or e.context}") from None
    except (yaml.YAMLError, ValueError, OverflowError) as e:  # ValueError: e.g. a date 2024-13-45
        raise InputError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to read (over {sys.getrecursionlimit()} levels)") from None
    doc = {} if doc is None else doc
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected {what}")
    return doc


def _read_text(path: str | Path) -> str:
    """The file's text (UTF-8); InputError for a missing or unreadable file or other bytes."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(f"{path}: line {line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None
