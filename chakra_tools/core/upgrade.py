"""Upgrading legacy Chakra files (core/legacy.py reads them) to today's format.

A rank set is upgraded as `RankSet.write` writes one: staged and committed (core/commit.py), so a
damaged file anywhere, or a kill at any instant, leaves the target folder as it was.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from .commit import staged_in
from .errors import InputError, TraceReadError
from .etwrite import write_trace
from .framing import iter_frames, looks_like_metadata, open_binary
from .graph import find_rank_files
from .rankfiles import RANK_FILE, stale_files
from .legacy import FORMAT, fields, is_legacy_node, legacy_attr, legacy_metadata, legacy_node, sniff
from .model import Metadata, Node, NodeType, make_attr


_EMPTY_NODE = Node(0, "", NodeType.INVALID_NODE, attrs={})


@dataclass
class Upgrade:
    """What `upgrade_file` did: nodes written, and the attributes it had to assume."""

    source: str
    target: str
    nodes: int = 0
    assumed: dict[str, int] = field(default_factory=dict)


def upgrade_file(src: str | Path, dst: str | Path, *, target: str | Path | None = None) -> Upgrade:
    """Write today's format of the legacy trace `src` to `dst` (atomically).

    Raises InputError if `src` is not a legacy trace, TraceReadError (file, byte offset, the
    node) if it is damaged; nothing is written then. `target` names `dst` in the report (where
    `dst` is a staging path: `upgrade_set`)."""
    src, dst = str(src), str(dst)
    if not sniff(src, strict=True):
        raise InputError(f"{src}: not a {FORMAT}: none of its first messages has the legacy layout "
                         "(nothing to upgrade)")
    report = Upgrade(src, str(target) if target is not None else dst)
    meta, nodes = Metadata(attrs={"upgraded_from": make_attr("upgraded_from", FORMAT)}), []
    with open_binary(src) as stream:
        for k, (offset, msg) in enumerate(iter_frames(stream, src)):
            what = "node"
            try:
                if k == 0 and (legacy_metadata(msg) or looks_like_metadata(msg) and not is_legacy_node(msg)):
                    what = "metadata"
                    meta = _metadata(msg, meta)
                    continue
                node = legacy_node(msg)
                if node == _EMPTY_NODE:  # written, it would read as the end of the file
                    raise ValueError("it holds no id, name, type or attribute: no node")
                _count_assumed(report, msg, node)
            except (ValueError, struct.error) as e:
                raise TraceReadError(src, offset, f"legacy {what} does not decode: {e}",
                                     str(nodes[-1]) if nodes else None) from None
            nodes.append(node)
    report.nodes = write_trace(dst, nodes, meta)
    return report


def _metadata(msg: bytes, base: Metadata) -> Metadata:
    attrs = dict(base.attrs)
    if legacy_metadata(msg):
        for _, _, body in fields(msg):
            name, a = legacy_attr(body)
            attrs[name] = a
    return Metadata(attrs=attrs)


def _count_assumed(report: Upgrade, msg: bytes, node: Node) -> None:
    """Count the attributes the upgrade added (not in the legacy node)."""
    raw = {legacy_attr(v)[0] for num, _, v in fields(msg) if num == 11}
    for name in ("is_cpu_op", "comm_tag"):
        if name in node.attrs and name not in raw:
            report.assumed[name] = report.assumed.get(name, 0) + 1


def upgrade_set(src: str | Path, dst: str | Path) -> list[Upgrade]:
    """Upgrade one legacy file (`dst` a file, or a folder to write it into under its own name)
    or every file of a rank set (a folder or prefix; `dst` a folder, same file names,
    comm_group.json copied): all or nothing.

    A set is staged and committed as `RankSet.write` writes one (core/commit.py): a damaged
    file anywhere, or a kill at any instant, leaves `dst` as it was (an earlier upgrade there
    whole, no folder this call made); on success an earlier set of the same prefix there is
    replaced, its other ranks removed."""
    src_path, dst = Path(src), Path(dst)
    if src_path.is_file():
        return [upgrade_file(src_path, dst / src_path.name if dst.is_dir() else dst)]
    files = find_rank_files(src_path)
    first = next(iter(files.values()))
    prefix = RANK_FILE.match(first.name).group("prefix")
    with staged_in(dst, prefix) as staged:
        done = [upgrade_file(f, staged.path(f.name), target=dst / f.name) for f in files.values()]
        names = [f.name for f in files.values()]
        groups = first.parent / "comm_group.json"
        if groups.is_file():
            _copy(groups, staged.path("comm_group.json"))
            names.append("comm_group.json")
        staged.commit(names, stale_files(dst, prefix, names))
    return done


def _copy(src: Path, dst: Path) -> None:
    try:
        dst.write_bytes(src.read_bytes())
    except OSError as e:
        raise InputError(f"{src}: cannot copy to {dst.name}: {e.strerror}") from None
