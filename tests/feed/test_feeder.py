"""ETFeeder: the issue contract, forward references, deadlocks, bounded memory, Chakra's names."""

from __future__ import annotations

import tracemalloc
from contextlib import nullcontext

import pytest
from hypothesis import given, settings, strategies as st

from chakra_tools.core.etwrite import write_trace
from chakra_tools.core.model import Attr, CommType, Node, NodeType as T, make_attrs
from chakra_tools.feed import DeadlockError, ETFeeder


def _write(tmp_path, nodes, name="t.0.et"):
    path = tmp_path / name
    write_trace(path, nodes)
    return path


def n(i, deps=(), ctrl=(), **attrs):
    return Node(i, f"n{i}", T.COMP_NODE, tuple(deps), tuple(ctrl), duration_micros=1,
                attrs=make_attrs(**attrs))


def test_issuable_in_ascending_id_and_children_freed(tmp_path):
    f = ETFeeder(_write(tmp_path, [n(5), n(3), n(4, (3, 5)), n(1)]))
    assert f.issuable() == [1, 3, 5]
    assert f.next_issuable() == 1
    f.take(5)
    assert f.issuable() == [3]
    assert f.finish(5) == []  # node 4 still waits for 3
    assert f.next_issuable() == 3
    assert f.finish(3) == [4]
    assert f.issuable() == [4]


def test_push_back_returns_a_node_to_the_issuable_set(tmp_path):
    f = ETFeeder(_write(tmp_path, [n(1), n(2)]))
    assert f.next_issuable() == 1
    f.push_back(1)
    assert f.issuable() == [1, 2]
    with pytest.raises(ValueError, match="not in flight"):
        f.push_back(2)
    with pytest.raises(ValueError, match="not in flight"):
        f.finish(2)


def test_chakra_aliases(tmp_path):
    f = ETFeeder(_write(tmp_path, [n(1), n(2, (1,))]))
    node = f.get_next_issuable_node()
    assert node.id == 1 and f.lookup_node(1).name == "n1"
    f.push_back_issuable_node(1)
    assert f.get_next_issuable_node().id == 1
    f.free_children_nodes(1)
    assert f.has_nodes_to_issue()
    assert f.get_next_issuable_node().id == 2
    f.free_children_nodes(2)
    assert not f.has_nodes_to_issue()
    assert f.get_next_issuable_node() is None


def test_forward_reference_waits_for_the_later_node(tmp_path):
    f = ETFeeder(_write(tmp_path, [n(1, (9,)), n(2), n(9)]), window=1)
    assert list(f.drain()) == [2, 9, 1]


def test_dangling_dependency_dropped_reported_and_never_rewritten(tmp_path):
    f = ETFeeder(_write(tmp_path, [n(1, (77,), ctrl=(78,)), n(2, (1,))]))
    assert f.issuable() == [1]
    assert f.lookup(1).data_deps == (77,) and f.lookup(1).ctrl_deps == (78,)
    codes = [d.code for d in f.diagnostics]
    assert codes.count("dangling-dep") == 2
    assert list(f.drain()) == [1, 2]


def test_resolve_data_only_ignores_ctrl_deps(tmp_path):
    path = _write(tmp_path, [n(1), n(2, ctrl=(1,))])
    assert ETFeeder(path).issuable() == [1]
    assert ETFeeder(path, resolve=("data",)).issuable() == [1, 2]
    with pytest.raises(ValueError):
        ETFeeder(path, resolve=("bogus",))


def test_deadlock_names_blocked_nodes_and_what_they_wait_for(tmp_path):
    f = ETFeeder(_write(tmp_path, [n(1), n(2, (3,)), n(3, (2,))]))
    assert f.next_issuable() == 1
    f.finish(1)
    with pytest.raises(DeadlockError) as e:
        f.check_deadlock()
    msg = str(e.value)
    assert "2 nodes left" in msg and "%2 'n2' waits for %3" in msg and "%3 'n3' waits for %2" in msg


def test_no_deadlock_while_something_is_in_flight(tmp_path):
    f = ETFeeder(_write(tmp_path, [n(1), n(2, (1,))]))
    f.next_issuable()
    f.check_deadlock()  # 1 in flight: not a deadlock


def test_duplicate_id_is_reported_and_issued_once(tmp_path):
    f = ETFeeder(_write(tmp_path, [n(1), n(1), n(2)]))
    assert list(f.drain()) == [1, 2]
    assert [d.code for d in f.diagnostics] == ["duplicate-id"]


def test_typed_accessors_apply_the_contract_defaults(tmp_path):
    nodes = [
        Node(1, "c", T.COMM_COLL_NODE, attrs={"comm_size": Attr("int32_val", 4096)}),
        Node(2, "k", T.COMP_NODE, attrs=make_attrs(num_ops=10, tensor_size=20)),
        Node(3, "s", T.COMM_SEND_NODE, attrs=make_attrs(comm_dst=1, comm_tag=7, comm_size=8,
                                                        is_cpu_op=False, pg_name="2",
                                                        involved_dim=[True, False])),
    ]
    f = ETFeeder(_write(tmp_path, nodes))
    c, k, s = f.info(1), f.info(2), f.info(3)
    assert (c.comm_type, c.comm_size, c.is_cpu_op) == (CommType.ALL_REDUCE, 4096, False)
    assert (k.num_ops, k.tensor_size, k.comm_type) == (10, 20, None)
    assert (s.comm_dst, s.comm_tag, s.pg_name, s.is_cpu_op, s.involved_dim) == (1, 7, "2", False, (True, False))
    assert s.comm_src is None


