"""Converting a whole run: find the ranks, convert them in parallel, make names global, check,
write all or nothing.

Executors: "serial" (in this process), "process" (a process pool, `jobs` workers; the default
when there is more than one rank) and "dask" (the same per-rank function on a Dask cluster:
`scheduler` is its address; the trace files must be readable by the workers at the same paths).
A rank that fails stops the conversion with its file named, and nothing is written.

>>> from chakra_tools.convert.run import RankSpec
>>> RankSpec(0, "run/rank-0.host.json.gz", None).describe()
'rank 0 (run/rank-0.host.json.gz)'
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from chakra_tools.core.errors import ChakraToolsError, Diagnostic, Diagnostics, InputError
from chakra_tools.core.collector import gc_paused
from chakra_tools.core.graph import RankSet
from chakra_tools.core.manifest import MANIFEST, read_job, read_manifest
from chakra_tools.core.placement import record_placement

from .crossrank import assign_groups, globalise, record_groups, world_of
from .rank import GroupInfo, RankResult, convert_rank
from .align import align_collectives



class ConversionCheckError(ChakraToolsError):
    """The converted rank set violates what simulators need; nothing was written."""

    exit_code = 3

    def __init__(self, message: str, diagnostics: list[Diagnostic]):
        super().__init__(message)
        self.diagnostics = diagnostics


@dataclass(frozen=True)
class RankSpec:
    rank: int
    host: str | None
    device: str | None
    #: the steps the capture finished in its window (manifest): a step the script's end cut
    #: short (`ProfilerStep#N` still open when the profiler stopped) is left out
    steps: tuple[int, ...] = ()
    #: the machine the rank ran on (the manifest's host name), kept in its file's metadata
    machine: str | None = None

    def describe(self) -> str:
        return f"rank {self.rank} ({self.host or self.device})"


@dataclass
class RunInputs:
    ranks: list[RankSpec]
    groups: dict[str, GroupInfo] = field(default_factory=dict)
    world_size: int | None = None
    source: str = ""
    #: the collective library the run used (gloo, nccl), where the manifest says
    backend: str | None = None


@dataclass
class ConvertReport:
    files: list[Path]
    rankset: RankSet
    diagnostics: Diagnostics
    stats: dict[int, dict]
    out: Path | None = None  # the folder written, None when nothing was

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    def to_dict(self) -> dict:
        """The `trace-convert --json` document: where it wrote what, per-rank figures, groups,
        and every finding."""
        return {
            "out": str(self.out), "files": [str(f) for f in self.files],
            "ranks": {str(r): s for r, s in sorted(self.stats.items())},
            "comm_groups": {k: list(v) for k, v in self.rankset.comm_groups.items()},
            "counts": dict(sorted(self.diagnostics.counts.items())),
            "diagnostics": [d.to_dict() for d in self.diagnostics],
        }


def inputs_from_run(folder: str | Path | list[str | Path]) -> RunInputs:
    """The ranks of a `trace-capture` run folder, from its manifest: a single-node run, the run
    folder of a multi-node launch (a node-<k> folder per node) or, given a list, the folders each
    node's capture wrote, which make one job (core.manifest.read_job)."""
    folders = [Path(f) for f in folder] if isinstance(folder, (list, tuple)) else [Path(folder)]
    for f in folders:
        _check_run_folder(f)
    man = read_job(folders) if len(folders) > 1 else read_manifest(folders[0])
    specs = []
    for r in man.ranks:
        if not r.host_trace and not r.device_trace:
            if man.status != "ok" and man.error:  # the cause trace-capture reported, not this rank's echo of it
                raise InputError(f"{man.source}: the run failed ({man.status}): {man.error}; rank {r.rank} left "
                                 "no traces. Fix the script and capture again")
            raise InputError(f"{man.source}: rank {r.rank} has no traces (status "
                             f"{r.status!r}: {r.error or 'no error recorded'})")
        specs.append(RankSpec(r.rank, _path(man.trace_path(r.host_trace)), _path(man.trace_path(r.device_trace)),
                              tuple(r.captured_steps or man.captured_steps or ()), r.host))
    if not specs:
        raise InputError(f"{man.source}: lists no ranks")
    groups = {g.name: GroupInfo(g.ranks or None, g.desc, len(g.ranks) or None) for g in man.process_groups}
    return RunInputs(specs, groups, man.world_size, str(man.source), man.backend)


