"""Error paths of the reader and writer, and atomic writes."""

from __future__ import annotations

import gc
import warnings

import pytest

from chakra_tools.core import encoder, etio, etwrite
from chakra_tools.core.errors import ChakraToolsError, InputError, TraceReadError, TraceWriteError
from chakra_tools.core.etio import TraceReader, iter_nodes
from chakra_tools.core.etwrite import TraceWriter, write_trace
from chakra_tools.core.commit import atomic_output
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import Node, NodeType, make_attrs
from chakra_tools.core.schema import et_def_pb2 as pb

NODES = [Node(i, f"op{i}", NodeType.COMP_NODE, (i - 1,) if i else ()) for i in range(5)]
EMPTY_NODE = Node(0, "", NodeType.INVALID_NODE)  # every field at its default: encodes to b""


def frame(msg) -> bytes:
    data = msg.SerializeToString()
    return etio._varint_bytes(len(data)) + data


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# -- reading ------------------------------------------------------------------------------------

def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"nope\.0\.et: cannot open: No such file"):
        TraceReader(tmp_path / "nope.0.et")


def test_directory_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot open"):
        TraceReader(tmp_path)


def test_not_a_trace(shared_fixtures):
    p = shared_fixtures / "astra-sim" / "configs" / "Ring_4chunks.json"
    with pytest.raises(TraceReadError) as info:
        list(iter_nodes(p))
    assert info.value.offset == 0 and str(p) in str(info.value)
    assert "before the first node" in str(info.value)


def test_gzip_garbage(tmp_path):
    p = tmp_path / "g.0.et.gz"
    p.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"this is not deflate data at all")
    with pytest.raises(TraceReadError, match="cannot decompress"):
        list(iter_nodes(p))


def test_zero_length_message_is_an_error_not_eof(tmp_path):
    """Chakra's reader stops at a zero length as if at end of file; we say where it is."""
    from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

    head = frame(pb.GlobalMetadata(version="0.0.4")) + frame(pb.Node(id=1, name="a", type=4))
    p = tmp_path / "z.0.et"
    p.write_bytes(head + b"\x00" + frame(pb.Node(id=2, name="b", type=4)))
    with pytest.raises(TraceReadError) as info:
        list(iter_nodes(p))
    assert info.value.offset == len(head)
    assert "zero-length message" in str(info.value)
    assert info.value.last_good == "%1 COMP 'a'"
    # the reference silently drops node 2: that is the weakness we refuse to copy
    f = openFileRd(str(p))
    got = []
    while decodeMessage(f, msg := (pb.GlobalMetadata() if not got else pb.Node())):
        got.append(msg)
    f.close()
    assert len(got) == 2  # metadata + node 1 only


def test_trailing_zero_byte_is_an_error(tmp_path):
    p = tmp_path / "z.0.et"
    write_trace(p, NODES)
    size = p.stat().st_size
    p.write_bytes(p.read_bytes() + b"\x00")
    with pytest.raises(TraceReadError) as info:
        list(iter_nodes(p))
    assert info.value.offset == size and info.value.last_good == str(NODES[-1])


def test_framing_error_names_the_last_good_node(tmp_path):
    p = tmp_path / "t.0.et"
    write_trace(p, NODES)
    p.write_bytes(p.read_bytes()[:-2])
    with pytest.raises(TraceReadError) as info:
        list(iter_nodes(p))
    assert info.value.last_good == str(NODES[-2])
    assert f"(last good node: {NODES[-2]})" in str(info.value)


def test_unknown_node_type_is_an_error_naming_the_node(tmp_path):
    p = tmp_path / "t.0.et"
    p.write_bytes(frame(pb.GlobalMetadata(version="1")) + frame(pb.Node(id=7, name="x", type=42)))
    with pytest.raises(TraceReadError, match="node 7 has unknown node type 42"):
        list(iter_nodes(p))


def test_errors_gain_context_as_they_climb(tmp_path):
    write_trace(tmp_path / "t.0.et", NODES)
    (tmp_path / "t.1.et").write_bytes(b"\x05abc")
    with pytest.raises(TraceReadError) as info:
        RankSet.load(tmp_path / "t")
    assert str(info.value).startswith("rank 1: ") and "t.1.et: byte 0" in str(info.value)


