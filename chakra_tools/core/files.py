"""Reading small user files (JSON, YAML) with errors that name the file and the line.

Every stage reads a config or a side file somewhere; they all fail the same way on a missing
file or a syntax error, so they read through here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import InputError


def read_json(path: str | Path, *, expect: type | None = dict, what: str = "a JSON object") -> Any:
    """The parsed document; InputError for a missing file, bad JSON (with its line) or a document
    that is not of type `expect`."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: line {e.lineno} column {e.colno}: not valid JSON: {e.msg}") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not a text file ({e.reason})") from None
    if expect is not None and not isinstance(doc, expect):
        raise InputError(f"{path}: expected {what}")
    return doc


def read_yaml_mapping(path: str | Path, *, what: str = "a mapping of settings") -> dict:
    """A YAML file that must hold a mapping (an empty file is an empty mapping)."""
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not valid YAML: {e}") from None
    doc = {} if doc is None else doc
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected {what}")
    return doc
