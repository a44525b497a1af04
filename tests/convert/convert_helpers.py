"""Reading our output with the reference implementation (mlc-chakra), to prove it reads it."""

from __future__ import annotations


def read_with_mlc(path) -> tuple[object, list]:
    """(GlobalMetadata, [Node]) decoded by mlc-chakra's own schema and framing helpers."""
    from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
    from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

    f = openFileRd(str(path))
    try:
        meta = GlobalMetadata()
        decodeMessage(f, meta)
        nodes = []
        while True:
            n = Node()
            if not decodeMessage(f, n):
                return meta, nodes
            nodes.append(n)
    finally:
        f.close()


def mlc_attr(node, name: str):
    """An attribute's value as mlc-chakra sees it (the oneof it was written with)."""
    for a in node.attr:
        if a.name == name:
            return getattr(a, a.WhichOneof("value"))
    return None