def _check_run_folder(folder: Path) -> None:
    """A run folder, or an InputError that says what it is instead and what to do: a folder of
    runs lists them; a converted rank set says it is converted already."""
    if (folder / MANIFEST).is_file() or any(folder.glob(f"node-*/{MANIFEST}")):
        return
    if not folder.exists():
        raise InputError(f"{folder}: no such folder")
    runs = sorted(str(p.parent) for p in folder.glob(f"*/{MANIFEST}"))
    if runs:
        shown = "\n  ".join(runs[:10]) + (f"\n  ... and {len(runs) - 10} more" if len(runs) > 10 else "")
        raise InputError(f"{folder}: not a run folder but a folder of {len(runs)} runs; convert one:\n  {shown}")
    if any(folder.glob("*.et")):
        raise InputError(f"{folder}: holds Chakra .et files, converted already: replay it (trace-replay "
                         f"{folder}) or convert the run folder it came from")
    raise InputError(f"{folder}: no {MANIFEST} (not a trace-capture run folder); "
                     "give the traces with --host/--device/--rank instead")


def _path(p: Path | None) -> str | None:
    return None if p is None else str(p)


def inputs_from_files(hosts: list[str], devices: list[str], ranks: list[int]) -> RunInputs:
    """Ranks given one by one; `ranks` defaults to the ranks the device traces record (Kineto's
    `distributedInfo`), when each names a different one, else to 0..n-1 in the order given."""
    n = max(len(hosts), len(devices))
    if hosts and devices and len(hosts) != len(devices):
        raise InputError(f"{len(hosts)} --host and {len(devices)} --device traces: give one of "
                         "each per rank (or only --host)")
    for p in hosts + devices:
        if not Path(p).is_file():
            raise InputError(f"{p}: no such file")
    if not ranks and devices:
        recorded = [recorded_rank(p) for p in devices]
        if None not in recorded and len(set(recorded)) == n:
            ranks = recorded
    ranks = ranks or list(range(n))
    if len(ranks) != n:
        raise InputError(f"{len(ranks)} --rank values for {n} ranks")
    if len(set(ranks)) != len(ranks):
        raise InputError(f"--rank values repeat: {ranks}")
    specs = [RankSpec(r, hosts[i] if hosts else None, devices[i] if devices else None)
             for i, r in enumerate(ranks)]
    return RunInputs(specs, source="command line")


#: `"distributedInfo": {... "rank": N` before any nested object: where Kineto writes it, near the
#: start of the file, ahead of the events
_RECORDED_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
_HEAD_BYTES = 1 << 20


def recorded_rank(path: str | Path) -> int | None:
    """The rank a Kineto trace says it is (its `distributedInfo`), None where its first MiB does
    not say: one rank's file of a larger job keeps its own rank (a tensor-parallel group that
    does not hold rank 0 stays its group). Reads only the file's head.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "k.json"
    >>> _ = f.write_text('{"distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8}, "traceEvents": []}')
    >>> recorded_rank(f)
    3
    >>> _ = f.write_text('{"traceEvents": [], "distributedInfo": {"pg_config": [{"rank": 1}]}}')
    >>> recorded_rank(f) is None  # not said before a nested object: not guessed
    True
    """
    with open(path, "rb") as f:
        head = f.read(_HEAD_BYTES)
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, _HEAD_BYTES)
        except zlib.error:
            return None
    m = _RECORDED_RANK.search(head)
    return int(m.group(1)) if m else None


#: what a conversion writes for unless told otherwise: ASTRA-sim runs the output unchanged
DEFAULT_CONSUMER = "astra-sim"


