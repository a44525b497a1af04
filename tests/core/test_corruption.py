"""Truncated and corrupted files: a clean `TraceReadError` naming the file and byte offset, or
exactly what the bytes say — never another exception type, a hang, or a silently shorter graph.

The format has no footer and no checksum, which bounds what any reader can promise:

* A file cut exactly at a message boundary *is* a valid, shorter trace. So for a cut at a
  boundary we assert that what was read is exactly the prefix of the original up to that
  boundary; for any other cut, an error at the offset of the message that was cut.
* A corrupted byte inside a message body may still decode (protobuf has no checksum), giving a
  different node. So for corruption we assert against an independent oracle
  (`et_strategies.frames` + protobuf's own decoder): either the framing of the corrupted bytes is
  broken and we raise, or a frame does not decode and we raise at that frame's offset, or every
  frame decodes and we return exactly those nodes. When the corrupted byte is not in a length
  prefix, the framing is unchanged, so the result has the original's length-prefix structure and
  every node outside the corrupted message is the original node.
* gzip has a CRC and a length in its trailer: any cut of a gzip file is an error, and any
  corrupted byte is an error or changes nothing (bits gzip ignores: MTIME, XFL, OS, the FTEXT and
  reserved flag bits, the padding after the last deflate block; found by flipping every byte of a
  small file to every value).
"""

from __future__ import annotations

import contextlib
import gzip
import signal

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_tools.core.errors import ChakraToolsError, TraceReadError
from chakra_tools.core.etio import LEGACY_SNIFF, TraceReader, node_from_pb
from chakra_tools.core.etwrite import write_trace
from chakra_tools.core.schema import et_def_pb2 as pb

from et_strategies import frames, node_lists, split_frames

