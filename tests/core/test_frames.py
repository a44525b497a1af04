"""Length-delimited frames of a `.et` file: the inline one- and two-byte prefix paths and the
general path give the same messages, wherever the read boundaries fall."""

from __future__ import annotations

import io

import pytest

from chakra_tools.core.errors import TraceReadError
from chakra_tools.core.etio import _varint_bytes
from chakra_tools.core.framing import iter_frames

SIZES = (1, 127, 128, 129, 300, 16_383, 16_384, 70_000)


def _stream(bodies):
    return io.BytesIO(b"".join(_varint_bytes(len(b)) + b for b in bodies))


@pytest.mark.parametrize("chunk", [7, 130, 16_385, 1 << 20])
def test_every_prefix_length_at_every_read_boundary(chunk):
    bodies = [bytes([i % 251]) * n for i, n in enumerate(SIZES * 3)]
    frames = list(iter_frames(_stream(bodies), chunk=chunk))
    assert [b for _, b in frames] == bodies
    offsets = [0]
    for b in bodies[:-1]:
        offsets.append(offsets[-1] + len(_varint_bytes(len(b))) + len(b))
    assert [o for o, _ in frames] == offsets


def test_a_two_byte_prefix_of_zero_is_refused_as_the_general_path_refuses_it():
    with pytest.raises(TraceReadError, match="zero-length"):
        list(iter_frames(io.BytesIO(b"\x80\x00" + b"x" * 4)))