@pytest.mark.parametrize("name", ["t.0.et", "t.0.et.gz"])
def test_reading_closes_the_file(tmp_path, name):
    """Exhausting (or failing) a reader releases its file handle, gzip included: no
    ResourceWarning ("unclosed file") when the reader is collected."""
    p = tmp_path / name
    write_trace(p, NODES)
    bad = tmp_path / ("bad" + name[1:])
    bad.write_bytes(p.read_bytes()[:-3])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert list(iter_nodes(p)) == NODES
        with pytest.raises(TraceReadError):
            list(iter_nodes(bad))
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_file_without_global_metadata(tmp_path):
    """Older generators wrote no GlobalMetadata: all nodes are read and the assumption reported."""
    p = tmp_path / "old.0.et"
    p.write_bytes(b"".join(frame(pb.Node(id=i, name=f"n{i}", type=4)) for i in range(3)))
    r = TraceReader(p)
    assert [n.id for n in r] == [0, 1, 2]
    assert r.metadata.present is False
    assert [d.code for d in r.diagnostics] == ["no-metadata"]


# -- writing ------------------------------------------------------------------------------------

def test_writer_refuses_a_node_that_encodes_to_zero_bytes(tmp_path):
    p = tmp_path / "t.0.et"
    assert pb.Node(id=0, name="", type=0).SerializeToString() == b""
    with pytest.raises(TraceWriteError, match="zero bytes"):
        write_trace(p, [NODES[0], EMPTY_NODE])
    assert leftovers(tmp_path) == []
    # one non-default field is enough
    write_trace(p, [Node(0, "", NodeType.COMP_NODE)])
    assert list(iter_nodes(p)) == [Node(0, "", NodeType.COMP_NODE)]


def test_failed_write_keeps_the_old_file(tmp_path):
    p = tmp_path / "t.0.et"
    write_trace(p, NODES)
    before = p.read_bytes()

    def gen():
        yield NODES[0]
        raise RuntimeError("generator failed")

    with pytest.raises(RuntimeError):
        write_trace(p, gen())
    with pytest.raises(TraceWriteError):
        write_trace(p, [EMPTY_NODE])
    assert p.read_bytes() == before and leftovers(tmp_path) == ["t.0.et"]