PROPS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@contextlib.contextmanager
def no_hang(seconds: int = 20):
    """Fail (instead of hanging the suite) if the body runs longer than `seconds`."""
    if not hasattr(signal, "SIGALRM"):  # Windows: no guard
        yield
        return

    def on_alarm(*_):
        raise AssertionError(f"reader did not finish within {seconds} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def read_all(path):
    """(metadata, nodes) or the TraceReadError; any other exception fails the test."""
    with no_hang():
        try:
            reader = TraceReader(path)
            return reader.metadata, list(reader), None
        except TraceReadError as e:
            assert str(path) in str(e) and f"byte {e.offset}" in str(e), str(e)
            return None, None, e


def same(a: list, b: list) -> bool:
    """Equal node lists, where a NaN (which a corrupted double can become) equals a NaN."""
    return len(a) == len(b) and all(x == y or repr(x) == repr(y) for x, y in zip(a, b))


def oracle(data: bytes, metadata_present: bool):
    """What the bytes say, decoded without our reader: ("nodes", [...]) or ("error", offset) where
    offset is the first message that does not decode, or has the legacy layout among the first
    LEGACY_SNIFF nodes (docs/reference/format.md, Legacy files), or, before that, where the framing breaks."""
    fr, broken = split_frames(data)
    out = []
    for k, (offset, body) in enumerate(fr[1:] if metadata_present else fr):
        try:
            m = pb.Node.FromString(body)
            out.append(node_from_pb(m))
        except (DecodeError, ValueError):
            return "error", offset
        if k < LEGACY_SNIFF and _legacy_layout(m):
            return "error", offset
    return ("nodes", out) if broken is None else ("error", broken)


def _legacy_layout(m) -> bool:
    """Fields today's Node does not have, as the legacy (proto2-era) Node had them: strings in
    6 and 7, attributes in 11 (protobuf keeps them as unknown fields)."""
    from google.protobuf.unknown_fields import UnknownFieldSet

    return any(f.field_number in (6, 7, 11) and f.wire_type == 2 for f in UnknownFieldSet(m))


@PROPS
@given(nodes=node_lists(max_size=8), data=st.data())
def test_truncation_is_an_error_or_an_exact_prefix(tmp_path, nodes, data):
    full = tmp_path / "full.0.et"
    write_trace(full, nodes)
    raw = full.read_bytes()
    starts = [off for off, _ in frames(raw)]  # frame 0 is the GlobalMetadata
    cut = data.draw(st.integers(0, len(raw) - 1), label="cut")
    path = tmp_path / "cut.0.et"
    path.write_bytes(raw[:cut])
    meta, got, err = read_all(path)
    if cut in starts:
        # a cut at a message boundary is a valid shorter file: exactly the prefix up to it
        assert err is None, f"cut at boundary {cut}: {err}"
        k = starts.index(cut)
        assert meta.present == (k > 0)
        assert got == nodes[: max(k - 1, 0)]
    else:
        # any other cut: an error at the start of the message that was cut
        assert err is not None, f"cut at {cut} (boundaries {starts}) read {len(got)} nodes"
        j = max(i for i, s in enumerate(starts) if s < cut)
        assert err.offset == starts[j]
        assert err.last_good == (str(nodes[j - 2]) if j >= 2 else None)


@PROPS
@given(nodes=node_lists(max_size=8), data=st.data())
def test_gzip_truncation_is_always_an_error(tmp_path, nodes, data):
    full = tmp_path / "full.0.et.gz"
    write_trace(full, nodes)
    raw = full.read_bytes()
    cut = data.draw(st.integers(1, len(raw) - 1), label="cut")
    path = tmp_path / "cut.0.et.gz"
    path.write_bytes(raw[:cut])
    _, got, err = read_all(path)
    assert err is not None, f"gzip cut at {cut} of {len(raw)} read {len(got)} nodes silently"


@PROPS
@given(nodes=node_lists(max_size=8), data=st.data())
def test_corrupted_byte_gives_an_error_or_what_the_bytes_say(tmp_path, nodes, data):
    full = tmp_path / "full.0.et"
    write_trace(full, nodes)
    raw = full.read_bytes()
    pos = data.draw(st.integers(0, len(raw) - 1), label="pos")
    new = data.draw(st.integers(0, 255).filter(lambda b: b != raw[pos]), label="byte")
    bad = raw[:pos] + bytes([new]) + raw[pos + 1:]
    path = tmp_path / "bad.0.et"
    path.write_bytes(bad)
    meta, got, err = read_all(path)

    if err is None:
        kind, expected = oracle(bad, meta.present)
        assert kind == "nodes", f"we read {len(got)} nodes; the oracle says error at {expected}"
        assert same(got, expected)
    else:
        kind, offset = oracle(bad, present_guess(bad))
        assert (kind, offset) == ("error", err.offset), (str(err), kind, offset)

    # corruption outside the length prefixes keeps the framing: same structure, other nodes intact
    orig = frames(raw)
    if any(_body_start(raw, off) <= pos < _body_start(raw, off) + len(body) for off, body in orig):
        assert [o for o, _ in frames(bad)] == [o for o, _ in orig]
        if err is None:
            hit = max(i for i, (o, _) in enumerate(orig) if o <= pos)
            nodes_by_frame = dict(enumerate(got, start=1 if meta.present else 0))
            assert len(got) == len(nodes) + (0 if meta.present else 1)
            for i, n in enumerate(nodes, start=1):
                if i != hit:
                    assert same([nodes_by_frame[i]], [n])


def _body_start(raw: bytes, off: int) -> int:
    pos = off
    while raw[pos] & 0x80:
        pos += 1
    return pos + 1


def present_guess(bad: bytes) -> bool:
    """Whether our reader took frame 0 as GlobalMetadata (it raised, so ask it once more)."""
    fr, _ = split_frames(bad)
    if not fr:
        return True
    from chakra_tools.core.framing import looks_like_metadata
    if not looks_like_metadata(fr[0][1]):
        return False
    try:
        pb.GlobalMetadata.FromString(fr[0][1])
        return True
    except DecodeError:
        return False


@PROPS
@given(nodes=node_lists(max_size=8), data=st.data())
def test_corrupted_gzip_is_an_error_or_the_original(tmp_path, nodes, data):
    full = tmp_path / "full.0.et.gz"
    write_trace(full, nodes)
    raw = full.read_bytes()
    pos = data.draw(st.integers(2, len(raw) - 1), label="pos")  # keep the magic: else it is not gzip
    new = data.draw(st.integers(0, 255).filter(lambda b: b != raw[pos]), label="byte")
    path = tmp_path / "bad.0.et.gz"
    path.write_bytes(raw[:pos] + bytes([new]) + raw[pos + 1:])
    _, got, err = read_all(path)
    if err is None:
        # bits gzip does not use (MTIME, XFL, OS, FTEXT and reserved flag bits, the padding after
        # the last deflate block) change nothing; anything else must have been an error
        assert got == nodes, f"corrupting gzip byte {pos} gave a different graph"


def test_every_single_cut_of_a_small_file(tmp_path):
    """Exhaustive over one file, so the boundary logic does not rest on random draws alone."""
    from chakra_tools.core.model import Node, NodeType, make_attrs
    nodes = [Node(i, f"op{i}", NodeType.COMP_NODE, (i - 1,) if i else (), attrs=make_attrs(num_ops=i * 1000))
             for i in range(20)]
    full = tmp_path / "f.0.et"
    write_trace(full, nodes)
    raw = full.read_bytes()
    starts = [o for o, _ in frames(raw)]
    shorter = 0
    for cut in range(len(raw)):
        (tmp_path / "c.0.et").write_bytes(raw[:cut])
        meta, got, err = read_all(tmp_path / "c.0.et")
        if cut in starts:
            assert got == nodes[: max(starts.index(cut) - 1, 0)]
            shorter += 1
        else:
            assert err is not None
    assert shorter == len(nodes) + 1  # the empty file and every boundary after the metadata


def test_non_trace_errors_are_chakra_tools_errors(tmp_path):
    """A range of not-a-trace inputs: every one is a ChakraToolsError, none another type."""
    samples = {
        "json": b'{"schema": "1.0.1", "nodes": []}',
        "text": b"MICRO\n1\nconv1 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1048576 5\n",
        "ones": b"\xff" * 64,
        "gzip_garbage": b"\x1f\x8b" + bytes(range(256)),
        "gzip_header_only": gzip.compress(b"")[:10],
        "gzip_of_text": gzip.compress(b"hello world, not a trace " * 20),
        "long_varint": b"\x80" * 11 + b"\x01",
        "huge_length": b"\xff\xff\xff\xff\x7f" + b"\x00" * 16,
    }
    for name, data in samples.items():
        p = tmp_path / f"{name}.0.et"
        p.write_bytes(data)
        with pytest.raises(ChakraToolsError) as info:
            with no_hang():
                list(TraceReader(p))
        assert str(p) in str(info.value), name
