"""Length-delimited framing of Chakra `.et` files: the layer under the node reader (etio) and the
legacy-format sniffer (legacy), which both walk a trace's messages without decoding them.

A stream of protobuf messages, each preceded by its byte length as a base-128 varint; gzip accepted
(magic 1f 8b). A broken frame raises `TraceReadError` naming the file and the byte offset.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from .errors import InputError, TraceReadError

GZIP_MAGIC = b"\x1f\x8b"
CHUNK = 1 << 22
#: protobuf refuses messages over 2 GiB; a larger length prefix can only be corruption.
MAX_MESSAGE = (1 << 31) - 1


def open_binary(path: str | Path) -> BinaryIO:
    """Open a trace for reading, transparently gunzipping it."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise InputError(f"{path}: cannot open: {e.strerror}") from None
    if f.read(2) == GZIP_MAGIC:
        f.seek(0)
        gz = gzip.GzipFile(fileobj=f, mode="rb")
        gz.myfileobj = f  # so that closing the GzipFile closes the file too (as gzip.open does)
        return gz  # type: ignore[return-value]
    f.seek(0)
    return f


#: protobuf wire types: a varint, a fixed 64-bit value, a length-delimited one, a fixed 32-bit value
VARINT, I64, LEN, I32 = 0, 1, 2, 5
_U64 = (1 << 64) - 1


def message_fields(msg: bytes, limit: int | None = None) -> list[tuple[int, int, int | bytes, int]]:
    """(field number, wire type, value, end) of a message's top-level fields (the first `limit`
    of them): varints as ints, fixed 32/64-bit values as their bytes, length-delimited ones as
    bytes; `end`, where the field ends (its own bytes are msg[the field before's end:end]).
    ValueError if malformed."""
    out, pos, n = [], 0, len(msg)
    while pos < n and (limit is None or len(out) < limit):
        tag, pos = decode_varint(msg, pos)
        if tag < 0:
            raise ValueError("message ends inside a tag")
        num, wire = tag >> 3, tag & 7
        if wire == VARINT:
            value, pos = decode_varint(msg, pos)
            if value < 0:
                raise ValueError("message ends inside a varint")
            if value > _U64:
                raise ValueError(f"field {num}: varint past 64 bits")
        elif wire == LEN:
            length, pos = decode_varint(msg, pos)
            if length < 0 or pos + length > n:
                raise ValueError("length-delimited field runs past the message")
            value, pos = msg[pos:pos + length], pos + length
        elif wire in (I64, I32):
            size = 8 if wire == I64 else 4
            if pos + size > n:
                raise ValueError("fixed-size field runs past the message")
            value, pos = msg[pos:pos + size], pos + size
        else:
            raise ValueError(f"wire type {wire} is not used by Chakra")
        out.append((num, wire, value, pos))
    return out


def decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode a varint at `pos`; returns (value, next pos), or (-1, pos) if `buf` ends inside it."""
    result = shift = 0
    n = len(buf)
    while pos < n:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
    return -1, pos


def iter_frames(stream: BinaryIO, path: str | Path = "<stream>", chunk: int = CHUNK,
                skip: Callable[[bytes, int], int] | None = None) -> Iterator[tuple[int, bytes]]:
    """Yield (offset, message bytes) for each length-delimited message of the stream.

    Most Chakra nodes are shorter than 16 KiB, so their length prefix is one byte or two: those
    are decoded inline (the reader's hot path). A longer prefix, a message across a read boundary
    or a broken file takes `FrameReader.next_frame`, the general path. `skip(buf, pos)`, where
    given, is asked before each frame of the buffer where the next one to yield starts: the
    validator takes the frames it needs no Node for there (`hotloops.scan_frames`).
    """
    r = FrameReader(stream, path, chunk)
    while True:
        buf, pos, base = r.buf, r.pos, r.base
        end = len(buf)
        while pos < end:
            if skip is not None:
                pos = skip(buf, pos)
                if pos >= end:
                    break
            b = buf[pos]
            if 0 < b < 0x80 and pos + 1 + b <= end:
                yield base + pos, buf[pos + 1:pos + 1 + b]
                pos += 1 + b
                continue
            if b >= 0x80 and pos + 1 < end and 0 < buf[pos + 1] < 0x80:  # 128 B .. 16 KiB: two bytes
                length = (b & 0x7F) | (buf[pos + 1] << 7)
                if pos + 2 + length <= end:
                    yield base + pos, buf[pos + 2:pos + 2 + length]
                    pos += 2 + length
                    continue
            break
        r.pos = pos
        got = r.next_frame()
        if got is None:
            return
        yield got


class FrameReader:
    """The messages of a stream one at a time, with the read buffer in view: `buf` (the bytes read
    last), `pos` (the next frame's place in it), `base` (the stream offset of buf[0]). The feeder
    loads the frames of `buf` in C (`hotloops.load_frames`) and moves `pos` past them; whatever C
    leaves, `next_frame` reads."""

    __slots__ = ("stream", "path", "chunk", "buf", "pos", "base")

    def __init__(self, stream: BinaryIO, path: str | Path = "<stream>", chunk: int = CHUNK):
        self.stream, self.path, self.chunk = stream, path, chunk
        self.buf = _read(stream, path, 0, chunk)
        self.pos = self.base = 0

    def next_frame(self) -> tuple[int, bytes] | None:
        """(offset, message) of the frame at `pos`, reading more of the stream where it must; None
        at the end of the stream. TraceReadError for a broken frame."""
        stream, path, chunk = self.stream, self.path, self.chunk
        while True:
            buf, pos, base = self.buf, self.pos, self.base
            end = len(buf)
            if pos >= end:
                more = _read(stream, path, base + end, chunk)
                if not more:
                    return None
                self.base, self.buf, self.pos = base + end, more, 0
                continue
            try:
                length, body = decode_varint(buf, pos)
            except ValueError as e:
                raise TraceReadError(path, base + pos, f"corrupt length prefix: {e}") from None
            if length == 0:
                raise TraceReadError(path, base + pos,
                                     "zero-length message (Chakra's reader would stop here as if at end of file)")
            if length > MAX_MESSAGE:
                raise TraceReadError(path, base + pos, f"implausible message length {length}")
            if length > 0 and body + length <= end:
                self.pos = body + length
                return base + pos, buf[body:body + length]
            # read what the message still needs, at most 64 chunks at a time: growing the buffer
            # chunk by chunk would copy it over and over (minutes for a message of a few hundred MiB)
            need = chunk if length < 0 else min(max(chunk, body + length - end), 64 * chunk)
            more = _read(stream, path, base + end, need)
            if not more:
                if length < 0:
                    raise TraceReadError(path, base + pos, "file ends inside a length prefix")
                raise TraceReadError(path, base + pos, f"truncated message: length prefix says {length} "
                                     f"bytes, {end - body} remain")
            self.buf, self.base, self.pos = buf[pos:] + more, base + pos, 0


def _read(stream: BinaryIO, path, offset: int, size: int = CHUNK) -> bytes:
    try:
        return stream.read(size)
    except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError; zlib.error is not
        raise TraceReadError(path, offset, f"cannot decompress: {e}") from None


def looks_like_metadata(msg: bytes) -> bool:
    """True if every top-level field is GlobalMetadata's (1: version, 2: attr; both length-delimited).

    A Node starts with its id (field 1, a varint) or, for id 0, its name followed by its type
    (field 3): the two layouts can only coincide for an id-0 INVALID node with nothing but a name.
    """
    pos, n = 0, len(msg)
    try:
        while pos < n:
            b = msg[pos]
            if (b == 0x0A or b == 0x12) and pos + 1 < n and msg[pos + 1] < 0x80:  # the common case:
                pos += 2 + msg[pos + 1]  # a one-byte tag and a one-byte length, inline
                continue
            tag, pos = decode_varint(msg, pos)
            if tag < 0 or (tag >> 3) not in (1, 2) or (tag & 7) != 2:
                return False
            length, pos = decode_varint(msg, pos)
            if length < 0:
                return False
            pos += length
    except ValueError:
        return False
    return pos == n
