"""The core's facade of compiled loops (core/hotloops.py): the Python twin of the encoder frames
what the compiled one frames, stops where it must, and `python_twins()` switches both loops."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_tools.core import encoder, hotloops
from chakra_tools.core.errors import TraceWriteError
from chakra_tools.core.etwrite import write_trace
from chakra_tools.core.model import Attr, Node, NodeType

from et_strategies import node_lists

compiled = pytest.mark.skipif(hotloops.COMPILED is None, reason="core/_hotloops.c not built")


def written(nodes, folder: Path, name: str) -> bytes:
    write_trace(folder / name, nodes)
    return (folder / name).read_bytes()


@compiled
@settings(max_examples=200, deadline=None)
@given(node_lists())
def test_the_twin_frames_what_the_compiled_encoder_frames(nodes):
    data, stop = encoder.encode_frames(nodes, 0)
    assert stop == len(nodes)  # these nodes are all encodable, and far from a chunk
    with tempfile.TemporaryDirectory() as d:
        picked = written(nodes, Path(d), "c.et")
        with hotloops.python_twins():
            twin = written(nodes, Path(d), "py.et")
    assert twin == picked and picked.endswith(data)


def test_the_twin_stops_at_a_node_it_cannot_encode_and_the_writer_names_it(tmp_path):
    good = [Node(1, "a", NodeType.COMP_NODE), Node(2, "b", NodeType.COMP_NODE, (1,))]
    bad = Node(3, "bool out of range", NodeType.COMP_NODE, attrs={"b": Attr("bool_val", 2)})
    data, stop = encoder.encode_frames(good + [bad] + good, 0)
    assert stop == 2 and data == b"".join(encoder.frame(encoder.encode_node(n)) for n in good)
    assert encoder.encode_frames([Node(0, "", NodeType.INVALID_NODE)], 0) == (b"", 0)  # would read as EOF
    with hotloops.python_twins(), pytest.raises(TraceWriteError, match="node 3"):
        write_trace(tmp_path / "t.0.et", good + [bad] + good)
    assert list(tmp_path.iterdir()) == []


def test_the_twin_stops_after_a_chunk():
    nodes = [Node(i, "op" * 60, NodeType.COMP_NODE, (i - 1,)) for i in range(1, 40_001)]
    data, stop = encoder.encode_frames(nodes, 0)
    assert 0 < stop < len(nodes) and encoder.CHUNK_BYTES <= len(data) < encoder.CHUNK_BYTES + 200


def test_python_twins_switches_both_loops_for_the_block_only():
    picked = (hotloops.encode_frames, hotloops.plain_run)
    with hotloops.python_twins():
        assert hotloops.encode_frames is encoder.encode_frames
        assert hotloops.plain_run([Node(1, "a", NodeType.COMP_NODE)], 0, 0, 1) == 0  # claims none
    assert (hotloops.encode_frames, hotloops.plain_run) == picked


def _decoded_fields(msg: bytes):
    """What the reference (core/shapes.py, decoding with protobuf) takes from a metadata message."""
    with hotloops.python_twins():
        from chakra_tools.core.shapes import metadata_fields

        return metadata_fields(msg)


_VALUES = st.one_of(st.none(), st.integers(-2**31, 2**31 - 1), st.integers(0, 2**64 - 1), st.booleans(),
                    st.text(max_size=12), st.floats(allow_nan=False), st.lists(st.integers(0, 9), max_size=3))


@compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["world_size", "rank", "conversion", "host", "process_groups"]),
                          _VALUES), max_size=6),
       st.sampled_from(["int32", "int64", "uint64", "sint64", "fixed64", "sfixed32"]))
def test_metadata_fields_read_in_c_are_what_protobuf_decodes(attrs, int_kind):
    """Attributes of every kind, repeated names (the last one counts), negative ranks, booleans
    and strings where integers belong: the C reader gives the reference's three fields, or
    punts (None) and leaves them to it."""
    from chakra_tools.core.schema import et_def_pb2 as pb

    msg = pb.GlobalMetadata(version="0.0.4")
    for name, value in attrs:
        a = msg.attr.add(name=name)
        if isinstance(value, bool):
            a.bool_val = value
        elif isinstance(value, int):
            if int_kind in ("int32", "sfixed32") and not -2**31 <= value < 2**31 or \
                    int_kind in ("int64", "sint64") and not -2**63 <= value < 2**63 or \
                    int_kind in ("uint64", "fixed64") and value < 0:
                value = abs(value) % 2**31
            setattr(a, f"{int_kind}_val", value)
        elif isinstance(value, str):
            a.string_val = value
        elif isinstance(value, float):
            a.double_val = value
        elif isinstance(value, list):
            a.int64_list.values.extend(value)
    raw = msg.SerializeToString()
    got = hotloops.COMPILED.metadata_fields(raw)
    assert got is None or got == _decoded_fields(raw)
    if attrs:
        assert got is not None  # a well-formed message with attributes is read in C


@compiled
def test_metadata_fields_punt_where_protobuf_might_refuse():
    from chakra_tools.core.schema import et_def_pb2 as pb

    raw = pb.GlobalMetadata(version="0.0.4", attr=[pb.AttributeProto(name="rank", int64_val=3)]).SerializeToString()
    assert hotloops.COMPILED.metadata_fields(raw) == (None, 3, None)
    for bad in (raw[:-1], raw + b"\x1a\x00", b"\x0a\x02\xff\xfe" + raw[7:], b"\x0a\x050.0.4"):
        assert hotloops.COMPILED.metadata_fields(bad) is None  # cut, unknown field, not UTF-8, no attribute


@compiled
def test_nodes_read_from_a_file_are_written_by_the_compiled_run(tmp_path, monkeypatch):
    """A read node's attributes stay undecoded (etio.PbAttrs), which the compiled encoder does
    not take: write_all hands it plain ones, and the file it writes is the one it read."""
    from chakra_tools.core.etio import TraceReader
    from chakra_tools.core.etwrite import TraceWriter
    from chakra_tools.core.model import make_attrs

    nodes = [Node(i, f"op{i}", NodeType.COMP_NODE, (i - 1,) if i > 1 else (),
                  attrs=make_attrs(is_cpu_op=True, num_ops=i, tensor_size=i * 4)) for i in range(1, 200)]
    write_trace(tmp_path / "a.0.et", nodes)
    read = list(TraceReader(tmp_path / "a.0.et"))
    assert type(read[0].attrs) is not dict
    alone = []
    monkeypatch.setattr(TraceWriter, "write", lambda self, node: alone.append(node))
    with TraceWriter(tmp_path / "b.0.et", TraceReader(tmp_path / "a.0.et").metadata) as w:
        w.write_all(read)
    assert alone == [] and (tmp_path / "b.0.et").read_bytes() == (tmp_path / "a.0.et").read_bytes()
