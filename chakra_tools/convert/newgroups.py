"""The process groups of a rank set `trace-convert scale` writes (scale.py): which groups the
old ones become at the new degree, their ids, and each rank's record of them."""

from __future__ import annotations

import json

from chakra_tools.core.errors import InputError
from chakra_tools.core.graph import RankSet
from chakra_tools.core.layout import ParallelLayout

from .joblayout import JobLayout


#: a scaled group's record lists its members up to this many; a larger one says its `size` (its
#: members are comm_group.json's, where every reader takes them from): listed in every rank's
#: file, a 16,384-rank world made each file 87 KB and the set 1.4 GB, and grows with the square
#: of the ranks
LISTED_MEMBERS = 1024


class NewGroups:
    """The scaled set's process groups: the first group made from an old one (at the lowest new
    rank: the world, replica 0's groups) keeps its id, every other one gets the next id after
    every old one."""

    def __init__(self, rs: RankSet, job: JobLayout, new: ParallelLayout):
        self.job, self.new = job, new
        self.groups: dict[str, tuple[int, ...]] = {}
        self.origin: dict[str, str] = {}
        self._ids: dict[tuple[int, ...], str] = {}
        numeric = [int(pg) for pg in rs.comm_groups if pg.isdigit()]
        self._next = max(numeric, default=0) + 1
        self._old = {pg: tuple(members) for pg, members in rs.comm_groups.items()}
        self._members: dict[tuple[str, int], tuple[int, ...]] = {}
        self._shared: dict[tuple[int, int] | None, tuple[int, ...]] = {}  # a dp group by (tp, pp); the world
        #: id(members) -> group id, for member tuples `_members` keeps alive (so their ids stay theirs)
        self._by_object: dict[int, str] = {}
        self._records: dict[str, str] = {}  # a rank's recorded process_groups -> the scaled ranks'

    def old_size(self, pg: str) -> int:
        """How many ranks old group `pg` had ("" and "0": the world)."""
        return self.job.layout.world if pg in ("", "0") else len(self._old[pg])

    def members(self, pg: str, rank: int) -> tuple[int, ...]:
        """The members, at new rank `rank`, of what old group `pg` was at its source rank: a
        group within a replica the same tensor-parallel indices and stages in `rank`'s replica
        (once per group and rank: every collective node of the rank asks)."""
        got = self._members.get((pg, rank))
        if got is None:
            kind = "world" if pg in ("", "0") else self.job.kinds.get(pg, "world")  # the world, where unused
            if kind in ("tp", "replica"):
                d, old = self.new.coord(rank)[1], self.job.layout
                got = tuple(sorted(self.new.rank(tp=t, dp=d, pp=p) for t, _, p in map(old.coord, self._old[pg])))
            else:  # one tuple for all its members: a copy for each made 16,384 ranks' worlds 7 GB
                t, _, p = self.new.coord(rank)
                key = (t, p) if kind == "dp" else None
                got = self._shared.get(key)
                if got is None:
                    got = self._shared[key] = self.new.dp_group(rank) if kind == "dp" else tuple(range(self.new.world))
            self._members[pg, rank] = got
        return got

    def id_for(self, pg: str, rank: int) -> str:
        """The id, at new rank `rank`, of what old group `pg` was at its source rank."""
        if pg in ("", "0"):
            return pg
        members = self.members(pg, rank)
        gid = self._by_object.get(id(members))  # a shared tuple: not hashed again (16,384 ints)
        if gid is None:
            gid = self._by_object[id(members)] = self._id_of(members, pg)
        return gid

    def _id_of(self, members: tuple[int, ...], pg: str) -> str:
        gid = self._ids.get(members)
        if gid is None:
            gid = pg if pg not in self.groups else str(self._next)
            if gid != pg:
                self._next += 1
            self._ids[members] = gid
            self.groups[gid] = members
            self.origin[gid] = pg
        return gid

    def records(self, recorded_json: str, source: str | None) -> str:
        """GlobalMetadata `process_groups` of a scaled rank whose source recorded
        `recorded_json`: a kept group's record as it was, a new one's description and the old
        group it was made from. The same for every rank made from the same record: worked out
        once."""
        got = self._records.get(recorded_json)
        if got is not None:
            return got
        try:
            recorded = dict(json.loads(recorded_json))
        except (ValueError, TypeError):
            raise InputError(f"{source}: GlobalMetadata process_groups is not a JSON object of groups") from None
        written = {}
        for gid, ranks in self.groups.items():
            was = self.origin[gid]
            info = recorded.get(was) if isinstance(recorded.get(was), dict) else {}
            members = {"ranks": list(ranks)} if len(ranks) <= LISTED_MEMBERS else {"size": len(ranks)}
            kept = {k: v for k, v in info.items() if k not in ("ranks", "size")}
            written[gid] = ({**kept, **members} if gid == was else
                            {**members, "desc": info.get("desc"), "made_from": was})
        got = self._records[recorded_json] = json.dumps(written, separators=(",", ":"))
        return got