def convert(inputs: RunInputs, out_dir: str | Path | None = None, *, prefix: str = "trace",
            jobs: int | None = None, executor: str = "auto", scheduler: str | None = None,
            check: bool = True, force: bool = False, metadata_nodes: bool = False,
            target: str | None = None, adapt: str | None = DEFAULT_CONSUMER,
            on_rank_done: Callable[[int], None] | None = None) -> ConvertReport:
    """Convert every rank, globalise groups and tags, validate, then write (unless out_dir is None).

    `metadata_nodes` keeps process-group setup as a METADATA node (ASTRA-sim 2.0 aborts on it;
    by default it is a plain COMP node and the groups live in comm_group.json, `pg_name` and
    each rank's GlobalMetadata). `adapt` ("astra-sim", the default; None keeps every recorded
    kind) writes what that consumer runs in place of what it cannot (core/consumers.py:
    collectives of a kind it cannot simulate as the nearest kind it can, the recorded kind in
    `recorded_comm_type`), so the default output runs in ASTRA-sim unchanged. `target` adapts for
    that consumer and also validates for it (its findings can stop the conversion).
    Raises ConversionCheckError (nothing written) when validation finds errors and not `force`.
    The cyclic garbage collector is paused throughout: the graphs are a few objects per node,
    none in a cycle, and a collection would walk them all again and again (a tenth of the time).
    """
    with gc_paused():
        return _convert(inputs, out_dir, prefix=prefix, jobs=jobs, executor=executor,
                        scheduler=scheduler, check=check, force=force,
                        metadata_nodes=metadata_nodes, target=target, adapt=target or adapt,
                        on_rank_done=on_rank_done)


def _convert(inputs: RunInputs, out_dir, *, prefix, jobs, executor, scheduler, check, force,
             metadata_nodes, target, adapt, on_rank_done) -> ConvertReport:
    results = run_ranks(inputs, jobs=jobs, executor=executor, scheduler=scheduler,
                        metadata_nodes=metadata_nodes, on_rank_done=on_rank_done)
    diags = Diagnostics()
    for r in results:
        diags.extend(r.diagnostics)
    world = world_of(results, inputs.world_size, inputs.source)
    ids, groups = assign_groups(results, world, diags)
    globalise(results, ids, diags)
    record_groups(results, ids, groups)
    record_placement([r.graph for r in results], {s.rank: s.machine for s in inputs.ranks}, inputs.backend,
                     conversion_id(inputs))
    rankset = RankSet({r.rank: r.graph for r in results}, groups, prefix)
    align_collectives(rankset, diags, sampled=len(world) > len(results))
    if adapt is not None:
        _adapt(rankset, adapt)
    if check:
        _check(rankset, diags, force, target)
    files = rankset.write(out_dir, prefix, record_world=True) if out_dir is not None else []
    return ConvertReport(files, rankset, diags, {r.rank: r.stats for r in results},
                         None if out_dir is None else Path(out_dir))


def _adapt(rankset: RankSet, target: str) -> None:
    """Rewrite every rank's nodes into what `target` runs (core/consumers.py ADAPTERS)."""
    from chakra_tools.core.consumers import ADAPTERS

    adapt = ADAPTERS.get(target)
    if adapt is None:
        raise InputError(f"unknown target {target!r} (known: {', '.join(sorted(ADAPTERS))})")
    for g in rankset:
        for nid, node in list(g.nodes.items()):
            new = adapt(node)
            if new is not node:
                g.nodes[nid] = new


def conversion_id(inputs: RunInputs) -> str:
    """The same for every file of one conversion, and for a conversion of the same inputs again
    (outputs stay byte-stable), different for other inputs: each rank's trace names and sizes."""
    def size(p: str | None) -> int:
        return os.path.getsize(p) if p and os.path.exists(p) else -1

    parts = sorted((s.rank, Path(s.host).name if s.host else "", size(s.host),
                    Path(s.device).name if s.device else "", size(s.device)) for s in inputs.ranks)
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


#: the converter's findings that refuse its output unless --force, as validation errors do
REFUSING = ("unpaired-traces",)


def _check(rankset: RankSet, diags: Diagnostics, force: bool, target: str | None = None) -> None:
    from chakra_tools.core.validate import validate_rankset

    found = validate_rankset(rankset, target=target)
    diags.extend(found)
    # the converter's own errors (a host trace paired with another process's device trace)
    # refuse the output as validation's do
    errors = ([d for d in diags if d.severity == "error" and d.code in REFUSING]
              + [d for d in found if d.severity == "error"])
    if errors and not force:
        # each finding on an `error:` line of its own, as trace-replay lists a refused set's
        shown = "".join(f"\nerror: {d}" for d in errors[:20])
        more = f"\nerror: ... and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise ConversionCheckError(
            f"the converted traces fail their checks ({len(errors)} errors), nothing written "
            f"(--force writes them anyway):{shown}{more}", errors)


