"""Replaying a job once per class of ranks that are replicas of each other.

A generated or scaled job's data-parallel replicas (and often the tensor-parallel ranks within
one) run the same graph up to renaming ranks and groups. Where the network prices their
communication alike too, every member of a class takes the same time through every node as its
representative, so a replay of the representatives alone, with each absent rank arriving at a
collective when its representative does, gives every rank's figures exactly: a 131,072-rank job
of 4 pipeline stages replays as 4 ranks.

Exact, not approximate, and checked at both ends:

- *before*: each rank file's shape (core/shapes.py: every byte of its nodes but the groups and
  ranks they name) and the job's groups are refined into classes (colour refinement: a rank's
  class is its shape, the classes of its groups' members in order, its neighbours in each group
  and its peers, with the groups' and messages' places on the network); then `find_classes`
  checks what the replay of the representatives relies on (`_check`): a rank and its representative name, slot by
  slot, groups of the same length and places whose members have the same representatives, and
  peers likewise; the representatives' peers are representatives; an absent member of a group a
  representative takes part in has its representative in that group.
- *during*: at every collective, the finish the network model gives each absent member must be
  its representative's (`Mirrored`); a model that sets members apart (a ring whose links differ,
  a tree) stops the replay with the member that differs, and the caller falls back to a full one.

What is not replayed this way, with the reason (`ClassesRefused`): a congestion-aware network,
shared links or memory ports (replicas would meet there), the capture's own record as timing,
sets whose ranks all differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from chakra_tools.core.collector import gc_paused
from chakra_tools.core.errors import ChakraToolsError
from chakra_tools.core.shapes import LARGE_SET, RankShape, read_shape

from .backend import AnalyticalBackend
from .timing import Modelled, Staggered


class ClassesRefused(ChakraToolsError):
    """The rank set cannot be replayed by replica classes exactly; the message says why."""

    exit_code = 1


@dataclass(frozen=True)
class Classes:
    """Which rank replays for which: `mirror` maps every absent rank to its representative;
    `present` are the representatives, the ranks replayed."""

    mirror: Mapping[int, int]
    present: tuple[int, ...]

    def members(self) -> dict[int, list[int]]:
        """representative -> every rank of its class, itself first."""
        out = {r: [r] for r in self.present}
        for x, r in sorted(self.mirror.items()):
            out[r].append(x)
        return out

    def describe(self) -> dict:
        return {"ranks": len(self.present) + len(self.mirror), "replayed": list(self.present),
                "classes": {str(r): len(ms) for r, ms in self.members().items()}}


#: `trace-replay --replicas`: auto (classes where the set has `AUTO_RANKS` ranks or more and they
#: replay exactly, else every rank), on (classes or an error saying why not), off (every rank)
REPLICAS = ("auto", "on", "off")
AUTO_RANKS = LARGE_SET


def is_large(files: int) -> bool:
    """Whether a set of this many rank files is large: `auto` replays it by classes where it
    can, and it is validated one file per shape (core/shapes.py)."""
    return files >= AUTO_RANKS


def classes_for(path: str | Path, files: Mapping[int, Path], groups: Mapping[str, Sequence[int]], backend,
                replicas: str, *, modelled: bool, absent_peers: bool,
                shapes: Mapping[int, RankShape | None] | None = None) -> tuple[Classes | None, str | None]:
    """What `--replicas` (`REPLICAS`) makes of the rank set at `path`: (the classes to replay by,
    None) or (None, why not; None where not asked). `modelled`: the replay's timing is the model's;
    `shapes`: the files' shapes where the validation read them (else they are read here)."""
    if replicas == "off" or (replicas == "auto" and not is_large(len(files))):
        return None, None
    why = refusal(backend, modelled)
    if why is None and absent_peers:
        why = "--absent-peers assume: the ranks the set lacks are not known to be replicas"
    if why is None:
        try:
            with gc_paused():  # a shape per rank, all kept
                if shapes is None:
                    shapes = {r: read_shape(f) for r, f in files.items()}
                return find_classes(shapes, groups, backend), None
        except ClassesRefused as e:
            why = str(e)
    if replicas == "on":
        raise on_refused(path, why)
    return None, why


def on_refused(path: str | Path, why: str) -> ClassesRefused:
    """`--replicas on`'s error: the set, and why it does not replay by classes."""
    return ClassesRefused(f"{path}: --replicas on: {why} (--replicas off replays every rank)")


