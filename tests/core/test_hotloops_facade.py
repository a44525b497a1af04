"""The core's facade of compiled loops (core/hotloops.py): the Python twin of the encoder frames
what the compiled one frames, stops where it must, and `python_twins()` switches both loops."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings

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
