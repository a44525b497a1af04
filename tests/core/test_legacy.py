"""Legacy (2023, proto2-era) Chakra files: refused by the reader with the format named, upgraded
by `chakra-tools upgrade`. The files are built here byte by byte from the legacy field numbers
(core/legacy.py's docstring, Chakra's et_def.proto of 2023), as its generator wrote them: no
GlobalMetadata, `node.attribute` in field 11, `parent` in field 4."""

from __future__ import annotations

import subprocess
import sys

import pytest

from chakra_tools.core.errors import InputError, TraceReadError
from chakra_tools.core.etio import TraceReader
from chakra_tools.core.etwrite import write_trace
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.upgrade import upgrade_set
from chakra_tools.core.model import CommType, Node, NodeType
from chakra_tools.core.validate import validate_path

BOOL, INT, BOOLS = 0, 3, 5  # legacy AttributeType
COMP, SEND, RECV, COLL = 4, 5, 6, 7  # NodeType (same numbers then and now)
LEGACY_ALL_TO_ALL, LEGACY_ALL_GATHER = 1, 2


def varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def vi(num: int, v: int) -> bytes:
    return varint(num << 3) + varint(v)


def ld(num: int, payload: bytes) -> bytes:
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def attr(name: str, type_: int, *, i: int | None = None, s: str | None = None, bools=()) -> bytes:
    body = ld(1, name.encode()) + vi(2, type_)
    if i is not None:
        body += vi(7, i)
    if s is not None:
        body += ld(8, s.encode())
    body += b"".join(vi(9, int(b)) for b in bools)  # proto2 repeated: not packed
    return body


def node(nid: int, name: str, type_: int, *attrs: bytes, parents=()) -> bytes:
    return (vi(1, nid) + ld(2, name.encode()) + vi(3, type_) + b"".join(vi(4, p) for p in parents)
            + b"".join(ld(11, a) for a in attrs))


def write_legacy(path, *messages: bytes):
    path.write_bytes(b"".join(varint(len(m)) + m for m in messages))
    return path


def allgather(folder, ranks=2, kind=LEGACY_ALL_GATHER):
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        write_legacy(folder / f"one_comm_coll_node_allgather.{r}.et",
                     node(0, "ALL_GATHER", COLL, attr("comm_type", INT, i=kind),
                          attr("comm_size", INT, i=65536), attr("involved_dim", BOOLS, bools=(1, 1))))
    return folder


def test_the_reader_refuses_a_legacy_file_naming_its_format(tmp_path):
    path = allgather(tmp_path, ranks=1) / "one_comm_coll_node_allgather.0.et"
    with pytest.raises(TraceReadError) as e:
        list(TraceReader(path))
    assert "legacy Chakra ET (proto2-era" in str(e.value) and "chakra-tools upgrade" in str(e.value)
    assert str(path) in str(e.value)


def test_trace_validate_exits_2_on_a_legacy_file(tmp_path):
    folder = allgather(tmp_path)
    code = "from chakra_tools.cli.main import validate_main; validate_main()"
    res = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True)
    assert res.returncode == 2 and "legacy Chakra ET" in res.stderr and "OK" not in res.stdout


@pytest.mark.parametrize("legacy,now", [(LEGACY_ALL_GATHER, CommType.ALL_GATHER),
                                        (LEGACY_ALL_TO_ALL, CommType.ALL_TO_ALL)])
def test_upgrade_keeps_the_collective(tmp_path, legacy, now):
    done = upgrade_set(allgather(tmp_path / "old", kind=legacy), tmp_path / "new")
    assert [u.nodes for u in done] == [1, 1]
    report = validate_path(tmp_path / "new", target="astra-sim")
    assert report.error_count == 0 and report.ranks == [0, 1]
    (n,) = list(TraceReader(tmp_path / "new" / "one_comm_coll_node_allgather.0.et"))
    assert (n.comm_type, n.comm_size, n.attrs["comm_size"].kind) == (now, 65536, "int64_val")
    assert n.attr("involved_dim") == (True, True) and n.is_cpu_op is False


def test_upgrade_turns_parent_into_deps_and_runtime_into_duration(tmp_path):
    old = write_legacy(tmp_path / "two_comp_nodes_dependent.0.et",
                       node(0, "COMP_NODE", COMP, attr("runtime", INT, i=5)),
                       node(1, "COMP_NODE", COMP, attr("runtime", INT, i=5), parents=(0,)))
    upgrade_set(old, tmp_path / "new.0.et")
    a, b = TraceReader(tmp_path / "new.0.et")
    assert (a.duration_micros, b.duration_micros, b.ctrl_deps, b.deps) == (5, 5, (0,), (0,))


def test_upgraded_send_and_receive_pair(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    write_legacy(old / "p2p.0.et", node(0, "COMM_SEND_NODE", SEND, attr("src", INT, i=0), attr("dst", INT, i=1),
                                       attr("comm_size", INT, i=4096)))
    write_legacy(old / "p2p.1.et", node(0, "COMM_RECV_NODE", RECV, attr("src", INT, i=0), attr("dst", INT, i=1),
                                       attr("comm_size", INT, i=4096)))
    done = upgrade_set(old, tmp_path / "new")
    assert [u.assumed for u in done] == [{"comm_tag": 1, "is_cpu_op": 1}] * 2
    assert validate_path(tmp_path / "new").error_count == 0
    (s,) = TraceReader(tmp_path / "new" / "p2p.0.et")
    assert (s.comm_src, s.comm_dst, s.comm_size, s.comm_tag) == (0, 1, 4096, 0)


def test_upgrade_refuses_what_is_not_legacy_and_writes_nothing(tmp_path):
    current = tmp_path / "now.0.et"
    write_trace(current, [Node(1, "mm", NodeType.COMP_NODE)])
    with pytest.raises(InputError, match="not a legacy Chakra ET"):
        upgrade_set(current, tmp_path / "out.0.et")
    assert not (tmp_path / "out.0.et").exists()


def test_upgrade_of_a_damaged_legacy_set_names_the_file_and_writes_nothing(tmp_path):
    old = allgather(tmp_path / "old")
    good = (old / "one_comm_coll_node_allgather.1.et").read_bytes()
    (old / "one_comm_coll_node_allgather.1.et").write_bytes(good + good[:-3])  # a second node, cut short
    with pytest.raises(TraceReadError) as e:
        upgrade_set(old, tmp_path / "new")
    assert "one_comm_coll_node_allgather.1.et" in str(e.value) and "byte" in str(e.value)
    assert not list((tmp_path / "new").glob("*.et"))


def test_cli_upgrade(tmp_path):
    old = allgather(tmp_path / "old")
    code = "from chakra_tools.cli.main import main; main()"
    res = subprocess.run([sys.executable, "-c", code, "upgrade", str(old), str(tmp_path / "new")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count(": 1 node(s) from") == 2
    rs = RankSet.load(tmp_path / "new")
    assert [g[0].comm_type for g in rs] == [CommType.ALL_GATHER] * 2 and isinstance(rs[0], Graph)


def test_the_feeder_refuses_a_legacy_file_too(tmp_path):
    from chakra_tools.feed import ETFeeder

    path = allgather(tmp_path, ranks=1) / "one_comm_coll_node_allgather.0.et"
    with pytest.raises(TraceReadError, match="legacy Chakra ET"):
        ETFeeder(path)