def run_ranks(inputs: RunInputs, *, jobs: int | None = None, executor: str = "auto",
              scheduler: str | None = None, metadata_nodes: bool = False,
              on_rank_done: Callable[[int], None] | None = None) -> list[RankResult]:
    """RankResults in rank order, computed by the chosen executor."""
    specs = sorted(inputs.ranks, key=lambda s: s.rank)
    if executor == "auto":
        executor = "process" if len(specs) > 1 and (jobs or os.cpu_count() or 1) > 1 else "serial"
    runner = {"serial": _serial, "process": _process, "dask": _dask}.get(executor)
    if runner is None:
        raise InputError(f"unknown executor {executor!r} (serial, process, dask)")
    done = on_rank_done or (lambda r: None)
    work = functools.partial(_one, groups=inputs.groups, metadata_nodes=metadata_nodes)
    results = runner(specs, work, jobs=jobs, scheduler=scheduler, done=done)
    return sorted(results, key=lambda r: r.rank)


def _one(spec: RankSpec, groups: dict, metadata_nodes: bool = False) -> RankResult:
    return convert_rank(spec.host, spec.device, spec.rank, groups, metadata_nodes=metadata_nodes,
                        steps=spec.steps)


def _serial(specs, work, *, jobs, scheduler, done) -> list[RankResult]:
    out = []
    for s in specs:
        out.append(work(s))
        done(s.rank)
    return out


def _process(specs, work, *, jobs, scheduler, done) -> list[RankResult]:
    workers = max(1, min(jobs or os.cpu_count() or 1, len(specs)))
    out = []
    from concurrent.futures import ProcessPoolExecutor, as_completed  # 25 ms: only when used

    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(work, s): s for s in specs}
        try:
            for f in as_completed(futures):
                out.append(_result(f, futures[f]))
                done(futures[f].rank)
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return out


def _result(future, spec: RankSpec) -> RankResult:
    try:
        return future.result()
    except ChakraToolsError:
        raise
    except Exception as e:  # a bug or an unexpected input: still name the rank and its file
        raise ChakraToolsError(f"{spec.describe()}: conversion failed: {type(e).__name__}: {e}") from e


def _dask(specs, work, *, jobs, scheduler, done) -> list[RankResult]:
    try:
        from dask.distributed import Client, as_completed as dask_completed
    except ImportError:
        raise InputError("--executor dask needs Dask: pip install 'chakra-tools[dask]'") from None
    if not scheduler:
        raise InputError("--executor dask needs --scheduler ADDRESS (e.g. tcp://host:8786)")
    out = []
    with Client(scheduler) as client:
        futures = [client.submit(work, s, pure=False) for s in specs]
        by_key = {f.key: s for f, s in zip(futures, specs)}
        for f in dask_completed(futures):
            spec = by_key[f.key]
            out.append(_result(f, spec))
            done(spec.rank)
    return out


def default_out(run: str | Path | None) -> Path:
    """Where a conversion goes unless told: `<run folder>/chakra`, or `chakra` here."""
    return Path(run) / "chakra" if run is not None else Path("chakra")


def consumer_options(name: str | None) -> dict:
    """`convert`'s `target` and `adapt` for `trace-convert --for NAME`: None (the default) adapts
    for ASTRA-sim without validating for it, "exact" keeps every recorded kind, a consumer's
    name adapts and validates for it."""
    from chakra_tools.core.consumers import ADAPTERS

    if name == "exact":
        return {"target": None, "adapt": None}
    if name is not None and name not in ADAPTERS:
        raise InputError(f"unknown consumer {name!r} (known: exact, {', '.join(sorted(ADAPTERS))})")
    return {"target": name, "adapt": DEFAULT_CONSUMER}


def convert_run(folder: str | Path, out_dir: str | Path | None = None, **kw) -> ConvertReport:
    """Convert a `trace-capture` run folder into `out_dir` (default `<folder>/chakra`).

    Keyword arguments are those of `convert` (prefix, jobs, executor, scheduler, check, force).
    """
    return convert(inputs_from_run(folder), default_out(folder) if out_dir is None else out_dir, **kw)
