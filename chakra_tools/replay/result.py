"""What a replay produced: one record per replayed node, per-rank figures, the critical path.

Events are kept in flat arrays (8 bytes a field), so a replay of millions of nodes stays small.
Per rank: `finish_ns` (its last node's end), `compute_ns` (time with a host or GPU compute op
running), `comm_ns` (time with a communication op in flight, waiting for peers included),
`overlap_ns` (both at once), `exposed_comm_ns` (communication with no compute under it),
`idle_ns` (nothing in flight before `finish_ns`). The critical path walks back from the last node
to finish along what held each node back: the dependency that finished last, the node that freed
its lane, the last rank to join a collective, or the send a receive waited for.

The JSON document (`to_dict`, `trace-replay --json`) is documented in docs/reference/trace-replay.md.
"""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from chakra_tools.core import native
from chakra_tools.core.errors import Diagnostics
from chakra_tools.core.lanes import LANES, WORK
from chakra_tools.core.measured import Measured
from chakra_tools.core.replaydoc import FORMAT, VERSION, write_replay_result
from chakra_tools.core.model import CommType, NodeType

LANE_NAMES = LANES
_COMPUTE_LANES = tuple(i for i, lane in enumerate(LANES) if WORK[lane] in ("host", "compute"))
_COMM_LANES = tuple(i for i, lane in enumerate(LANES) if WORK[lane] == "comm")
#: the rank figures in C (`_kernel.rank_stats`), None where not built: `_rank_stats` is the reference
COMPILED = native.load("chakra_tools.replay._kernel")


