"""What a replay that cannot go on says: every stuck rank and what it waits for."""

from __future__ import annotations

from typing import Sequence

from chakra_tools.feed import DeadlockError

from .resources import RankState


def deadlock(e, stuck: Sequence[RankState]) -> DeadlockError:
    """The error for `stuck` ranks of the replay `e` (an engine.Replayer): per rank its collectives waiting for
    members, its sends and receives waiting for their other half, its nodes waiting for
    dependencies; and the ranks named that are not in the set."""
    lines = [_blocked_text(e, r) for r in stuck]
    absent = sorted({g for pg, _ in e._rendezvous for g in e.groups.get(pg, ()) if g not in e.ranks}
                    | {p for p in e.messages.peers() if p not in e.ranks})
    hint = (f" (ranks {absent[:8]}{' ...' if len(absent) > 8 else ''} are not in this set: "
            "--absent-peers assume replays it as if they arrived with the ranks given)") if absent else ""
    return DeadlockError(f"{stuck[0].feeder.path}: deadlock: " + " | ".join(lines) + hint)


def _blocked_text(e, r: RankState) -> str:
    waits = []
    for (pg, k), members in sorted(e._rendezvous.items(), key=lambda kv: str(kv[0])):
        mine = [m for m in members if m[0] == r.rank]
        group = e.groups.get(pg, e.world)
        if mine:
            missing = sorted(set(group) - {m[0] for m in members})
            waits.append(f"%{mine[0][1]} {mine[0][2].name!r} (collective #{k} of pg {pg!r}) "
                         f"waits for ranks {missing}")
    waits += e.messages.waits_of(r.rank)
    for nid, deps in r.feeder.blocked(limit=3):
        waits.append(f"%{nid} waits for " + ", ".join(f"%{d}" for d in deps))
    return f"rank {r.rank}: " + "; ".join(waits[:6]) + (" ..." if len(waits) > 6 else "")
