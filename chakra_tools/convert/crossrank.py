"""What needs every rank at once: global process-group ids and point-to-point tags.

Process groups: torch names groups by a counter every rank advances in the same order (every rank
calls `new_group` for every group), so torch's name identifies a group across ranks. Each group
gets a small integer id, the same on every rank, in order of torch's name (the default group "0"
first, so the world group is always id 1); `comm_group.json` lists every group with its global
ranks, the world group too. A group whose ranks no trace names is taken as the world group, with
a warning.

Point-to-point: sends from a to b pair with receives on b from a in issue order. When both sides
recorded the same user tag it is kept; otherwise (NCCL p2p records no tag, a receive posted
without one) both get the pair's ordinal, so ASTRA-sim's (src, dst, tag) matching pairs them.
"""

from __future__ import annotations

from collections import defaultdict

import json

from chakra_tools.core.errors import Diagnostic, Diagnostics, InputError
from chakra_tools.core.graph import Graph
from chakra_tools.core.model import Metadata, NodeType, make_attr

from .rank import DEFAULT_PG, GroupInfo, RankResult


def _name_order(name: str) -> tuple:
    return (0, int(name), "") if name.isdecimal() else (1, 0, name)


def assign_groups(results: list[RankResult], world_ranks: tuple[int, ...],
                  diags: Diagnostics) -> tuple[dict[str, str], dict[str, tuple[int, ...]]]:
    """(torch name -> integer id, integer id -> global ranks) for every group any rank knows."""
    merged: dict[str, GroupInfo] = {}
    for res in results:
        for name, info in res.groups.items():
            m = merged.setdefault(name, GroupInfo())
            m.ranks = m.ranks or info.ranks
            m.size = m.size or info.size
            m.desc = m.desc or info.desc
    ids: dict[str, str] = {}
    groups: dict[str, tuple[int, ...]] = {}
    for k, name in enumerate(sorted(merged, key=_name_order), start=1):
        info = merged[name]
        ranks = info.ranks
        if not ranks:
            ranks = world_ranks
            if name != DEFAULT_PG and info.size and info.size != len(world_ranks):
                diags.add(Diagnostic("warning", "group-ranks-unknown",
                                     f"process group {name!r} ({info.size} ranks): no trace lists its "
                                     f"ranks; written as the world group {list(world_ranks)}"))
        ids[name] = str(k)
        groups[str(k)] = tuple(ranks)
    return ids, groups


#: the most ranks a world group may have: comm_group.json and every rank's GlobalMetadata list
#: them all (ASTRA-sim's largest systems are ~10^5 NPUs)
MAX_WORLD = 2**20


def world_of(results: list[RankResult], declared: int | None, source: str = "") -> tuple[int, ...]:
    """The world's global ranks: the size `source` (the run's manifest) declares, else the
    largest any rank's trace reports or its rank implies. Raises InputError, naming where the
    size comes from, for a world too large to list."""
    if declared:
        size, where = declared, source or "the run"
    else:
        size, where = max([(r.world_size or 0, r.graph.source) for r in results] +
                          [(r.rank + 1, r.graph.source) for r in results])
    if size > MAX_WORLD:
        raise InputError(f"{where}: world_size {size} is more ranks than a conversion writes "
                         f"(at most {MAX_WORLD:,}: comm_group.json lists every rank of the world)")
    return tuple(range(size))


def globalise(results: list[RankResult], ids: dict[str, str], diags: Diagnostics) -> None:
    """Rewrite each rank's comm nodes in place: integer pg_name, paired p2p tags."""
    tags = _pair_tags(results, diags)
    for res in results:
        g = res.graph
        for node in _comm_nodes(g):
            nid = node.id
            attrs = dict(node.attrs)
            attrs["pg_name"] = make_attr("pg_name", ids.get(node.pg_name, ids[DEFAULT_PG]))
            tag = tags.get((res.rank, nid))
            if tag is not None:
                attrs["comm_tag"] = make_attr("comm_tag", tag)
            g.nodes[nid] = node.replace(attrs=attrs)


def record_groups(results: list[RankResult], ids: dict[str, str],
                  groups: dict[str, tuple[int, ...]]) -> None:
    """Keep the process groups in each rank's GlobalMetadata too (`process_groups`, a JSON
    string: id -> {ranks, torch_name, desc}), the facts a METADATA node used to carry; ASTRA-sim
    reads them from comm_group.json and `pg_name`, and ignores GlobalMetadata attributes."""
    for res in results:
        doc = {}
        for name, gid in sorted(ids.items(), key=lambda kv: int(kv[1])):
            info = res.groups.get(name)
            doc[gid] = {"ranks": list(groups[gid]), "torch_name": name,
                        "desc": info.desc if info is not None else ""}
        meta = res.graph.metadata
        res.graph.metadata = Metadata(meta.version, {**meta.attrs, "process_groups": make_attr(
            "process_groups", json.dumps(doc, separators=(",", ":")))}, meta.present)


_COMM = frozenset((NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE))


def _comm_nodes(g: Graph) -> list:
    return [n for n in g.nodes.values() if n.type in _COMM]


def _pair_tags(results: list[RankResult], diags: Diagnostics) -> dict[tuple[int, int], int]:
    """(rank, node id) -> tag for every send and receive that pairs with one on the peer."""
    sends: dict[tuple, list] = defaultdict(list)
    recvs: dict[tuple, list] = defaultdict(list)
    for res in results:
        for n in _comm_nodes(res.graph):
            if n.type is NodeType.COMM_SEND_NODE and n.comm_dst is not None:
                sends[(res.rank, n.comm_dst)].append((res.rank, n))
            elif n.type is NodeType.COMM_RECV_NODE and n.comm_src is not None:
                recvs[(n.comm_src, res.rank)].append((res.rank, n))
    out: dict[tuple[int, int], int] = {}
    for pair in set(sends) | set(recvs):
        s_list, r_list = sends.get(pair, []), recvs.get(pair, [])
        for k, ((sr, s), (rr, r)) in enumerate(zip(s_list, r_list)):
            same = s.comm_tag is not None and s.comm_tag == r.comm_tag
            tag = s.comm_tag if same else k
            out[(sr, s.id)] = tag
            out[(rr, r.id)] = tag
        for rank, n in s_list[len(r_list):] + r_list[len(s_list):]:
            if n.comm_tag is None:
                out[(rank, n.id)] = 0
    return out
