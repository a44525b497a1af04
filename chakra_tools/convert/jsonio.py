"""Loading large trace JSON quickly.

Host and device traces are big JSON documents (100+ MB) made of millions of small dicts and
lists. CPython's cyclic garbage collector runs every few hundred allocations and rescans all of
them, which costs 60-70% of plain parsing time on such files; none of these objects can form a
cycle, so we parse (and convert: see rank.py) with the collector off. Host and device traces
are read with typed msgspec decoders first (hostet.py, kineto.py: only the fields the converter
uses become objects); the json module is the fallback for documents that do not fit the types.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

import msgspec

from chakra_tools.core.collector import gc_paused
from chakra_tools.core.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, gunzipped when it starts with the gzip magic."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(f"{path}: corrupt gzip file: {e}") from None
    return data


#: the start of a communication annotation name (core/annotations.py): JSON inside a name
ANNOTATION = b"chakra_tools.comm:{"


def load_json(path: str | Path) -> Any:
    """Parse a (possibly gzipped) JSON file with the garbage collector paused (see
    `parse_json_bytes`)."""
    return parse_json_bytes(read_bytes(path), path)


def parse_json_bytes(data: bytes, path: str | Path) -> Any:
    """Parse JSON bytes with the garbage collector paused.

    PyTorch writes op names into both trace files without escaping them, so a record_function
    whose name holds JSON (our communication annotations) makes the file invalid JSON; such files
    are repaired and parsed again. Raises InputError naming the file and the line of a syntax
    error.
    """
    with gc_paused():
        try:
            doc = json.loads(data)
        except json.JSONDecodeError as e:
            fixed = repair_names(data)
            try:
                doc = json.loads(fixed) if fixed != data else None
            except ValueError:
                doc = None
            if doc is None:
                raise InputError(f"{path}: line {e.lineno}: not valid JSON: {e.msg}") from None
        except UnicodeDecodeError as e:
            raise InputError(f"{path}: not a text JSON file ({e.reason})") from None
        except RecursionError:
            raise InputError(f"{path}: JSON nested too deeply to be a trace") from None
        except ValueError as e:  # an integer past Python's 4,300 digits
            raise InputError(f"{path}: cannot read a number in it ({str(e).split(';')[0]})") from None
    return doc


def decode_typed(decoder: msgspec.json.Decoder, data: bytes) -> Any:
    """`data` decoded by a typed msgspec decoder, or None if it does not fit the types or is not
    valid JSON (the caller then takes the plain JSON path, which says where). A file made
    invalid by unescaped annotation names is repaired first, as `parse_json_bytes` does."""
    try:
        return decoder.decode(data)
    except (msgspec.ValidationError, RecursionError):
        return None
    except msgspec.DecodeError:
        if not unescaped_annotations(data):
            return None
    try:
        return decoder.decode(repair_names(data))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def unescaped_annotations(data: bytes) -> bool:
    """Whether the file holds annotation names PyTorch wrote without escaping."""
    return data.find(ANNOTATION + b'"') >= 0


def repair_names(data: bytes) -> bytes:
    """Escape the double quotes of every unescaped annotation object inside a name.

    >>> fixed = repair_names(b'{"name": "chakra_tools.comm:{"op":"send","peer":1}", "id": 3}')
    >>> json.loads(fixed)["name"]
    'chakra_tools.comm:{"op":"send","peer":1}'
    """
    out, pos = [], 0
    while True:
        i = data.find(ANNOTATION, pos)
        if i < 0:
            out.append(data[pos:])
            return b"".join(out)
        start = i + len(ANNOTATION) - 1
        end = _closing_brace(data, start)
        span = data[start:end]
        out.append(data[pos:start])
        out.append(span if b'\\"' in span else span.replace(b'"', b'\\"'))
        pos = end


def _closing_brace(data: bytes, start: int) -> int:
    """Index just past the brace that closes the one at `start` (or the end of the line)."""
    depth = 0
    limit = data.find(b"\n", start)
    limit = len(data) if limit < 0 else limit
    for k in range(start, limit):
        c = data[k]
        if c == 0x7B:
            depth += 1
        elif c == 0x7D:
            depth -= 1
            if depth == 0:
                return k + 1
    return limit
