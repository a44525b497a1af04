"""Round trips: ours -> bytes -> ours is identical, and the bytes are deterministic."""

from __future__ import annotations

import gzip
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_tools.core.etio import TraceReader, iter_nodes
from chakra_tools.core.etwrite import write_trace
from chakra_tools.core.graph import Graph
from chakra_tools.core.model import LIST_KINDS, SCALAR_KINDS, Attr, IOInfo, Metadata, Node, NodeType, make_attrs

from et_strategies import attrs, frames, node_lists

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@PROPS
@given(nodes=node_lists(), meta_attrs=attrs(), gz=st.booleans(), version=st.sampled_from(["0.0.4", "1.0.0", "x", ""]))
def test_random_graphs_round_trip(tmp_path, nodes, meta_attrs, gz, version):
    path = tmp_path / ("t.0.et.gz" if gz else "t.0.et")
    assert write_trace(path, nodes, Metadata(version, meta_attrs)) == len(nodes)
    raw = path.read_bytes()
    assert raw.startswith(b"\x1f\x8b") == gz
    reader = TraceReader(path)
    back = list(reader)
    assert back == nodes
    # an empty version is kept beside attributes (Chakra's converter writes that); alone it would
    # encode to zero bytes, so the writer puts its own version there
    assert reader.metadata == Metadata(version or ("" if meta_attrs else "0.0.4"), meta_attrs, True)
    # the exact oneof kind survives (Attr equality already compares it; say it outright too)
    for a, b in zip(nodes, back):
        assert {k: v.kind for k, v in a.attrs.items()} == {k: v.kind for k, v in b.attrs.items()}
    # one framed message per node plus the GlobalMetadata, checked by the independent framer
    plain = gzip.decompress(raw) if gz else raw
    assert len(frames(plain)) == len(nodes) + 1


@PROPS
@given(nodes=node_lists(), gz=st.booleans())
def test_bytes_ours_bytes_identical(tmp_path, nodes, gz):
    """Deterministic output: writing what we read gives the same bytes (gzip included)."""
    suffix = ".et.gz" if gz else ".et"
    a, b, c = (tmp_path / f"{x}.0{suffix}" for x in "abc")
    write_trace(a, nodes)
    write_trace(c, nodes)
    Graph.read(a).write(b)
    assert a.read_bytes() == b.read_bytes() == c.read_bytes()


def test_every_attribute_kind_explicitly(tmp_path):
    """One node per oneof kind with edge values, so no kind depends on hypothesis' luck."""
    edge = {
        "double_val": -1.5e308, "float_val": 3.5, "int32_val": -(1 << 31), "int64_val": -(1 << 63),
        "uint32_val": (1 << 32) - 1, "uint64_val": (1 << 64) - 1, "sint32_val": -7,
        "sint64_val": (1 << 63) - 1, "fixed32_val": (1 << 32) - 1, "fixed64_val": (1 << 64) - 1,
        "sfixed32_val": -(1 << 31), "sfixed64_val": -(1 << 63), "bool_val": True,
        "string_val": "ünïcode ✓", "bytes_val": b"\x00\xff",
    }
    attrs_ = {k: Attr(k, v) for k, v in edge.items()}
    attrs_.update({k.replace("_val", "_list"): Attr(k.replace("_val", "_list"), (v, v)) for k, v in edge.items()})
    attrs_["empty_list"] = Attr("int64_list", ())
    attrs_["name_only"] = Attr(None, None, "documented")
    assert {a.kind for a in attrs_.values()} >= set(SCALAR_KINDS) | set(LIST_KINDS)
    n = Node((1 << 64) - 1, "all", NodeType.COMP_NODE, ((1 << 64) - 1,), (0,), (1 << 64) - 1, 1, attrs_,
             IOInfo("[[1,2]]", "[[2]]", "[Tensor(float)]"), IOInfo())
    write_trace(tmp_path / "k.et", [n])
    (back,) = iter_nodes(tmp_path / "k.et")
    assert back == n
    assert back.attrs["empty_list"] == Attr("int64_list", ())  # an empty list keeps its kind
    assert back.attrs["name_only"] == Attr(None, None, "documented")
    assert back.outputs == IOInfo("", "", "")  # present but empty stays present
    assert Node(2, "x", NodeType.COMP_NODE).inputs is None


def test_float_nan_and_infinities_round_trip(tmp_path):
    n = Node(1, "f", NodeType.COMP_NODE, attrs={"nan": Attr("double_val", math.nan),
                                                "inf": Attr("float_val", -math.inf),
                                                "l": Attr("double_list", (math.inf, math.nan))})
    write_trace(tmp_path / "f.et", [n])
    (back,) = iter_nodes(tmp_path / "f.et")
    assert math.isnan(back.attr("nan")) and back.attr("inf") == -math.inf
    assert back.attr("l")[0] == math.inf and math.isnan(back.attr("l")[1])


