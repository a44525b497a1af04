"""The feeder's compiled window (`Window` in core/_hotloops.c): what it holds per node, the names
it shares across feeders and frees, its compaction, the record views it hands out (the same as
the reference's `_Loaded` records), and the per-feeder parts made only when needed."""

from __future__ import annotations

import tracemalloc
from contextlib import nullcontext

import pytest

from chakra_tools.core import hotloops
from chakra_tools.core.errors import Diagnostics
from chakra_tools.core.etwrite import write_trace
from chakra_tools.core.model import Attr, Metadata, Node, NodeType as T
from chakra_tools.feed import ETFeeder
from chakra_tools.feed.window import BITMAP_LIMIT, FinishedIds

compiled = pytest.mark.skipif(hotloops.COMPILED is None, reason="core/_hotloops.c not built")


def gpt_like(count: int, name_len: int = 30, stride: int = 1) -> list[Node]:
    """A rank file's kind of nodes: a chain with a side branch, names repeating every 50 nodes."""
    attrs = {"is_cpu_op": Attr("bool_val", False), "num_ops": Attr("int64_val", 1 << 20),
             "comm_size": Attr("uint64_val", 1 << 31), "pg_name": Attr("string_val", "2")}
    return [Node(i * stride, f"{'x' * name_len}{i % 50}", T.COMP_NODE if i % 3 else T.COMM_COLL_NODE,
                 tuple(j * stride for j in (i - 1, i - 3) if j >= 0), (), 0, 7, attrs) for i in range(count)]


def traced(make):
    """(what make() returns, the bytes it left allocated)"""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        out = make()
        return out, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@compiled
def test_a_held_eager_feeder_keeps_no_python_object_per_node(tmp_path):
    path = tmp_path / "g.0.et"
    write_trace(path, gpt_like(2000))
    ETFeeder(path, eager_info=True)  # the name table and first-use costs outside the count
    f, held = traced(lambda: ETFeeder(path, eager_info=True))
    assert len(f._loaded) == 2000
    assert held / 2000 < 80, f"{held / 2000:.0f} bytes a node"  # a NodeInfo alone is 184
    with hotloops.python_twins():
        _, reference = traced(lambda: ETFeeder(path, eager_info=True))
    assert reference > 5 * held


@compiled
def test_names_are_held_once_for_all_feeders_and_freed_with_the_last(tmp_path):
    path = tmp_path / "n.0.et"
    write_trace(path, [Node(i, f"{i:04d}" + "n" * 400, T.COMP_NODE) for i in range(200)])
    names = 200 * 404
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        a, b = ETFeeder(path, eager_info=True), ETFeeder(path, eager_info=True)
        held = tracemalloc.get_traced_memory()[0] - start
        assert a.info(7).name == b.info(7).name == "0007" + "n" * 400
        assert len(list(a.drain())) == 200 and len(list(b.drain())) == 200
        del a, b  # their windows' arrays; the process's table of names keeps its own (a few KB)
        left = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert held < 1.6 * names, held  # the names once (and two windows), not twice (over 2 * names)
    assert left < 0.1 * names, left  # the names went with their last nodes


@compiled
def test_finished_records_are_compacted_away(tmp_path):
    path = tmp_path / "long.0.et"
    write_trace(path, gpt_like(20_000, name_len=5))
    f = ETFeeder(path, window=32, eager_info=True)
    most = 0
    for i, nid in enumerate(f.drain()):
        assert f.info(nid).id == nid
        most = max(most, f.memory_bytes())
    assert i == 19_999
    assert most < 64 * 1024  # without compaction: 20k records and their bytes, a megabyte


def views(f: ETFeeder) -> list[tuple]:
    return [(i, r.raw, r.info, r.deps, r.waiting, r.children, r.state)
            for i, r in ((i, f._loaded[i]) for i in f.loaded_ids())]


@compiled
@pytest.mark.parametrize("eager", [True, False])
def test_record_views_read_as_the_references_records(tmp_path, eager):
    nodes = gpt_like(60, stride=7)
    nodes += [Node(BITMAP_LIMIT + 5, "big", T.COMP_NODE, (14, 999)), Node(999, "late", T.COMP_NODE, (0,))]
    path = tmp_path / "v.0.et"
    write_trace(path, nodes[::-1])  # forward references everywhere, an id past the bitmap
    got = []
    for twins in (False, True):
        with hotloops.python_twins() if twins else nullcontext():
            f = ETFeeder(path, eager_info=eager)
            f.take(0)
            f.finish(0)
            f.info(7)  # a lazy window's info kept once made, as the reference keeps it
            f.push_back(f.next_issuable())
            got.append(views(f))
    assert got[0] == got[1]
    assert type(f._loaded) is dict and type(ETFeeder(path)._loaded) is hotloops.Window


@compiled
def test_a_record_view_is_live_and_the_window_a_mapping(tmp_path):
    path = tmp_path / "m.0.et"
    write_trace(path, gpt_like(5))
    f = ETFeeder(path, eager_info=True)
    w = f._loaded
    assert list(w) == [0, 1, 2, 3, 4] and len(w) == 5 and 3 in w and 9 not in w and w.get(9) is None
    rec = w[1]
    assert (rec.waiting, rec.state, rec.children) == (1, 0, [2, 4])
    rec.waiting = 0
    assert w[1].waiting == 0
    with pytest.raises(KeyError):
        w.info(9)
    assert f.next_issuable() == 0
    f.finish(0)
    with pytest.raises(KeyError):
        w[0]


def test_diagnostics_and_the_large_id_set_are_made_when_needed(tmp_path):
    path = tmp_path / "d.0.et"
    write_trace(path, gpt_like(3))
    f = ETFeeder(path)
    assert f._diagnostics is None and f._finished._other is None
    d = f.diagnostics
    assert isinstance(d, Diagnostics) and f.diagnostics is d and len(d) == 0
    mine = Diagnostics()
    assert ETFeeder(path, diagnostics=mine).diagnostics is mine
    ids = FinishedIds()
    assert BITMAP_LIMIT + 1 not in ids and ids.nbytes() == 0
    ids.add(BITMAP_LIMIT + 1)
    assert BITMAP_LIMIT + 1 in ids and BITMAP_LIMIT not in ids and ids.nbytes() == 64


def test_the_metadata_is_kept_as_its_message_and_read_when_asked(tmp_path):
    path = tmp_path / "md.0.et"
    write_trace(path, gpt_like(3), metadata=Metadata("0.0.4", {"k": Attr("string_val", "v")}))
    f = ETFeeder(path)
    assert type(f._metadata) is bytes
    assert f.metadata.version == "0.0.4" and f.metadata.attrs["k"].value == "v"
    assert f.metadata is f.metadata
