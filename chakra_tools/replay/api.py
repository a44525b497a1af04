"""Opening a rank set and driving a replay: what `trace-replay` and the Python API call.

The kernel (engine.py: `Replayer`, `Resources`, the handlers) replays feeders under a timing
policy (modes.py: which one a set of capture modes means, `CaptureModes.timing`); this module opens
a rank set's feeders and comm groups (`open_rankset`) and runs the whole command as one call:
validate, replay, compare with the measured step (`replay_rankset`).
engine.py imports nothing from here.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from chakra_tools.core.errors import ChakraToolsError, Diagnostic, InputError
from chakra_tools.core.graph import find_rank_files, read_comm_groups
from chakra_tools.core.measured import captured_steps
from chakra_tools.feed.feeder import ETFeeder
from chakra_tools.feed.protocol import Backend

from .backend import AnalyticalBackend
from .config import default_network
from .replicas import REPLICAS, Classes, ClassesRefused, Mirrored, classes_for, expand, is_large, on_refused
from .engine import Replayer
from .resources import DEFAULT_LIMITS, Resources
from .fidelity import compare_with_manifest, mark_what_if, measured_of
from .spec import SystemSpec
from .result import ReplayResult
from .modes import CaptureModes

if TYPE_CHECKING:
    from .netfit import Calibration

#: per-rank feeder window of a replay: every rank holds one, and a stalled replay reads further
REPLAY_WINDOW = 8192


def open_rankset(path: str | Path, comm_group: str | Path | None = None, *,
                 resolve: Sequence[str] = ("data", "ctrl"), window: int = REPLAY_WINDOW,
                 ranks: Sequence[int] | None = None,
                 files: Mapping[int, Path] | None = None) -> tuple[dict[int, ETFeeder], dict[str, tuple[int, ...]]]:
    """One feeder per rank file of a rank set (only `ranks`' where given), and its comm groups
    (the file beside the traces if any). `files`: the set's files where the caller listed them."""
    files = find_rank_files(path) if files is None else files
    return open_feeders(files, resolve=resolve, window=window, ranks=ranks), comm_groups_of(files, comm_group)


def open_feeders(files: Mapping[int, Path], *, resolve: Sequence[str] = ("data", "ctrl"),
                 window: int = REPLAY_WINDOW, ranks: Sequence[int] | None = None) -> dict[int, ETFeeder]:
    """One feeder per rank file (only `ranks`' where given)."""
    return {r: ETFeeder(f, resolve=resolve, window=window, rank=r, eager_info=True)
            for r, f in files.items() if ranks is None or r in ranks}


def comm_groups_of(files: Mapping[int, Path], comm_group: str | Path | None) -> dict[str, tuple[int, ...]]:
    """The comm groups of a rank set: `comm_group`'s, else those of the file beside its traces."""
    found = comm_group_file(files, comm_group)
    return dict(read_comm_groups(found)) if found else {}


def comm_group_file(files: Mapping[int, Path], comm_group: str | Path | None) -> str | Path | None:
    """`comm_group`, else the comm_group.json beside the rank files, else None."""
    if comm_group is None:
        beside = next(iter(files.values())).parent / "comm_group.json"
        comm_group = beside if beside.exists() else None
    return comm_group


def run_replay(path: str | Path, feeders: Mapping[int, ETFeeder], backend: Backend, *,
               groups: Mapping[str, Sequence[int]] | None = None, modes: CaptureModes = CaptureModes(),
               limits: Mapping[str, int] | None = None, record_events: bool = True,
               memory_on_comm: bool = True, absent_peers: bool = False,
               classes: Classes | None = None, kernel: str = "auto") -> ReplayResult:
    """Replay the opened rank set at `path` under `modes`, `limits` per lane (`parse_limits`;
    None: the defaults, with what the backend says of its library: `lane_limits`, gloo's two
    worker threads, and `call_lanes`, whose they are); `memory_on_comm`: see `Resources`;
    `absent_peers`: see `Replayer`.
    `classes` (replicas.find_classes): `feeders` are its representatives, and the result has
    every rank's row (`ClassesRefused` where the model sets a replica apart). `kernel`: see
    `Replayer` (the compiled event loop where it applies, or the Python reference)."""
    by_kind = modes.lanes in (None, "kind")  # per thread: as recorded
    library = getattr(backend, "lane_limits", {}) if by_kind else {}
    limits = dict(limits) if limits else {**DEFAULT_LIMITS, **library}
    resources = Resources(limits, per=modes.check().lanes, memory_on_comm=memory_on_comm,
                          calls=getattr(backend, "call_lanes", "rank") if by_kind else "rank")
    timing = (modes.timing(path, feeders, backend) if classes is None
              else Mirrored(backend, classes.mirror, last=modes.coll_start == "last"))
    result = Replayer(feeders, timing, groups=groups, resources=resources, record_events=record_events,
                      absent_peers=absent_peers or classes is not None, kernel=kernel).run()
    result.config["modes"] = asdict(modes)  # what of the capture's record the durations came from
    first = feeders[min(feeders)] if feeders else None
    if first is not None:  # the makespan over them is the predicted step (`ReplayResult.table`)
        result.config["captured_steps"] = captured_steps(first.metadata, str(first.path))
    if classes is not None:
        expand(result, classes)
    return result


def replay(path: str | Path, backend: Backend, *, comm_group: str | Path | None = None,
           limits: Mapping[str, int] | None = None, record_events: bool = True,
           resolve: Sequence[str] = ("data", "ctrl"), window: int = REPLAY_WINDOW,
           modes: CaptureModes = CaptureModes()) -> ReplayResult:
    """Replay the rank set at `path` (folder, prefix or file) with `backend`; `modes=AS_CAPTURED`
    to reproduce a capture's measured step (see `CaptureModes`)."""
    feeders, groups = open_rankset(path, comm_group, resolve=resolve, window=window)
    return run_replay(path, feeders, backend, groups=groups, modes=modes, limits=limits,
                      record_events=record_events)


class RanksetRefused(ChakraToolsError):
    """The rank set has validation errors and was not replayed: its replay would be silently
    wrong (0-byte collectives, unknown groups) or never finish (collectives waiting for ranks
    that are not there). `report` is the validation (core.validate.ValidationReport), the first
    `SHOWN_PER_CODE` findings of each kind. Exit 1, as trace-validate's when it finds errors."""

    exit_code = 1

    def __init__(self, path: str | Path, report):
        super().__init__(f"{path}: {report.error_count} validation error(s): not replayed")
        self.report = report


#: how many findings of each kind a refused rank set's report keeps
SHOWN_PER_CODE = 10


def replay_rankset(path: str | Path, spec: SystemSpec | None = None, *,
                   comm_group: str | Path | None = None, modes: CaptureModes = CaptureModes(),
                   limits: Mapping[str, int] | None = None, memory_on_comm: bool = True,
                   resolve: Sequence[str] = ("data", "ctrl"), window: int = REPLAY_WINDOW,
                   manifest: str | Path | None = None, validate: bool = True,
                   on_warning: Callable[[Diagnostic], None] | None = None,
                   record_events: bool = True, absent_peers: bool = False,
                   replicas: str = "auto", kernel: str = "auto") -> ReplayResult:
    """What `trace-replay` does, in one call: validate the rank set at `path` (refused with
    `RanksetRefused` on errors; `on_warning` hears, before the replay starts, what it cannot run:
    a group that names ranks not given), replay it on the system `spec` describes (None:
    `SystemSpec()`, one switch of every rank) under `modes` (`CaptureModes.merged_with`),
    `limits` and `memory_on_comm` (see `run_replay`), and compare it with the capture's
    `manifest`, else with the measured windows its rank files carry (`result.fidelity`).
    `replicas` (`REPLICAS`): replay one rank per class of replicas (replicas.py), every rank's row
    still in the result, its events and collectives the representatives'; `result.config["replicas"]`
    says which ran, or why the set was replayed whole. `kernel`: see `Replayer`.
    `--out` and `--timeline` are then `result.write(path)` and `result.timeline().write(path)`.
    """
    if replicas not in REPLICAS:
        raise InputError(f"--replicas {replicas!r}: use " + ", ".join(REPLICAS))
    files = find_rank_files(path)
    groups_file = comm_group_file(files, comm_group)
    read = read_comm_groups(groups_file) if groups_file else None  # once, for validation and replay
    # a large set is validated one file per shape (core/shapes.py), the shapes kept for the classes
    shapes = _refuse_invalid(path, groups_file, on_warning, absent_peers, by_shape=is_large(len(files)),
                             files=files, groups=read) if validate else None
    groups = dict(read or {})
    # with absent peers the network holds the whole job: a group may name ranks above the set's
    npus = max([*files, *(g for grp in groups.values() for g in grp)]) if absent_peers else max(files)
    spec = spec or SystemSpec()
    backend = spec.backend(npus + 1, str(path))
    for note in backend.notes() if on_warning is not None else ():
        on_warning(Diagnostic("warning", "implementation-dims", note, file=backend.system.source))
    links = getattr(backend, "links", None)
    for note in links.notes if links is not None and on_warning is not None else ():
        on_warning(Diagnostic("warning", "link-rates", note, file=links.source))
    if on_warning is not None and spec.network is not None and not absent_peers and not spec.network_is_graph():
        _warn_network_larger(path, set(files), backend, on_warning)
    run = dict(groups=groups, modes=modes, limits=limits, record_events=record_events,
               memory_on_comm=memory_on_comm, absent_peers=absent_peers, kernel=kernel)
    classes, declined = classes_for(path, files, groups, backend, replicas, modelled=modes.modelled and
                                    modes.lanes == "kind", absent_peers=absent_peers, shapes=shapes)
    del shapes  # a shape per rank, not to be walked by every pass of the collector the replay makes
    result = None
    if classes is not None:
        feeders = open_feeders(files, resolve=resolve, window=window, ranks=classes.present)
        try:
            result = run_replay(path, feeders, backend, classes=classes, **run)
        except ClassesRefused as e:
            if replicas == "on":
                raise on_refused(path, str(e)) from e
            declined, backend = str(e), spec.backend(npus + 1, str(path))  # the model starts afresh
    if result is None:
        feeders = open_feeders(files, resolve=resolve, window=window)
        if on_warning is not None:
            _warn_recorded_on_scaled(path, feeders, modes, on_warning)
            _warn_nothing_recorded(feeders, modes, on_warning)
        result = run_replay(path, feeders, backend, **run)
        if declined:
            result.config["replicas"] = {"ranks": len(files), "replayed": "all", "why": declined}
    if result.compare(manifest=manifest, measured=measured_of(feeders)) and spec.links:
        # the measured run had the links as they were: a what-if differs from it by design
        mark_what_if(result.fidelity, ", ".join(c.text for c in spec.links))
    for note in getattr(backend, "unused_scales", list)() if on_warning is not None else ():
        on_warning(Diagnostic("warning", "scale-unused", note, file=str(path)))
    for note in getattr(backend, "extrapolated", list)() if on_warning is not None else ():
        on_warning(Diagnostic("warning", "extrapolated", note, file=str(path)))
    if on_warning is not None and not any(r["nodes"] for r in result.ranks):
        on_warning(Diagnostic("warning", "nothing-to-replay", "no rank file holds a node: the makespan "
                              "is 0 (a device trace with no host op and no device work?)", file=str(path)))
    return result


def _warn_network_larger(path, ranks: set[int], backend, on_warning: Callable[[Diagnostic], None]) -> None:
    """A network file of more NPUs than the set has ranks: ASTRA-sim opens a file for every NPU
    (a missing one is fatal) and runs a collective on every rank (pg_name "" or "0") over all of
    them; here it spans the files given. A set whose files do not record its size (ASTRA-sim's)
    and lost its highest ranks shows only so."""
    net = getattr(backend, "network", None) or getattr(getattr(backend, "base", None), "network", None)
    if net is None or net.npus <= len(ranks):
        return
    missing = sorted(set(range(net.npus)) - ranks)
    shown = ", ".join(map(str, missing[:8])) + (f" ... ({len(missing)} in all)" if len(missing) > 8 else "")
    on_warning(Diagnostic("warning", "network-larger",
                          f"the network has {net.npus} NPUs, the rank set {len(ranks)} files: "
                          + (f"ranks {shown} have none. " if len(missing) > 1 else f"rank {shown} has none. ")
                          + "Collectives on every rank (pg_name \"\" or \"0\") span the files given "
                          "here, where ASTRA-sim would span every NPU and stop on the first missing file; give "
                          f"every rank's file, or a network of {len(ranks)} NPUs", file=str(path)))


def _warn_recorded_on_scaled(path, feeders: dict, modes: CaptureModes,
                             on_warning: Callable[[Diagnostic], None]) -> None:
    """A mode that takes time from the record, on a rank set `trace-convert scale` wrote: the
    record is the old degree's, its waits for the old degree's collectives included (scale takes
    them out of the step nodes only), so such a replay predicts the old job's waiting again."""
    from chakra_tools.core.measured import scaled_from_metadata

    recorded = _recorded_modes(modes)
    first = feeders[min(feeders)] if feeders else None
    info = scaled_from_metadata(first.metadata, str(first.path)) if recorded and first is not None else None
    if info is None:
        return
    was = info["dp"] * info["tp"] * info["pp"]
    on_warning(Diagnostic("warning", "scaled-recorded-time", (
        f"{', '.join(recorded)} take{'s' if len(recorded) == 1 else ''} time from the record, and this rank set "
        f"was scaled from a {was}-rank capture: its recorded gaps and communication are that job's, waits for "
        f"its collectives included, so the replay predicts them again (the defaults, --comm model --host-time "
        f"ops --align start, replay a scaled set: docs/reference/trace-convert.md, scale)"), file=str(path)))


def _recorded_modes(modes: CaptureModes) -> list[str]:
    """The options of `modes` that take time from the capture's record, as the CLI spells them."""
    return [f"{name} {value}" for name, value, default in (
        ("--comm", modes.comm, "model"), ("--host-time", modes.host_time, "ops"), ("--align", modes.align, "start"))
        if value != default]


def _warn_nothing_recorded(feeders: dict, modes: CaptureModes, on_warning: Callable[[Diagnostic], None]) -> None:
    """A mode that takes time from the record, on ranks converted from a host trace alone: they
    carry no time to take (every node 0 ns), so `--as-captured` would print a replay of
    nothing as if it were the capture's."""
    recorded = _recorded_modes(modes)
    bare = sorted(r for r, f in feeders.items()
                  if (a := f.metadata.attrs.get("durations")) is not None and a.value == "missing")
    if recorded and bare:
        first = feeders[bare[0]]
        on_warning(Diagnostic("warning", "nothing-recorded", (
            f"{', '.join(recorded)} take{'s' if len(recorded) == 1 else ''} time from the record, but rank(s) "
            f"{', '.join(map(str, bare[:8]))}{' ...' if len(bare) > 8 else ''} were converted from a host trace alone: "
            "their nodes carry no recorded time (0 ns each), so this is no replay of the capture; convert each "
            "host trace with its device trace (trace-convert pytorch --host H --device D)"), file=str(first.path)))


def _refuse_invalid(path: str | Path, comm_group: str | Path | None,
                    on_warning: Callable[[Diagnostic], None] | None, absent_peers: bool = False,
                    by_shape: bool = False, files: Mapping[int, Path] | None = None,
                    groups: Mapping[str, tuple[int, ...]] | None = None) -> dict | None:
    """Raise `RanksetRefused` if the rank set has validation errors: a rank it names without a
    file among them, unless `absent_peers` (then each partial-group finding, a group naming
    absent ranks the replay takes as arriving, goes to `on_warning`). `by_shape`: see
    `validate_path`; the shapes it read are returned (else None)."""
    from chakra_tools.core.validate import validate_path

    report = validate_path(path, comm_group, examples_per_code=SHOWN_PER_CODE, absent_peers=absent_peers,
                           by_shape=by_shape, files=files, groups=groups)
    for d in report.diagnostics:
        if d.code == "partial-group" and on_warning is not None:
            on_warning(d)
    if report.errors:
        raise RanksetRefused(path, report)
    return report.shapes


#: the replays a calibration is checked with: everything modelled (trace-replay's default), and
#: the host time from the recorded timeline with communication still from the network
CHECK_MODES = {"default": {}, "host-time timeline": {"host_time": "timeline"}}


def check_calibration(path: str | Path, cal: Calibration, manifest: str | Path) -> dict:
    """The capture replayed on the default network, the calibrated one, the per-kind fit
    (`KindPriced`) and the probe's cluster where measured, each mode of CHECK_MODES, against the
    steps the manifest measured: {network: {mode: error}}; the error is the job's where the
    manifest has the ranks' step starts, else the step's."""
    networks = {"default": lambda: AnalyticalBackend(default_network(cal.npus)),
                "calibrated": lambda: cal.fit.backend(cal.npus),
                "per-kind": lambda: cal.kind_priced(cal.npus)}
    if cal.cluster is not None:
        networks["probed cluster"] = lambda: cal.cluster.backend(cal.npus, cal.fit.backend(cal.npus))
    out: dict[str, dict[str, float]] = {}
    for net, backend in networks.items():
        for mode, kw in CHECK_MODES.items():
            doc = replay(path, backend(), modes=CaptureModes(**kw), record_events=False).to_dict(events=False)
            cmp = compare_with_manifest(doc, manifest)
            out.setdefault(net, {})[mode] = (cmp.get("job") or cmp["step"])["error"]
    cal.replay = out
    return out
