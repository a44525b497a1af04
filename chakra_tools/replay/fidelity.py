"""Replay against measurement: predicted step time vs the step times `trace-capture` measured.

A capture's `manifest.json` lists, per rank, `step_times_ns` (one per training step, step 0
first) and `captured_steps` (the step numbers the trace holds; also accepted at the top level).
The replayed trace covers the captured steps, so the predicted time of one step is the rank's
`finish_ns - start_ns` divided by their count; the measured one is the mean of `step_times_ns` over the
captured steps. The error is (predicted - measured) / measured.

Captures also record each step's wall-clock start (`step_starts_unix_ns`, one clock for the ranks
of a host). Then the whole job's captured window is measured too: from the earliest rank's start
of the first captured step to the latest rank's end of the last, per step, against the makespan
per step ("job"). That is the figure a synchronous job is judged by; per-rank step times of such
a job scatter with each rank's waiting.

Any converted host + device pair carries its own reference too (core/measured.py: the window its
host ops and their device work span, and the `ProfilerStep#N` ranges in it), so
`compare_with_trace` needs no manifest: per rank, the window against `finish_ns - start_ns`; for
the job, the window across ranks (earliest start to latest end) against the makespan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from chakra_tools.core.errors import InputError
from chakra_tools.core.manifest import RankRecord, RunManifest, manifest_from_dict, read_manifest
from chakra_tools.core.measured import Measured
from chakra_tools.core.replaydoc import headline_line


def _load(manifest: str | Path | dict | RunManifest) -> RunManifest:
    if isinstance(manifest, RunManifest):
        return manifest
    if isinstance(manifest, dict):
        return manifest_from_dict(manifest)
    return read_manifest(manifest)


def measured_step_ns(rec: RankRecord, man: RunManifest) -> tuple[float | None, list[int]]:
    """Mean measured time of the captured steps of one rank, and those step numbers."""
    times = rec.step_times_ns
    steps = rec.captured_steps or man.captured_steps
    picked = [times[s] for s in steps if 0 <= s < len(times)]
    if not picked:
        picked = list(times)
    return (sum(picked) / len(picked) if picked else None), list(steps)


def compare_with_manifest(result: dict, manifest: str | Path | dict | RunManifest) -> dict:
    """{"ranks": [{rank, measured_ns, predicted_ns, error}], "mean_abs_error", "step": {...}}.

    "step" compares the run as a whole: the measured step time averaged over ranks and captured
    steps against the makespan per captured step (ranks of a synchronous job measure their steps
    from different instants, so per-rank step times scatter more than the step itself).

    `result` is a replay result document (`ReplayResult.to_dict()`).

    >>> doc = {"ranks": [{"rank": 0, "finish_ns": 2200}]}
    >>> man = {"captured_steps": [2, 3], "ranks": [{"rank": 0, "step_times_ns": [9, 9, 1000, 1000]}]}
    >>> compare_with_manifest(doc, man)["ranks"][0]["error"]
    0.1
    """
    man = _load(manifest)
    finish = {r["rank"]: r["finish_ns"] - r.get("start_ns", 0) for r in result["ranks"]}
    _check_same_job(man, sorted(finish))
    rows = []
    for rec in man.ranks:
        rank = rec.rank
        measured, steps = measured_step_ns(rec, man)
        if rank not in finish or measured is None or measured <= 0:
            continue
        predicted = finish[rank] / max(1, len(steps))
        rows.append({"rank": rank, "steps": len(steps) or 1, "measured_ns": round(measured),
                     "predicted_ns": round(predicted), "error": round((predicted - measured) / measured, 6)})
    if not rows:
        raise InputError(f"{man.source}: no rank with step_times_ns among the replayed ranks "
                         f"({', '.join(map(str, sorted(finish)))})")
    mean_abs = sum(abs(r["error"]) for r in rows) / len(rows)
    steps = max(r["steps"] for r in rows)
    measured = sum(r["measured_ns"] for r in rows) / len(rows)
    predicted = max(r["finish_ns"] for r in result["ranks"]) / steps
    out = {"ranks": rows, "mean_abs_error": round(mean_abs, 6), "step": _versus(measured, predicted)}
    window = aligned_window_ns(man, [r["rank"] for r in rows])
    if window is not None:
        out["job"] = _versus(window / steps, predicted)
    out["headline"] = headline(out)
    return out


def headline(cmp: dict) -> dict:
    """The one figure a comparison is judged by, and what it is: the job's (its window across
    ranks, the time a synchronous job really takes) where known, else the step's. Every output
    leads with it; the per-rank and per-step figures are details."""
    if cmp.get("job"):
        what = ("the traced window across ranks against the makespan" if cmp.get("source") == "trace" else
                "the captured window across ranks per step against the makespan per step")
        return {"basis": "job", "what": what, **cmp["job"]}
    return {"basis": "step", "what": "the ranks' mean step time against the makespan per step", **cmp["step"]}


def mark_what_if(cmp: dict, changes: str) -> dict:
    """`cmp` (a comparison) as the change a what-if (`changes`: the links it changed) makes to
    the run that was measured, not an error of the replay: every output says so."""
    cmp["what_if"] = changes
    if cmp.get("headline"):
        cmp["headline"]["what_if"] = changes
    return cmp


def _check_same_job(man: RunManifest, ranks: list[int]) -> None:
    """A comparison only of a replay with the run it came from (or a run of its size): ranks the
    run did not have are refused, not compared with whatever rank 0 measured."""
    world = man.world_size or len(man.ranks)
    extra = [r for r in ranks if r >= world]
    if extra:
        raise InputError(f"{man.source}: a run of {world} rank(s), but the replay has {len(ranks)} (ranks "
                         f"{', '.join(map(str, extra[:8]))} are not in it): compare a replay with the run it "
                         "was converted from, or with a real run at its scale")


def compare_with_trace(result: dict, measured: dict[int, Measured],
                       step_starts: Mapping[int, Sequence[int]] | None = None) -> dict | None:
    """Like `compare_with_manifest`, against the windows the rank files carry (one "step": the
    whole window); None when no replayed rank has one. With `step_starts` (rank -> the replayed
    starts of its `ProfilerStep#N` nodes, in order), also the profiler's steps on their own
    (`steps`: from the first step's start to the last one's, against the same span of the
    ranges the trace recorded): what a window measured from `ProfilerStep`s compares with, apart
    from the work around the steps that the whole window holds.

    >>> from chakra_tools.core.measured import Measured
    >>> doc = {"makespan_ns": 1300, "ranks": [{"rank": 0, "start_ns": 0, "finish_ns": 1100},
    ...                                       {"rank": 1, "start_ns": 200, "finish_ns": 1300}]}
    >>> cmp = compare_with_trace(doc, {0: Measured((5000, 6000)), 1: Measured((5100, 6200))})
    >>> cmp["ranks"][1]["error"], cmp["job"]
    (0.0, {'measured_ns': 1200, 'predicted_ns': 1300, 'error': 0.083333})
    """
    finish = {r["rank"]: r["finish_ns"] - r.get("start_ns", 0) for r in result["ranks"]}
    known = {rank: m for rank, m in measured.items() if rank in finish and m.duration_ns > 0}
    if not known:
        return None
    rows = [{"rank": rank, "steps": len(m.steps_ns), **_versus(m.duration_ns, finish[rank])}
            for rank, m in sorted(known.items())]
    window = max(m.window_ns[1] for m in known.values()) - min(m.window_ns[0] for m in known.values())
    out = {"source": "trace", "ranks": rows,
           "mean_abs_error": round(sum(abs(r["error"]) for r in rows) / len(rows), 6),
           "job": _versus(window, result.get("makespan_ns") or max(finish.values()))}
    steps = [e - s for m in known.values() for s, e in m.steps_ns]
    if steps:
        out["profiler_steps_ns"] = {"count": len(steps), "min": min(steps), "max": max(steps)}
    spans = _step_spans(known, step_starts or {})
    if spans:
        out["steps"] = {"count": spans[0][0], "ranks": len(spans),
                        **_versus(sum(m for _, m, _ in spans) / len(spans), sum(p for _, _, p in spans) / len(spans))}
    out["headline"] = headline(out)
    return out


def _step_spans(measured: Mapping[int, Measured], step_starts: Mapping[int, Sequence[int]]) -> list[tuple]:
    """(steps, measured ns, replayed ns) per rank from its first `ProfilerStep`'s start to its
    last one's, where the rank recorded two or more and the replay ran them all; only ranks
    that span the same number of steps as the first such rank (one figure for the job)."""
    out = []
    for rank, m in sorted(measured.items()):
        starts = step_starts.get(rank, ())
        if len(m.steps_ns) >= 2 and len(starts) == len(m.steps_ns):
            out.append((len(starts) - 1, m.steps_ns[-1][0] - m.steps_ns[0][0], starts[-1] - starts[0]))
    return [s for s in out if s[0] == out[0][0]] if out else []


def measured_of(feeders: dict) -> dict[int, Measured]:
    """rank -> the measured reference its rank file carries (ranks without one left out)."""
    out = {}
    for rank, feeder in feeders.items():
        m = Measured.from_metadata(feeder.metadata, str(feeder.path))
        if m is not None:
            out[rank] = m
    return out


def _versus(measured: float, predicted: float) -> dict:
    return {"measured_ns": round(measured), "predicted_ns": round(predicted),
            "error": round((predicted - measured) / measured, 6)}


def aligned_window_ns(man: dict | RunManifest, ranks: list[int]) -> int | None:
    """Wall time of the captured window across `ranks`: earliest start of the first captured step
    to the latest end of the last; None when a rank lacks the wall-clock step starts.

    >>> man = {"captured_steps": [1, 2], "ranks": [
    ...     {"rank": 0, "step_times_ns": [5, 10, 10], "step_starts_unix_ns": [0, 100, 112]},
    ...     {"rank": 1, "step_times_ns": [5, 12, 9], "step_starts_unix_ns": [0, 103, 116]}]}
    >>> aligned_window_ns(man, [0, 1])  # 100 .. 116 + 9
    25
    """
    man = _load(man)
    begin, end = [], []
    for rec in man.ranks:
        if rec.rank not in ranks:
            continue
        steps = rec.captured_steps or man.captured_steps
        starts, times = rec.step_starts_unix_ns, rec.step_times_ns
        if not steps or max(steps) >= min(len(starts), len(times)):
            return None
        begin.append(starts[steps[0]])
        end.append(starts[steps[-1]] + times[steps[-1]])
    return max(end) - min(begin) if begin else None


def format_comparison(cmp: dict) -> str:
    """The headline error first, then the details, each saying what it compares (ms throughout)."""
    head = cmp.get("headline") or headline(cmp)
    per = " window" if cmp.get("source") == "trace" else "/step"
    word = "change" if cmp.get("what_if") else "error"  # a what-if is set against the run measured
    lines = [headline_line(head),
             "details:",
             f"  {'rank':>5} {'measured' + per:>16} {'predicted' + per:>17} "
             f"{word:>8}"]
    for r in cmp["ranks"]:
        lines.append(f"  {r['rank']:>5} {r['measured_ns'] / 1e6:>13.3f} ms {r['predicted_ns'] / 1e6:>14.3f} ms "
                     f"{r['error'] * 100:>+7.1f}%")
    lines.append(f"  mean |{word}| over ranks {cmp['mean_abs_error'] * 100:.1f}% (each rank's own steps, which "
                 "start at different instants)")
    st = cmp.get("step")
    if st and head["basis"] != "step":
        lines.append(f"  step (the ranks' mean step time vs the makespan per step): measured "
                     f"{st['measured_ns'] / 1e6:.3f} ms, predicted {st['predicted_ns'] / 1e6:.3f} ms, "
                     f"{word} {st['error'] * 100:+.1f}%")
    steps = cmp.get("profiler_steps_ns")
    if steps:
        lines.append(f"  ProfilerStep ranges in the window: {steps['count']}, "
                     f"{steps['min'] / 1e6:.3f} .. {steps['max'] / 1e6:.3f} ms")
    st = cmp.get("steps")
    if st:
        lines.append(f"  {st['count']} step(s) from the first ProfilerStep's start to the last one's (the work "
                     f"around them left out; mean over {st['ranks']} rank(s)): measured "
                     f"{st['measured_ns'] / 1e6:.3f} ms, predicted {st['predicted_ns'] / 1e6:.3f} ms, "
                     f"{word} {st['error'] * 100:+.1f}%")
    return "\n".join(lines)
