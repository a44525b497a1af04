"""`chakra-tools upgrade` on damaged legacy files (issue 32): every damage ends in a
ChakraToolsError naming the file (and the byte offset and node where it can), never another
exception, and leaves no partial output: no file, no temporary, no staging folder, an earlier
upgrade in the target untouched.

The files are built byte by byte as test_legacy.py builds them (the 2023 generator's layout),
then cut at every offset and damaged byte by byte; the specific faults (wrong wire types,
varints past 64 bits, huge lengths, attributes whose value today's schema cannot hold) are
spelled out below with the message each gives.
"""

from __future__ import annotations

import gzip
import struct
import subprocess
import sys

import pytest

from chakra_tools.core.errors import ChakraToolsError, TraceReadError
from chakra_tools.core.etio import TraceReader
from chakra_tools.core.upgrade import upgrade_set

from test_legacy import (BOOLS, COLL, COMP, INT, SEND, allgather, attr, ld, node, varint,  # noqa: E402
                         vi, write_legacy)

STRING = 8  # legacy AttributeType


def legacy_messages() -> list[bytes]:
    """A GlobalMetadata, a compute node, a collective after it and a send with attributes of
    every value field (string, 32-bit float, packed uint64s, packed floats)."""
    return [
        ld(1, attr("schema", STRING, s="1.0")),
        node(0, "COMP", COMP, attr("runtime", INT, i=5), attr("num_ops", INT, i=100)),
        node(1, "AG", COLL, attr("comm_type", INT, i=2), attr("comm_size", INT, i=65536),
             attr("involved_dim", BOOLS, bools=(1, 1)), parents=(0,)),
        node(2, "SEND", SEND, attr("src", INT, i=0), attr("dst", INT, i=1), attr("comm_size", STRING, s="4096"),
             ld(1, b"f") + varint(5 << 3 | 5) + struct.pack("<f", 1.5),
             ld(1, b"u") + ld(11, varint(3) + varint(300)),
             ld(1, b"ff") + ld(10, struct.pack("<ff", 1.0, 2.0))),
    ]


def outcome(src, dst) -> str:
    """'ok' (and the output reads back), or the ChakraToolsError's class; anything else fails."""
    try:
        upgrade_set(src, dst)
    except ChakraToolsError as e:
        assert str(src) in str(e), e
        return type(e).__name__
    list(TraceReader(dst))
    dst.unlink()
    return "ok"