def union(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted disjoint union of [start, end) intervals.

    >>> union([(5, 8), (0, 2), (1, 3), (8, 9)])
    [(0, 3), (5, 9)]
    """
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(intervals: Sequence[tuple[int, int]]) -> int:
    return sum(e - s for s, e in intervals)


def intersect(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> int:
    """Total length of the intersection of two sorted disjoint interval lists.

    >>> intersect([(0, 10)], [(2, 4), (8, 12)])
    4
    """
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _mask(lanes: Sequence[int]) -> int:
    return sum(1 << lane for lane in lanes)


def _rank_row(rank: int, start: int, finish: int, compute: int, comm: int, overlap: int, busy: int,
              nodes: int) -> dict:
    return {"rank": rank, "start_ns": start, "finish_ns": finish, "compute_ns": compute, "comm_ns": comm,
            "exposed_comm_ns": comm - overlap, "overlap_ns": overlap, "idle_ns": max(0, finish - start - busy),
            "nodes": nodes}


class ReplayResult:
    """Filled by the engine (`add`, `end`, `set_pred`, `pair`, `collective`), then `finalize`d."""

    def __init__(self, record_events: bool = True):
        self.record_events = record_events
        self.ev_rank = array("q")
        self.ev_node = array("Q")  # node ids are uint64
        self.ev_type = array("b")
        self.ev_lane = array("b")
        self.ev_start = array("q")
        self.ev_end = array("q")
        self.ev_pred = array("q")
        self.ev_name: list[str] = []
        self.cross: set[int] = set()  # events whose pred is a collective peer
        self.pairs: list[tuple[int, int]] = []  # (send event, recv event)
        self.collectives: list[dict] = []
        self.ranks: list[dict] = []
        self.critical_path: list[int] = []
        self.makespan_ns = 0
        self.config: dict = {}
        self.diagnostics = Diagnostics()
        self.fidelity: dict | None = None  # set by `compare`

    # -- filled by the engine -------------------------------------------------------------------
    def add(self, rank: int, node: int, name: str, ntype: int, lane: int, start: int, pred: int) -> int:
        self.ev_rank.append(rank)
        self.ev_node.append(node)
        self.ev_type.append(ntype)
        self.ev_lane.append(lane)
        self.ev_start.append(start)
        self.ev_end.append(-1)
        self.ev_pred.append(pred)
        if self.record_events:
            self.ev_name.append(name)
        return len(self.ev_node) - 1

    def adopt(self, take) -> None:
        """The events of a compiled loop (`_kernel.Kernel.take`), one column at a time."""
        for column, code in (("rank", "q"), ("node", "Q"), ("type", "b"), ("lane", "b"), ("start", "q"),
                             ("end", "q"), ("pred", "q")):
            values = array(code)
            values.frombytes(take(column))
            setattr(self, f"ev_{column}", values)
        if self.record_events:
            self.ev_name = take("name")

    def end(self, ev: int, t: int) -> None:
        self.ev_end[ev] = t

    def set_pred(self, ev: int, pred: int, *, cross: bool) -> None:
        self.ev_pred[ev] = pred
        if cross:
            self.cross.add(ev)

    def pair(self, send_ev: int, recv_ev: int) -> None:
        self.pairs.append((send_ev, recv_ev))

    def collective(self, members: list, group: tuple[int, ...], info, size: int, start: int, end: int) -> None:
        try:
            kind = CommType(info.comm_type).name
        except (TypeError, ValueError):
            kind = str(info.comm_type)
        self.collectives.append({
            "ranks": list(group), "node_ids": {str(m[0]): m[1] for m in members},
            "node_id": members[0][1], "name": info.name, "comm_type": kind, "bytes": size,
            "pg": info.pg_name, "issued_ns": {str(m[0]): m[4] for m in members},
            "start_ns": start, "end_ns": end})

    # -- summaries ------------------------------------------------------------------------------
    def finalize(self, world: Sequence[int], config: dict, diagnostics: Diagnostics,
                 start_ns: dict[int, int] | None = None) -> None:
        self.config = config
        self.diagnostics = diagnostics
        starts = start_ns or {}
        stats = None if COMPILED is None else COMPILED.rank_stats(
            self.ev_rank, self.ev_lane, self.ev_start, self.ev_end, world, _mask(_COMPUTE_LANES), _mask(_COMM_LANES))
        if stats is not None:
            self.ranks = [_rank_row(r, starts.get(r, 0), *row) for r, row in zip(world, stats)]
        else:
            per_rank: dict[int, dict[int, list]] = {r: {} for r in world}
            for rank, lane, start, end in zip(self.ev_rank, self.ev_lane, self.ev_start, self.ev_end):
                per_rank[rank].setdefault(lane, []).append((start, end))
            self.ranks = [self._rank_stats(r, per_rank[r], starts.get(r, 0)) for r in world]
        self.makespan_ns = max((r["finish_ns"] for r in self.ranks), default=0)
        self.critical_path = self._critical_path()

    @staticmethod
    def _rank_stats(rank: int, lanes: dict[int, list], start: int = 0) -> dict:
        """A rank's row from its events' spans per lane (`_kernel.rank_stats` is this in C)."""
        comp = union(iv for lane in _COMPUTE_LANES for iv in lanes.get(lane, ()))
        comm = union(iv for lane in _COMM_LANES for iv in lanes.get(lane, ()))
        busy = union(iv for ivs in lanes.values() for iv in ivs)
        finish = max((e for ivs in lanes.values() for _, e in ivs), default=0)
        return _rank_row(rank, start, finish, length(comp), length(comm), intersect(comp, comm), length(busy),
                         sum(len(v) for v in lanes.values()))

    def _critical_path(self) -> list[int]:
        if not len(self.ev_end):
            return []
        last = self.ev_end.index(max(self.ev_end))  # the latest end; of equal ones, the first event
        path, seen = [], set()
        ev = last
        while ev >= 0 and ev not in seen:
            seen.add(ev)
            path.append(ev)
            ev = self.ev_pred[ev]
        return path[::-1]

    def critical_path_ns(self) -> int:
        """Time covered by the critical path's nodes (a span shared by two path nodes, e.g. the
        two ends of a collective, counts once)."""
        total, reached = 0, None
        for e in self.critical_path:
            start = self.ev_start[e] if reached is None else max(self.ev_start[e], reached)
            total += max(0, self.ev_end[e] - start)
            reached = self.ev_end[e] if reached is None else max(reached, self.ev_end[e])
        return total

    def dep_edges(self) -> list[tuple[int, int]]:
        """(src event, dst event) for dependencies across lanes or ranks (drawn as flows)."""
        out = set(self.pairs)
        for ev in range(len(self.ev_pred)):
            p = self.ev_pred[ev]
            if p >= 0 and (self.ev_rank[p] != self.ev_rank[ev] or self.ev_lane[p] != self.ev_lane[ev]):
                out.add((p, ev))
        return sorted(out)

    # -- output ---------------------------------------------------------------------------------
    def event_dict(self, i: int) -> dict:
        return {"rank": self.ev_rank[i], "node_id": self.ev_node[i],
                "name": self.ev_name[i] if self.record_events else "",
                "type": NodeType(self.ev_type[i]).short, "lane": LANE_NAMES[self.ev_lane[i]],
                "start_ns": self.ev_start[i], "end_ns": self.ev_end[i]}

    def _event_dicts(self) -> list[dict]:
        """`event_dict` for every event, in one pass (a replay may have millions)."""
        types = {int(t): t.short for t in NodeType}
        return [{"rank": r, "node_id": n, "name": nm, "type": types[t], "lane": LANE_NAMES[ln],
                 "start_ns": st, "end_ns": en}
                for r, n, nm, t, ln, st, en in zip(self.ev_rank, self.ev_node, self.ev_name, self.ev_type,
                                                   self.ev_lane, self.ev_start, self.ev_end)]

    def to_dict(self, *, events: bool = True) -> dict:
        """The replay result document (core/replaydoc.py says what each key holds)."""
        doc = {
            "format": FORMAT, "version": VERSION,
            "makespan_ns": self.makespan_ns,
            "ranks": self.ranks,
            "collectives": [{**c, "rank": c["ranks"][0]} for c in self.collectives],
            "critical_path": [[self.ev_rank[e], self.ev_node[e]] for e in self.critical_path],
            "critical_path_ns": self.critical_path_ns(),
            "config": self.config,
            "diagnostics": [d.to_dict() for d in self.diagnostics],
        }
        if events and self.record_events:
            doc["events"] = self._event_dicts()
            doc["deps"] = [[self.ev_rank[s], self.ev_node[s], self.ev_rank[d], self.ev_node[d]]
                           for s, d in self.dep_edges()]
        if self.fidelity is not None:
            doc["fidelity"] = self.fidelity
        return doc

    def write(self, path: str | Path) -> None:
        """Save the document (`to_dict`) atomically: a failed write leaves no partial file."""
        self.save(path)

    def save(self, out: str | Path | None = None, timeline: str | Path | None = None) -> list[Path]:
        """Write the document to `out` and the Perfetto timeline to `timeline` (either may be
        None) as one replacement (core.commit): a process killed at any instant leaves both old
        files or both new ones, never a result beside the timeline of another replay."""
        from chakra_tools.core.commit import Staged, recover
        from chakra_tools.core.commit import atomic_output

        targets = [Path(p).absolute() for p in (out, timeline) if p is not None]
        if not targets:
            return []
        for t in targets[1:]:
            recover(t.parent)
        with Staged(targets[0].parent, targets[0].name) as staged:
            if out is not None:
                with atomic_output(staged.beside(targets[0]), "w") as f:
                    write_replay_result(self.to_dict(), f)
            if timeline is not None:
                self.timeline().write(staged.beside(targets[-1]), compress=targets[-1].name.endswith(".gz"))
            return staged.commit([])

    def compare(self, *, manifest: str | Path | dict | None = None,
                measured: Mapping[int, Measured] | None = None) -> dict | None:
        """Compare with what the capture measured: its manifest's step times, else the windows
        the rank files carry (`measured`, replay.fidelity.measured_of); kept in the document as
        "fidelity". None when neither is given."""
        from .fidelity import compare_with_manifest, compare_with_trace

        doc = self.to_dict(events=False)
        if manifest is not None:
            self.fidelity = compare_with_manifest(doc, manifest)
        elif measured:
            self.fidelity = compare_with_trace(doc, measured, self._step_starts())
        return self.fidelity

    def _step_starts(self) -> dict[int, list[int]]:
        """rank -> the replayed starts of its `ProfilerStep#N` nodes in step order (where names
        were recorded): what the profiler's steps became in the replay."""
        if not self.record_events:
            return {}
        found: dict[int, list[tuple[int, int]]] = {}
        for rank, name, start in zip(self.ev_rank, self.ev_name, self.ev_start):
            if name.startswith("ProfilerStep#") and name[13:].isdigit():
                found.setdefault(rank, []).append((int(name[13:]), start))
        return {rank: [t for _, t in sorted(steps)] for rank, steps in found.items()}

    def timeline(self):
        """A `core.chrome_trace.ChromeTrace`: one process per rank, one lane per resource."""
        from chakra_tools.core.chrome_trace import ChromeTrace

        t = ChromeTrace(metadata={"makespan_ns": self.makespan_ns, "source": "trace-replay"})
        classes = (self.config.get("replicas") or {}).get("classes") or {}
        for r in sorted({*self.ev_rank}):
            n = classes.get(str(r), 1)
            t.process(r, f"rank {r}" if n == 1 else f"rank {r} (and its {n - 1:,} replicas)")
        lanes = {}
        for i in range(len(self.ev_node)):
            key = (self.ev_rank[i], self.ev_lane[i])
            if key not in lanes:
                lanes[key] = t.lane(key[0], LANE_NAMES[key[1]], tid=key[1] + 1)
            t.complete(key[0], lanes[key], self.ev_name[i] if self.record_events else str(self.ev_node[i]),
                       start_ns=self.ev_start[i], dur_ns=self.ev_end[i] - self.ev_start[i],
                       cat=NodeType(self.ev_type[i]).short, args={"node_id": self.ev_node[i]})
        for s, d in self.dep_edges():
            t.flow((self.ev_rank[s], lanes[(self.ev_rank[s], self.ev_lane[s])], self.ev_start[s]),
                   (self.ev_rank[d], lanes[(self.ev_rank[d], self.ev_lane[d])], self.ev_start[d]),
                   name="dep", cat="dep")
        return t

    def table(self) -> str:
        """The per-rank table `trace-replay` prints: every time in one unit, the makespan's.
        Consecutive ranks whose rows read the same share one (`0-8191`): a 16,384-rank job's
        data-parallel replicas are a handful of lines, not sixteen thousand."""
        unit, per = time_unit(self.makespan_ns)
        head = (f"{'rank':>11} {'finish ' + unit:>12} {'compute ' + unit:>12} {'exposed comm ' + unit:>16} "
                f"{'overlap ' + unit:>12} {'idle ' + unit:>12} {'nodes':>8}")
        rows, runs = [head], []  # runs: [first rank, last rank, the row's figures]
        for r in self.ranks:
            figures = (f"{r['finish_ns'] / per:>12.3f} {r['compute_ns'] / per:>12.3f} "
                       f"{r['exposed_comm_ns'] / per:>16.3f} {r['overlap_ns'] / per:>12.3f} "
                       f"{r['idle_ns'] / per:>12.3f} {r['nodes']:>8}")
            if runs and runs[-1][2] == figures and runs[-1][1] + 1 == r["rank"]:
                runs[-1][1] = r["rank"]
            else:
                runs.append([r["rank"], r["rank"], figures])
        for first, last, figures in runs:
            rows.append(f"{first if first == last else f'{first}-{last}':>11} {figures}")
        by_class = isinstance((self.config.get("replicas") or {}).get("replayed"), list)
        rows.append(f"makespan {self.makespan_ns / per:.3f} {unit}; {len(self.collectives)} collectives"
                    f"{' of the ranks replayed' if by_class else ''}; critical "
                    f"path {len(self.critical_path)} nodes, {self.critical_path_ns() / per:.3f} {unit} busy")
        steps = self.config.get("captured_steps")
        if steps:
            step_unit, step_per = time_unit(self.makespan_ns // steps)
            rows.append(f"predicted step {self.makespan_ns / steps / step_per:.3f} {step_unit}: the makespan over "
                        f"the {steps} captured step{'s' if steps > 1 else ''} (trace-visualize report leads with it)")
        return "\n".join(rows)


def time_unit(ns: int) -> tuple[str, float]:
    """The unit a table of times up to `ns` is printed in, and ns per unit.

    >>> time_unit(250_600_000), time_unit(43_000), time_unit(12)
    (('ms', 1000000.0), ('us', 1000.0), ('ns', 1.0))
    """
    if ns >= 1_000_000:
        return "ms", 1e6
    if ns >= 1000:
        return "us", 1e3
    return "ns", 1.0