def test_memory_stays_bounded_on_a_long_file(tmp_path):
    """100k nodes, window 256: the window never holds more than 256 + 1, and the heap stays
    small (the finished-id bitmap is 1 bit per id)."""
    total = 100_000
    path = tmp_path / "long.0.et"
    write_trace(path, (n(i, (i - 1,) if i % 7 else ()) for i in range(total)))
    tracemalloc.start()
    f = ETFeeder(path, window=256)
    peak_loaded = count = 0
    for _ in f.drain():
        count += 1
        peak_loaded = max(peak_loaded, len(f._loaded))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert count == total
    assert peak_loaded <= 257
    assert peak < 8 << 20, f"peak {peak} bytes"


@st.composite
def dags(draw):
    """A random DAG (deps point to lower ids), its file order shuffled (forward references)."""
    size = draw(st.integers(1, 40))
    nodes = []
    for i in range(size):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        ctrl = draw(st.lists(st.integers(0, i - 1), max_size=1)) if i else []
        nodes.append(n(i, deps, ctrl))
    order = draw(st.permutations(nodes))
    window = draw(st.integers(1, 50))
    return list(order), window


@settings(max_examples=60, deadline=None)
@given(dags(), st.randoms(use_true_random=False))
def test_every_node_issued_once_and_never_before_its_deps(tmp_path_factory, case, rnd):
    nodes, window = case
    path = tmp_path_factory.mktemp("dag") / "t.0.et"
    write_trace(path, nodes)
    f = ETFeeder(path, window=window)
    done: set[int] = set()
    in_flight: list[int] = []
    issued: list[int] = []
    deps = {x.id: set(x.data_deps) | set(x.ctrl_deps) for x in nodes}
    while f.has_nodes_to_issue():
        ready = f.issuable()
        assert ready == sorted(ready)
        nid = f.next_issuable()
        if nid is not None:
            assert deps[nid] <= done, f"{nid} issued before {deps[nid] - done}"
            issued.append(nid)
            in_flight.append(nid)
        if in_flight and (nid is None or rnd.random() < 0.5):
            x = in_flight.pop(rnd.randrange(len(in_flight)))
            f.finish(x)
            done.add(x)
        elif nid is None:
            f.check_deadlock()
    assert sorted(issued) == sorted(x.id for x in nodes)


def test_truncated_and_corrupt_files_name_the_offset(tmp_path):
    from chakra_tools.core.errors import TraceReadError

    path = _write(tmp_path, [n(i) for i in range(50)])
    data = path.read_bytes()
    cut = tmp_path / "cut.0.et"
    cut.write_bytes(data[:-3])
    f = ETFeeder(cut, window=4)
    with pytest.raises(TraceReadError, match="truncated message"):
        list(f.drain())
    zero = tmp_path / "zero.0.et"
    zero.write_bytes(data + b"\x00")
    with pytest.raises(TraceReadError, match="zero-length message"):
        list(ETFeeder(zero).drain())


def test_small_read_chunks_and_gzip_give_the_same_nodes(tmp_path):
    from chakra_tools.core.framing import iter_frames

    nodes = [n(i, (i - 1,) if i else (), op_schema="x" * (i * 7 % 300)) for i in range(200)]
    plain = _write(tmp_path, nodes)
    gz = _write(tmp_path, nodes, "t.0.et.gz")
    want = [x.id for x in nodes]
    assert list(ETFeeder(gz).drain()) == want
    with open(plain, "rb") as s:
        small = [len(m) for _, m in iter_frames(s, str(plain), chunk=17)]
    with open(plain, "rb") as s:
        big = [len(m) for _, m in iter_frames(s, str(plain))]
    assert small == big and len(big) == 201  # metadata + 200 nodes


@pytest.mark.parametrize("name", ["t.0.et", "t.0.et.gz"])
def test_an_eager_feeder_keeps_offsets_not_messages_and_lookup_reads_the_node_again(tmp_path, name):
    from chakra_tools.core import hotloops

    nodes = [n(i, (i - 1,) if i else (), op_schema="x" * (i * 37 % 20000)) for i in range(60)]
    path = _write(tmp_path, nodes, name)
    for twins in (False, True):
        with hotloops.python_twins() if twins else nullcontext():
            eager = ETFeeder(path, eager_info=True)
            lazy = ETFeeder(path)
        assert all(type(eager._loaded[i].raw) is int for i in eager.loaded_ids())
        assert all(type(lazy._loaded[i].raw) is bytes for i in lazy.loaded_ids())
        for i in (0, 1, 30, 59):  # messages of one- and two-byte length prefixes
            assert eager.lookup(i) == lazy.lookup(i) == nodes[i]
            assert eager.info(i) == lazy.info(i)
