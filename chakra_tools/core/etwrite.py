"""Writing Chakra `.et` files (the reader is etio.py): node by node or a list at a time, gzip
when asked, each file atomically renamed into place (`TraceWriter`, `write_trace`)."""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path
from typing import Iterable, Sequence

from . import hotloops
from .commit import temp_name
from .encoder import ENCODE_ERRORS, encode_node, frame
from .errors import InputError, TraceWriteError
from .etio import metadata_to_pb
from .framing import CHUNK
from .model import Metadata, Node


def with_plain_attrs(node: Node) -> Node:
    """`node` with its attributes a plain dict (a node read from a file decodes them on first
    use, etio.PbAttrs): what the compiled encoder takes."""
    return node if type(node.attrs) is dict else node.replace(attrs=dict(node.attrs))


class TraceWriter:
    """Write one `.et` file node by node; gzip when the name ends in `.gz` (or `compress=True`).

    Output bytes depend only on the nodes: attributes are sorted, gzip has no name or time stamp.
    The file appears (atomically renamed into place) on `close()`; an exception inside `with`, or
    `abort()`, leaves nothing behind.
    """

    def __init__(self, path: str | Path, metadata: Metadata | None = None, *,
                 compress: bool | None = None):
        self.path = Path(path)
        self.count = 0
        self._tmp = temp_name(self.path)
        try:
            self._raw = open(self._tmp, "wb")
        except OSError as e:
            why = f"no such folder ({self.path.parent})" if isinstance(e, FileNotFoundError) else e.strerror
            raise InputError(f"{self.path}: cannot write: {why}") from None
        if compress if compress is not None else self.path.suffix == ".gz":
            self._gz = gzip.GzipFile(fileobj=self._raw, mode="wb", mtime=0, filename="", compresslevel=6)
            self._out = io.BufferedWriter(self._gz, CHUNK)  # type: ignore[arg-type]
        else:
            self._gz = None
            self._out = io.BufferedWriter(self._raw, CHUNK)  # type: ignore[arg-type]
        try:
            self._write_message(metadata_to_pb(metadata or Metadata()), "GlobalMetadata")
        except BaseException:
            self.abort()
            raise

    def _write_message(self, m, what: str) -> None:
        self._write_frame(m.SerializeToString(), what)

    def _write_frame(self, data: bytes, what) -> None:
        if not data:
            what = what if isinstance(what, str) else f"node {what.id} ({what.name!r})"
            raise TraceWriteError(f"{self.path}: {what} would encode to zero bytes, which Chakra's "
                                  "reader takes as end of file; give it a name or a type")
        self._out.write(frame(data))

    def write(self, node: Node) -> None:
        try:
            data = encode_node(node)
        except ENCODE_ERRORS as e:  # e.g. a negative id
            raise TraceWriteError(f"{self.path}: node {node.id} ({node.name!r}) cannot be encoded: {e}") from None
        self._write_frame(data, node)
        self.count += 1

    def write_all(self, nodes: Sequence[Node]) -> None:
        """Write many nodes, a run of frames at a time (`hotloops.encode_frames`: compiled or
        Python); a node the run stops at is written alone by `write`, which raises the error
        that names it if it cannot be encoded. Nodes read from a file carry their attributes
        undecoded (etio.PbAttrs), which the compiled run does not take: where it stops at one,
        the rest are handed to it with their attributes as plain dicts (rewriting a read set went
        through the Python encoder node by node, half of `trace-convert scale`'s time)."""
        if not isinstance(nodes, (list, tuple)):
            nodes = list(nodes)
        i, end, out, plain = 0, len(nodes), self._out, False
        while i < end:
            data, j = hotloops.encode_frames(nodes, i)
            if j > i:
                out.write(data)
                self.count += j - i
                i = j
            elif not plain and type(nodes[i].attrs) is not dict:  # the rest, from here on
                nodes, i, end, plain = [with_plain_attrs(n) for n in nodes[i:]], 0, end - i, True
            else:
                self.write(nodes[i])
                i += 1

    def close(self) -> None:
        try:
            self._out.flush()
            if self._gz is not None:
                self._gz.close()
            self._raw.close()
            os.replace(self._tmp, self.path)
        except BaseException:  # a failed flush or rename must not leave the temporary file behind
            self.abort()
            raise

    def abort(self) -> None:
        for f in (self._out, self._gz, self._raw):  # outermost first; a failed flush is moot now
            if f is not None:
                try:
                    f.close()
                except Exception:
                    pass
        self._tmp.unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_trace(path: str | Path, nodes: Iterable[Node], metadata: Metadata | None = None, *,
                compress: bool | None = None) -> int:
    """Write `nodes` to `path` atomically; returns how many were written."""
    with TraceWriter(path, metadata, compress=compress) as w:
        if isinstance(nodes, (list, tuple)):
            w.write_all(nodes)
        else:
            for n in nodes:
                w.write(n)
    return w.count