def leftovers(folder, *keep: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


def test_every_cut_and_byte_damage_ends_fine_or_in_an_error_of_ours(tmp_path):
    good = b"".join(varint(len(m)) + m for m in legacy_messages())
    src, dst = tmp_path / "legacy.0.et", tmp_path / "new.0.et"
    src.write_bytes(good)
    assert outcome(src, dst) == "ok"
    damaged = [good[:cut] for cut in range(len(good))]
    damaged += [good[:i] + bytes([b]) + good[i + 1:] for i in range(len(good))
                for b in {0x00, 0xFF, good[i] ^ 0x80, good[i] ^ 0x07}]  # 0x07: the wire type of a tag
    seen: dict[str, int] = {}
    for data in damaged:
        src.write_bytes(data)
        got = outcome(src, dst)
        seen[got] = seen.get(got, 0) + 1
        assert leftovers(tmp_path, src.name) == [], got  # no output, no temporary file
    assert set(seen) <= {"ok", "TraceReadError", "InputError"} and seen.get("TraceReadError", 0) > len(good)


def test_every_cut_of_a_gzipped_file_too(tmp_path):
    good = gzip.compress(b"".join(varint(len(m)) + m for m in legacy_messages()), mtime=0)
    src, dst = tmp_path / "legacy.0.et.gz", tmp_path / "new.0.et"
    for cut in range(len(good)):
        src.write_bytes(good[:cut])
        outcome(src, dst)
        assert leftovers(tmp_path, src.name) == []


def _attribute(name: str, value: bytes) -> bytes:
    return ld(1, name.encode()) + vi(2, INT) + value


@pytest.mark.parametrize("message, reason", [
    (vi(1, 0) + vi(2, 5) + ld(11, _attribute("a", b"")),
     "legacy node does not decode: node 0 (''): name (field 2) is a varint, not length-delimited"),
    (vi(1, 4) + ld(2, b"x") + vi(3, 99) + ld(11, _attribute("a", b"")),
     "node 4 ('x'): type 99 is no node type (0..7)"),
    (varint(1 << 3) + bytes([0xFF] * 9 + [0x03]) + ld(11, _attribute("a", b"")),
     "legacy node does not decode: field 1: varint past 64 bits"),
    (vi(1, 0) + varint(11 << 3 | 2) + varint(2**40) + b"xx",
     "legacy node does not decode: length-delimited field runs past the message"),
    (vi(1, 0) + varint(11 << 3 | 3) + ld(11, _attribute("a", b"")),
     "legacy node does not decode: wire type 3 is not used by Chakra"),
    (node(7, "C", COLL, _attribute("comm_size", ld(8, b"abc"))),
     "node 7 ('C'): attribute 'comm_size': string_val 'abc' is no int64_val"),
    (node(7, "C", COLL, _attribute("comm_size", varint(5 << 3 | 5) + struct.pack("<f", 1.5))),
     "attribute 'comm_size': float_val 1.5 is no int64_val"),
    (node(7, "C", SEND, _attribute("src", vi(7, 2**40))),
     "attribute 'comm_src': int64_val 1099511627776 is no int32_val"),
    (node(7, "C", COMP, _attribute("tensor_size", vi(7, 2**64 - 1))),
     "attribute 'tensor_size': int64_val -1 is no uint64_val"),
    (node(7, "C", COLL, _attribute("involved_dim", vi(4, 1))),
     "attribute 'involved_dim': bool_val True is no bool_list"),
    (node(7, "C", COMP, _attribute("f", ld(10, bytes(5)))),
     "attribute 'f': float list (field 10): 5 bytes, not a whole number of floats"),
    (node(7, "C", COMP, _attribute("f", varint(5 << 3 | 2) + varint(4) + bytes(4))),
     "attribute 'f': float value (field 5) is length-delimited, not a 32-bit value"),
    (node(7, "C", COMP, _attribute("u", ld(11, b"\xff"))),
     "attribute 'u': integer list (field 11): packed varints end early"),
])
def test_each_fault_names_the_file_the_offset_and_the_node(tmp_path, message, reason):
    first = node(0, "ok", COMP, attr("runtime", INT, i=1))
    src = write_legacy(tmp_path / "legacy.0.et", first, message)
    with pytest.raises(TraceReadError) as e:
        upgrade_set(src, tmp_path / "new.0.et")
    offset = len(varint(len(first))) + len(first)
    assert str(e.value).startswith(f"{src}: byte {offset}: "), e.value
    assert reason in str(e.value) and "(last good node: %0 COMP 'ok'" in str(e.value), e.value
    assert leftovers(tmp_path, src.name) == []


@pytest.mark.parametrize("value, kept", [
    (b"", (None, None)),                       # a name only: today's Attr of no kind
    (vi(20, 3), (None, None)),                 # an unknown value field: skipped, as protobuf does
    (ld(8, b" 12 "), ("int64_val", 12)),       # the generator's numbers as text
])
def test_attributes_of_no_or_unknown_kind_are_kept_as_today_s_schema_holds_them(tmp_path, value, kept):
    name = "comm_size" if kept[0] else "mystery"
    src = write_legacy(tmp_path / "legacy.0.et", node(0, "C", COLL, _attribute(name, value)))
    upgrade_set(src, tmp_path / "new.0.et")
    (n,) = TraceReader(tmp_path / "new.0.et")
    assert (n.attrs[name].kind, n.attrs[name].value) == kept


def test_a_damaged_rank_leaves_an_earlier_upgrade_whole(tmp_path):
    """All or nothing for a set: staged, then committed (core/commit.py)."""
    old = allgather(tmp_path / "old", ranks=3)
    (old / "comm_group.json").write_text('{"1": [0, 1, 2]}')
    upgrade_set(old, tmp_path / "new")
    before = {p.name: p.read_bytes() for p in (tmp_path / "new").iterdir()}
    assert sorted(before) == ["comm_group.json"] + [f"one_comm_coll_node_allgather.{r}.et" for r in range(3)]
    last = old / "one_comm_coll_node_allgather.2.et"
    last.write_bytes(last.read_bytes()[:-3])
    with pytest.raises(TraceReadError, match=f"{last}: byte 0: truncated message"):
        upgrade_set(old, tmp_path / "new")
    assert {p.name: p.read_bytes() for p in (tmp_path / "new").iterdir()} == before
    with pytest.raises(TraceReadError):
        upgrade_set(old, tmp_path / "a" / "b")
    assert leftovers(tmp_path) == ["new", "old"]  # no folder made for nothing


def test_a_smaller_set_replaces_an_earlier_one_whole(tmp_path):
    upgrade_set(allgather(tmp_path / "four", ranks=4), tmp_path / "new")
    upgrade_set(allgather(tmp_path / "two", ranks=2), tmp_path / "new")
    assert leftovers(tmp_path / "new") == [f"one_comm_coll_node_allgather.{r}.et" for r in range(2)]


def test_cli_upgrade_of_a_damaged_file_exits_2_without_a_traceback(tmp_path):
    src = write_legacy(tmp_path / "legacy.0.et", node(7, "C", SEND, _attribute("src", vi(7, 2**40))))
    code = "from chakra_tools.cli.main import main; main()"
    res = subprocess.run([sys.executable, "-c", code, "upgrade", str(src), str(tmp_path / "new.0.et")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"{src}: byte 0: legacy node does not decode: node 7 ('C'): attribute 'comm_src'" in res.stderr
    assert leftovers(tmp_path, src.name) == []


def test_a_file_whose_first_message_is_no_message_is_named_damaged_not_current(tmp_path):
    """Nothing tells such a file's format; it was "not a legacy Chakra ET: it reads as today's
    format", which sent the user to a reader that refuses it too."""
    src = write_legacy(tmp_path / "legacy.0.et", vi(1, 0) + varint(11 << 3 | 2) + varint(2**40) + b"xx")
    with pytest.raises(TraceReadError) as e:
        upgrade_set(src, tmp_path / "new.0.et")
    assert str(e.value) == (f"{src}: byte 0: message does not decode: length-delimited field runs past "
                            "the message (before the first node)")


def test_a_file_upgraded_into_a_folder_keeps_its_name(tmp_path):
    """As cp does; it was an error naming a hidden temporary file ("Is a directory")."""
    src = allgather(tmp_path / "old", ranks=1) / "one_comm_coll_node_allgather.0.et"
    (tmp_path / "new").mkdir()
    (done,) = upgrade_set(src, tmp_path / "new")
    assert done.target == str(tmp_path / "new" / src.name) and len(list(TraceReader(done.target))) == 1