def refusal(backend, modelled: bool) -> str | None:
    """Why a replay on `backend` (under a timing from the model if `modelled`) cannot run by
    classes, or None: replicas must not meet anywhere but in their collectives."""
    if not modelled:
        return "the replay takes time from the capture's record, which differs from rank to rank"
    if type(backend) is not AnalyticalBackend:
        return f"the {type(backend).__name__} network model is not one classes are checked for (the analytical one is)"
    if backend.links is not None:
        return "a congestion-aware network: replicas' messages share links"
    if backend.memory.memory_type not in ("NO_MEMORY_EXPANSION", "PER_NPU_MEMORY_EXPANSION"):
        return f"memory {backend.memory.memory_type}: replicas share a memory port"
    return None


def find_classes(shapes: Mapping[int, RankShape | None], groups: Mapping[str, Sequence[int]],
                 backend: AnalyticalBackend) -> Classes:
    """The replica classes of the ranks `shapes` describes, checked (`ClassesRefused` says why
    there are none that replay exactly). `groups`: the comm-group file's; a name it lacks
    ("", "0") is every rank, as the replayer reads it."""
    world = tuple(sorted(shapes))
    address = backend.network.address
    places = _Places(address)
    group_of = {name: tuple(g) for name, g in groups.items()}

    def members(name: str) -> tuple[int, ...]:
        return group_of.get(name, world)

    named = {name for s in shapes.values() if s for name in s.groups}
    lacking = next(((name, r) for name in sorted(named) for r in members(name) if r not in shapes), None)
    if lacking is not None:
        raise ClassesRefused(f"group {lacking[0]!r} has rank {lacking[1]}, which has no file here")
    colour = _initial_colours(shapes)
    if len(set(colour.values())) == len(world):
        raise ClassesRefused("no two ranks run the same graph")
    place_of = {name: places.group(members(name)) for name in named}
    index_of = {name: {m: i for i, m in enumerate(members(name))} for name in place_of}
    for _ in range(REFINE_ROUNDS):
        group_colour = {name: hash((place_of[name], tuple(colour[m] for m in members(name)))) for name in place_of}

        def around(r: int, g: str) -> tuple:
            """The rank's group, and its neighbours there (a ring's member next to a slow one is not
            like the others)."""
            ring, i = members(g), index_of[g][r]
            return group_colour[g], colour[ring[i - 1]], colour[ring[(i + 1) % len(ring)]]

        refined = _renumber({r: (colour[r], tuple(around(r, g) if r in index_of[g] else group_colour[g]
                                                  for g in s.groups),
                                 tuple((colour.get(q, q), places.pair(r, q)) for q in s.ranks))
                             if s else colour[r] for r, s in shapes.items()})
        if len(set(refined.values())) == len(set(colour.values())):
            break
        colour = refined
    first: dict[int, int] = {}
    for r in world:
        first.setdefault(colour[r], r)
    mirror = {r: first[colour[r]] for r in world if first[colour[r]] != r}
    if not mirror:
        raise ClassesRefused("no two ranks run the same graph in the same place")
    classes = Classes(mirror, tuple(sorted(set(first.values()))))
    _check(classes, shapes, members, places)
    return classes


#: colour refinement stops here if it has not settled (a long ring with one odd member splits one
#: neighbour further each round): the classes are then coarser than they could be, and the
#: replay's own check (`Mirrored`) finds a member that is not like its representative
REFINE_ROUNDS = 16


def _initial_colours(shapes: Mapping[int, RankShape | None]) -> dict[int, int]:
    return _renumber({r: (s.digest, s.pattern, len(s.groups), len(s.ranks)) if s else ("unread", r)
                      for r, s in shapes.items()})


def _renumber(keys: Mapping[int, object]) -> dict[int, int]:
    ids: dict[object, int] = {}
    return {r: ids.setdefault(k, len(ids)) for r, k in keys.items()}


class _Places:
    """Where a group or a message lies on the network, as what the analytical model prices it
    by: the members' coordinates relative to the first member's, in the group's order (equal
    places cost alike; the converse need not hold, which only finds fewer classes)."""

    def __init__(self, address):
        self._address = address
        self._addresses: dict[int, tuple[int, ...]] = {}  # each rank's, computed once (the rounds ask again)
        self._groups: dict[tuple[int, ...], tuple] = {}
        self._pairs: dict[tuple[int, int], tuple[int, ...]] = {}

    def address(self, rank: int) -> tuple[int, ...]:
        got = self._addresses.get(rank)
        if got is None:
            got = self._addresses[rank] = self._address(rank)
        return got

    def group(self, ranks: tuple[int, ...]) -> tuple:
        got = self._groups.get(ranks)
        if got is None:
            base = self.address(ranks[0]) if ranks else ()
            got = self._groups[ranks] = tuple(tuple(x - y for x, y in zip(self.address(r), base)) for r in ranks)
        return got

    def pair(self, src: int, dst: int) -> tuple[int, ...]:
        got = self._pairs.get((src, dst))
        if got is None:
            got = self._pairs[src, dst] = tuple(x - y for x, y in zip(self.address(dst), self.address(src)))
        return got