def test_float_val_is_float32(tmp_path):
    """float_val is a 32-bit float on the wire: 0.1 comes back as the nearest float32."""
    write_trace(tmp_path / "f.et", [Node(1, "f", NodeType.COMP_NODE, attrs={"x": Attr("float_val", 0.1)})])
    (back,) = iter_nodes(tmp_path / "f.et")
    assert back.attr("x") != 0.1 and abs(back.attr("x") - 0.1) < 1e-8


def test_attributes_are_written_sorted(tmp_path):
    """Deterministic bytes: attribute order in the dict does not matter."""
    a = Node(1, "n", NodeType.COMP_NODE, attrs=make_attrs(b=1, a="x", c=True))
    b = a.replace(attrs=make_attrs(c=True, a="x", b=1))
    write_trace(tmp_path / "a.et", [a])
    write_trace(tmp_path / "b.et", [b])
    assert (tmp_path / "a.et").read_bytes() == (tmp_path / "b.et").read_bytes()


def test_gzip_output_is_reproducible(tmp_path):
    """No file name or time stamp in the gzip header: same nodes, same bytes, at any time."""
    nodes = [Node(i, f"n{i}", NodeType.COMP_NODE, (i - 1,) if i else ()) for i in range(50)]
    write_trace(tmp_path / "a.et.gz", nodes)
    write_trace(tmp_path / "other_name.et.gz", nodes)
    raw = (tmp_path / "a.et.gz").read_bytes()
    assert raw == (tmp_path / "other_name.et.gz").read_bytes()
    assert raw[4:8] == b"\0\0\0\0"  # MTIME
    assert raw[3] & 0x08 == 0  # no FNAME
    write_trace(tmp_path / "forced.et", nodes, compress=True)
    assert (tmp_path / "forced.et").read_bytes() == raw
    assert list(iter_nodes(tmp_path / "forced.et")) == nodes


def test_real_trace_round_trips(unpack, tmp_path):
    """Chakra's feeder trace: read, write, read again gives the same nodes and metadata attrs."""
    src = unpack("chakra/feeder_tests_trace.tar.gz") / "tests" / "data" / "chakra.0.et"
    g = Graph.read(src)
    g.write(tmp_path / "again.0.et")
    h = Graph.read(tmp_path / "again.0.et")
    assert list(h) == list(g)
    assert h.metadata == g.metadata  # version "" with a "schema" attribute, kept as it was
    # bytes -> ours -> bytes on our own output is byte-identical
    h.write(tmp_path / "third.0.et")
    assert (tmp_path / "third.0.et").read_bytes() == (tmp_path / "again.0.et").read_bytes()


WIDE = st.integers(-(1 << 70), 1 << 70)


@PROPS
@given(nid=WIDE, deps=st.lists(WIDE, max_size=3), start=WIDE, dur=WIDE)
def test_integers_round_trip_exactly_or_are_refused(tmp_path, nid, deps, start, dur):
    """uint64 fields: in range they round-trip exactly, out of range the writer refuses the node."""
    from chakra_tools.core.errors import TraceWriteError

    n = Node(nid, "n", NodeType.COMP_NODE, tuple(deps), tuple(deps[::-1]), start, dur)
    fits = all(0 <= v < 1 << 64 for v in (nid, start, dur, *deps))
    path = tmp_path / "w.0.et"
    path.unlink(missing_ok=True)  # tmp_path is shared by hypothesis' examples
    try:
        write_trace(path, [n])
    except TraceWriteError:
        assert not fits
        assert not path.exists()
    else:
        assert fits
        assert list(iter_nodes(path)) == [n]


def test_rank_set_round_trips_plain_and_gzip(tmp_path):
    from chakra_tools.core.graph import RankSet

    graphs = {r: Graph([Node(i, f"r{r}n{i}", NodeType.COMP_NODE, (i - 1,) if i else ()) for i in range(5)], rank=r)
              for r in range(3)}
    for compress in (False, True):
        out = tmp_path / ("gz" if compress else "plain")
        written = RankSet(graphs, {"1": (0, 1, 2)}, prefix="job").write(out, compress=compress)
        assert [p.name for p in written] == [f"job.{r}.et{'.gz' if compress else ''}" for r in range(3)] + \
            ["comm_group.json"]
        back = RankSet.load(out)
        assert back.prefix == "job" and back.ranks == [0, 1, 2] and back.comm_groups == {"1": (0, 1, 2)}
        assert all(list(back[r]) == list(graphs[r]) and back[r].rank == r for r in range(3))
        assert back.group_ranks("1") == (0, 1, 2) and back.group_ranks("0") == (0, 1, 2)
