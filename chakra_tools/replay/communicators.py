"""Which ranks a collective runs on: its process group (pg_name) looked up in the comm-group file.

Members keep the file's order: ASTRA-sim's ring over a communicator group follows it. Without a
file every group is every rank (said once, at the end of the replay); with one, a pg_name it does
not name, or a rank outside the group it names, is bad input.
"""

from __future__ import annotations

from typing import Container, Mapping, Sequence

from chakra_tools.core.errors import InputError
from chakra_tools.core.model import CommType
from chakra_tools.feed.info import NodeInfo

from .resources import RankState

#: the collective kinds a COMM_COLL node may name
COMM_TYPES = frozenset(int(t) for t in CommType)
#: collectives whose size legitimately differs per rank (alltoallv splits, a root's buffer)
PER_RANK_SIZES = frozenset((int(CommType.ALL_TO_ALL), int(CommType.GATHER), int(CommType.SCATTER)))


class Communicators:
    """The groups of one replay: `members` (pg_name -> ranks), `assumed` (pg_name, rank, node)
    where a group was taken as every rank for want of a file."""

    def __init__(self, groups: Mapping[str, Sequence[int]], world: tuple[int, ...], present: Container[int]):
        self.members = {str(k): tuple(v) for k, v in groups.items()}
        self.from_file = bool(self.members)
        self.world = world
        self.present = present
        self.assumed: list[tuple[str, int, int]] = []
        self._present_in: dict[str, int] = {}  # pg_name -> how many of its ranks are in the set

    def group_of(self, r: RankState, nid: int, info: NodeInfo) -> tuple[int, ...]:
        """The group of collective node `nid` of rank `r`; an error where its kind or group is none."""
        if info.comm_type not in COMM_TYPES:
            raise InputError(f"{r.feeder.path}: rank {r.rank}: node {nid} ({info.name!r}): comm_type "
                             f"{info.comm_type} is no collective kind (0..{max(COMM_TYPES)})")
        pg = info.pg_name
        group = self.members.get(pg)
        if group is None:
            if pg not in ("", "0") and self.from_file:
                raise InputError(f"{r.feeder.path}: rank {r.rank}: node {nid} ({info.name!r}): pg_name {pg!r} is not "
                                 f"in the comm-group file (groups: {', '.join(sorted(self.members))})")
            if pg not in ("", "0"):  # no file: every group is every rank, said once at the end
                self.assumed.append((pg, r.rank, nid))
                self.members[pg] = self.world
            group = self.world
        if r.rank not in group:
            raise InputError(f"{r.feeder.path}: rank {r.rank}: node {nid} ({info.name!r}): rank is not a member of "
                             f"process group {pg!r} {list(group)}")
        return group

    def present_in(self, pg: str, group: tuple[int, ...]) -> int:
        """How many of `group`'s ranks are in the replay."""
        n = self._present_in.get(pg)
        if n is None:
            n = self._present_in[pg] = sum(1 for g in group if g in self.present)
        return n


def mismatches(members: Sequence[tuple], costed: str) -> list[tuple[str, str, int, int]]:
    """(code, message, rank, node) for each member of a collective (engine's (rank, nid, info,
    ...) tuples) whose kind or size differs from the first member's; `costed` says how the
    collective is priced despite it."""
    first = members[0][2]
    out = []
    for rank, nid, info, *_ in members[1:]:
        sizes_differ = info.comm_size != first.comm_size and first.comm_type not in PER_RANK_SIZES
        if info.comm_type != first.comm_type or sizes_differ:
            out.append(("collective-mismatch", f"collective on pg {first.pg_name!r}: {_kind(info)} "
                        f"{info.comm_size} B here, {_kind(first)} {first.comm_size} B on rank {members[0][0]}: "
                        f"costed {costed}", rank, nid))
    return out


def _kind(info: NodeInfo) -> str:
    try:
        return CommType(info.comm_type).name
    except (TypeError, ValueError):
        return str(info.comm_type)