def _check(classes: Classes, shapes: Mapping[int, RankShape | None], members, places: _Places) -> None:
    """What the replay of the representatives relies on (the module docstring), each checked
    outright: colours are hashes, and a collision must not pass for a class."""
    mirror = classes.mirror
    rep = lambda r: mirror.get(r, r)  # noqa: E731
    present = set(classes.present)
    seen_pairs: set[tuple[str, str]] = set()
    for x, m in mirror.items():
        sx, sm = shapes[x], shapes[m]
        if sx is None or sm is None or (sx.digest, sx.pattern) != (sm.digest, sm.pattern):
            raise ClassesRefused(f"rank {x} was classed with rank {m} but runs another graph")
        for gx, gm in zip(sx.groups, sm.groups):
            if (gx, gm) in seen_pairs:
                continue
            a, b = members(gx), members(gm)
            if len(a) != len(b) or places.group(a) != places.group(b) or any(rep(i) != rep(j) for i, j in zip(a, b)):
                raise ClassesRefused(f"rank {x}'s group {gx!r} and rank {m}'s group {gm!r}, in the same place of "
                                     "their graphs, differ in size, place on the network or members")
            seen_pairs.add((gx, gm))
        for qx, qm in zip(sx.ranks, sm.ranks):
            if rep(qx) != rep(qm) or places.pair(x, qx) != places.pair(m, qm):
                raise ClassesRefused(f"rank {x} names rank {qx} where rank {m} names rank {qm}: "
                                     "they are not replicas of each other")
    touched: dict[str, int] = {}
    for r in classes.present:
        s = shapes[r]
        for q in s.ranks:
            if q not in present:
                raise ClassesRefused(f"rank {r} sends to or receives from rank {q}, which is not replayed "
                                     "(messages between replicas)")
        for slot, g in enumerate(s.groups):
            touched.setdefault(g, slot)
    for g, slot in touched.items():
        for y in members(g):
            m = mirror.get(y)
            if m is None:
                continue
            sm = shapes[m]
            if slot >= len(sm.groups) or sm.groups[slot] != g or shapes[y].groups[slot] != g:
                raise ClassesRefused(f"rank {y} of group {g!r} replays as rank {m}, which does not take part in "
                                     "that group at the same place")


class Mirrored(Staggered):
    """`Staggered` for a replay of representatives: an absent member of a collective arrives when
    its representative does (`mirror`), and must leave when it leaves; where the model sets them
    apart, `ClassesRefused` names them. `last`: every member from the last arrival (`Modelled`)."""

    def __init__(self, backend, mirror: Mapping[int, int], last: bool = False):
        super().__init__(backend)
        self.mirror = mirror
        self.last = last

    def collective_ns(self, members: Sequence[tuple], group: tuple[int, ...], size: int) -> list[int]:
        if self.last:
            return Modelled.collective_ns(self, members, group, size)
        end_of, now = self.ends(self.backend.collective_finish_ns, members, group, size)
        present = {m[0] for m in members}
        for r, t in end_of.items():
            m = self.mirror.get(r)
            if m in present and t != end_of[m]:
                first = members[0][2]
                raise ClassesRefused(f"collective {first.name!r} on group {first.pg_name!r}: the network model "
                                     f"ends rank {r} at {t} ns and rank {m}, whose replica it is, at {end_of[m]} ns")
        return [end_of[m[0]] - now for m in members]

    def arrival_of(self, rank: int, arrival: Mapping[int, int], now: int) -> int:
        return arrival.get(rank, arrival.get(self.mirror.get(rank)))


def expand(result, classes: Classes) -> None:
    """Every rank's row in `result` (a replay of `classes.present`): a replica's is its
    representative's. Events, collectives and the critical path stay the representatives'."""
    rows = {row["rank"]: row for row in result.ranks}
    for x, m in classes.mirror.items():
        rows[x] = {**rows[m], "rank": x}
    result.ranks = [rows[r] for r in sorted(rows)]
    result.config["replicas"] = classes.describe()