@pytest.mark.parametrize("name", ["t.0.et", "t.0.et.gz"])
def test_failed_rename_leaves_nothing(tmp_path, monkeypatch, name):
    def refuse(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(etwrite.os, "replace", refuse)
    with pytest.raises(OSError):
        write_trace(tmp_path / name, NODES)
    assert leftovers(tmp_path) == []


def test_abort_leaves_nothing(tmp_path):
    w = TraceWriter(tmp_path / "t.0.et.gz")
    w.write(NODES[0])
    w.abort()
    assert leftovers(tmp_path) == []


def test_unwritable_destination_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot write"):
        TraceWriter(tmp_path / "no" / "such" / "dir" / "t.0.et")


def test_atomic_output_leaves_nothing_on_failure(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("old")
    with pytest.raises(ValueError):
        with atomic_output(p, "w") as f:
            f.write("new, half written")
            raise ValueError("boom")
    assert p.read_text() == "old" and leftovers(tmp_path) == ["x.json"]
    with atomic_output(p, "w") as f:
        f.write("new")
    assert p.read_text() == "new" and leftovers(tmp_path) == ["x.json"]


def test_rankset_write_is_all_or_nothing(tmp_path):
    good = Graph(NODES, rank=0)
    bad = Graph([NODES[1], EMPTY_NODE], rank=1)  # a node the writer refuses, on the second rank
    rs = RankSet({0: good, 1: bad}, {"1": (0, 1)})
    with pytest.raises(ChakraToolsError):
        rs.write(tmp_path / "out")
    assert not (tmp_path / "out").exists()  # not even the folder it made
    written = RankSet({0: good, 1: Graph(NODES, rank=1)}, {"1": (0, 1)}).write(tmp_path / "out", "w")
    assert [p.name for p in written] == ["w.0.et", "w.1.et", "comm_group.json"]
    back = RankSet.load(tmp_path / "out")
    assert back.ranks == [0, 1] and back.comm_groups == {"1": (0, 1)} and list(back[1]) == NODES


def test_contract_kind_warnings_on_read(tmp_path):
    """What the reader had to assume is reported, not fixed silently."""
    m = pb.Node(id=1, name="c", type=7)
    m.attr.add(name="comm_size", int32_val=64)   # int kind, but not the contract's int64_val
    m.attr.add(name="pg_name", int64_val=3)      # wrong kind entirely
    p = tmp_path / "k.0.et"
    p.write_bytes(frame(pb.GlobalMetadata(version="1")) + frame(m))
    r = TraceReader(p)
    (n,) = list(r)
    assert n.comm_size == 64 and n.pg_name == ""
    codes = sorted(d.code for d in r.diagnostics)
    assert "int-kind" in codes and "attr-kind" in codes
    assert any("comm_type" in d.message for d in r.diagnostics)  # COMM_COLL without comm_type


def test_make_attrs_gives_contract_kinds():
    a = make_attrs(comm_type=2, comm_size=4096, comm_src=1, comm_dst=2, comm_tag=3, pg_name="1",
                   is_cpu_op=0, num_ops=10, tensor_size=20, involved_dim=[True, False], other=None)
    assert {k: v.kind for k, v in a.items()} == {
        "comm_type": "int64_val", "comm_size": "int64_val", "comm_src": "int32_val",
        "comm_dst": "int32_val", "comm_tag": "int32_val", "pg_name": "string_val",
        "is_cpu_op": "bool_val", "num_ops": "int64_val", "tensor_size": "uint64_val",
        "involved_dim": "bool_list"}
    assert a["is_cpu_op"].value is False and a["involved_dim"].value == (True, False)


@pytest.mark.parametrize("node", [
    Node(-1, "negative id", NodeType.COMP_NODE),
    Node(1, "negative dep", NodeType.COMP_NODE, (-5,)),
    Node(1, "negative ctrl dep", NodeType.COMP_NODE, (), (-16384,)),
    Node(1, "negative start", NodeType.COMP_NODE, start_time_micros=-20000),
    Node(1 << 64, "id over uint64", NodeType.COMP_NODE),
    Node(1, "duration over uint64", NodeType.COMP_NODE, duration_micros=1 << 70),
    Node(1, "\ud800 lone surrogate", NodeType.COMP_NODE),
    Node(1, "int32 overflow", NodeType.COMP_NODE, attrs={"x": make_attrs(comm_src=1 << 40)["comm_src"]}),
], ids=lambda n: n.name)
def test_writer_refuses_values_the_format_cannot_hold(tmp_path, node):
    """Never silently different bytes (a negative id once wrote 16383): a TraceWriteError naming
    the node, and no file."""
    p = tmp_path / "t.0.et"
    with pytest.raises(TraceWriteError, match="cannot be encoded"):
        write_trace(p, [NODES[1], node])
    assert leftovers(tmp_path) == []


def test_a_large_message_is_read_in_few_reads(tmp_path, monkeypatch):
    """A message longer than the read buffer is fetched in one go, not grown 1 MiB at a time
    (that copied the buffer over and over: 31 s for one 200 MiB message, and minutes for a large
    file whose corrupted length prefix claims 2 GiB)."""
    blob = bytes(range(256)) * (24 << 12)  # 24 MiB
    big = Node(1, "big", NodeType.COMP_NODE, attrs={"blob": make_attrs(b=blob)["b"]})
    write_trace(tmp_path / "big.0.et", [NODES[0], big, NODES[2]])
    reads = []
    real_open = etio.open_binary

    class Counting:
        def __init__(self, f):
            self.f = f

        def read(self, n=-1):
            reads.append(n)
            return self.f.read(n)

        def close(self):
            self.f.close()

    monkeypatch.setattr(etio, "open_binary", lambda p: Counting(real_open(p)))
    got = list(iter_nodes(tmp_path / "big.0.et"))
    assert got == [NODES[0], big, NODES[2]]
    assert len(reads) <= 5, reads


def test_missing_comm_type_is_reported_even_if_its_name_appears_in_a_value(tmp_path):
    p = tmp_path / "c.0.et"
    write_trace(p, [Node(2, "d", NodeType.COMM_COLL_NODE, attrs=make_attrs(note="\n\tcomm_type"))])
    r = TraceReader(p)
    list(r)
    assert [d.code for d in r.diagnostics] == ["assumed-all-reduce"]


def test_writer_does_not_keep_large_attribute_values(tmp_path):
    """The writer's attribute cache (module-wide, it outlives writers) holds small values only."""
    blob = b"y" * (1 << 20)
    write_trace(tmp_path / "c.0.et", [Node(1, "b", NodeType.COMP_NODE, attrs=make_attrs(blob=blob))])
    assert all(len(v) <= 4096 for v in encoder._ATTR_CACHE.values())
    assert not any(blob in k for k in encoder._ATTR_CACHE)
