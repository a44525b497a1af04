"""One schema source: the committed bindings are what proto/et_def.proto generates, their
descriptor is byte-identical to mlc-chakra's (so both load in one process), and they work on
both ends of the protobuf range pyproject.toml allows."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chakra_tools.core.schema import et_def_pb2 as ours

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "chakra_tools" / "core" / "schema"


def serialized_file(gencode: str) -> bytes:
    """The serialized FileDescriptorProto that a generated *_pb2.py adds to the pool."""
    for node in ast.walk(ast.parse(gencode)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile":
            return ast.literal_eval(node.args[0])
    raise AssertionError("no AddSerializedFile call in the generated code")


def test_bindings_match_the_proto(tmp_path):
    protoc = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools (the dev extra) not installed")
    rc = protoc.main(["protoc", f"-I{REPO / 'proto'}", f"--python_out={tmp_path}", f"--pyi_out={tmp_path}",
                      str(REPO / "proto" / "et_def.proto")])
    assert rc == 0
    generated = (tmp_path / "et_def_pb2.py").read_text()
    assert serialized_file(generated) == ours.DESCRIPTOR.serialized_pb, \
        "chakra_tools/core/schema/et_def_pb2.py is out of date: run `make proto`"
    assert serialized_file((SCHEMA / "et_def_pb2.py").read_text()) == ours.DESCRIPTOR.serialized_pb
    # with the pinned grpcio-tools the files are byte-identical (nobody edited generated code)
    assert generated == (SCHEMA / "et_def_pb2.py").read_text()
    assert (tmp_path / "et_def_pb2.pyi").read_text() == (SCHEMA / "et_def_pb2.pyi").read_text()


def test_descriptor_is_byte_identical_to_the_reference():
    ref = pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    assert ours.DESCRIPTOR.serialized_pb == ref.DESCRIPTOR.serialized_pb
    assert ours.DESCRIPTOR.name == ref.DESCRIPTOR.name == "et_def.proto"
    assert ours.DESCRIPTOR.package == "ChakraProtoMsg"


def test_schema_numbers_match_the_wire_format_reference():
    """REFERENCE §1, field by field, so an edited .proto cannot drift from the documented format."""
    node = ours.Node.DESCRIPTOR.fields_by_name
    assert {f: node[f].number for f in node} == {
        "id": 1, "name": 2, "type": 3, "ctrl_deps": 4, "data_deps": 5, "start_time_micros": 6,
        "duration_micros": 7, "inputs": 8, "outputs": 9, "attr": 10}
    attr = ours.AttributeProto.DESCRIPTOR
    assert [f.name for f in attr.oneofs_by_name["value"].fields] == [
        f"{t}_{s}" for t in ("double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
                             "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes")
        for s in ("val", "list")]
    assert [f.number for f in attr.oneofs_by_name["value"].fields] == list(range(3, 33))
    assert dict(ours.NodeType.items()) == {
        "INVALID_NODE": 0, "METADATA_NODE": 1, "MEM_LOAD_NODE": 2, "MEM_STORE_NODE": 3, "COMP_NODE": 4,
        "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7}
    assert dict(ours.CollectiveCommType.items()) == {
        "ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4, "BROADCAST": 5,
        "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7, "REDUCE_SCATTER_BLOCK": 8, "BARRIER": 9}
    from chakra_tools.core.model import CommType, NodeType
    assert {t.name: int(t) for t in NodeType} == dict(ours.NodeType.items())
    assert {t.name: int(t) for t in CommType} == dict(ours.CollectiveCommType.items())


# -- the protobuf range in pyproject.toml ---------------------------------------------------------

def protobuf_range() -> tuple[str, str]:
    text = (REPO / "pyproject.toml").read_text()
    m = re.search(r'"protobuf>=([\d.]+),<(\d+)"', text)
    assert m, "pyproject.toml no longer pins protobuf as >=X,<Y"
    return m.group(1), m.group(2)


#: the oldest allowed and a 7.x release (the newest major below the cap)
VERSIONS = ["6.31.1", "7.36.2"]

ROUND_TRIP = r"""
import sys, tempfile, os
import google.protobuf
assert google.protobuf.__version__ == sys.argv[1], (google.protobuf.__version__, google.protobuf.__file__)
first, second = sys.argv[2:4]
import importlib
importlib.import_module(first); importlib.import_module(second)  # both bindings, in the given order
from chakra.schema.protobuf import et_def_pb2 as ref
from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd
from chakra_tools.core.etio import TraceReader
from chakra_tools.core.etwrite import write_trace
from chakra_tools.core.model import Attr, IOInfo, Metadata, Node, NodeType, make_attrs, SCALAR_KINDS, LIST_KINDS
vals = {"double_val": 2.5, "float_val": 0.5, "bool_val": True, "string_val": "s", "bytes_val": b"b"}
attrs = {k: Attr(k, vals.get(k, 7)) for k in SCALAR_KINDS}
attrs.update({k: Attr(k, (vals.get(k.replace("_list", "_val"), 7),) * 2) for k in LIST_KINDS})
nodes = [Node(i, f"n{i}", NodeType(i % 8) if i % 8 else NodeType.COMP_NODE, (i - 1,) if i else (), (),
              i, 2 * i, attrs, IOInfo("v", "s", "t") if i % 2 else None) for i in range(50)]
for name in ("t.0.et", "t.0.et.gz"):
    path = os.path.join(tempfile.mkdtemp(), name)
    write_trace(path, nodes, Metadata("0.0.4", make_attrs(schema="x")))
    assert list(TraceReader(path)) == nodes
    f = openFileRd(path); meta = ref.GlobalMetadata(); decodeMessage(f, meta); got = []
    while True:
        m = ref.Node()
        if not decodeMessage(f, m):
            break
        got.append(m)
    f.close()
    assert [m.id for m in got] == list(range(50)) and meta.version == "0.0.4"
    assert {a.name: a.WhichOneof("value") for a in got[3].attr} == {k: k for k in attrs}
print("ok", google.protobuf.__version__)
"""


@pytest.fixture(scope="session")
def protobuf_dirs(tmp_path_factory):
    """protobuf==X installed alone into a folder, once per session (pip needs PyPI)."""
    cache: dict[str, Path] = {}

    def install(version: str) -> Path:
        if version not in cache:
            target = tmp_path_factory.mktemp(f"protobuf-{version}")
            out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                                  "--disable-pip-version-check", "--target", str(target), f"protobuf=={version}"],
                                 capture_output=True, text=True, timeout=300)
            if out.returncode != 0:
                pytest.skip(f"cannot install protobuf=={version} (PyPI unreachable?): {out.stderr[-300:]}")
            cache[version] = target
        return cache[version]

    return install


def test_versions_tested_are_the_range_ends():
    low, cap = protobuf_range()
    assert VERSIONS[0] == low and int(VERSIONS[-1].split(".")[0]) == int(cap) - 1


@pytest.mark.parametrize("version", VERSIONS)
def test_round_trip_on_each_end_of_the_protobuf_range(protobuf_dirs, version):
    target = protobuf_dirs(version)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(REPO)])}
    for order in (("chakra_tools.core.schema.et_def_pb2", "chakra.schema.protobuf.et_def_pb2"),
                  ("chakra.schema.protobuf.et_def_pb2", "chakra_tools.core.schema.et_def_pb2")):
        out = subprocess.run([sys.executable, "-c", ROUND_TRIP, version, *order], capture_output=True,
                             text=True, timeout=120, env=env, cwd=target)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split() == ["ok", version]
