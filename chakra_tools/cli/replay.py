"""trace-replay: how long would this step take on that system? (see chakra_tools.replay)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, NoReturn, Optional

import typer

from .common import handle_errors, new_app, print_json

app = new_app()


@app.command()
@handle_errors
def replay(
    rankset: Path = typer.Argument(..., metavar="RANKSET",
                                   help="A folder of PREFIX.RANK.et files, such a prefix, or one .et file."),
    network: Optional[Path] = typer.Option(None, "--network", "-n",
                                           help="ASTRA-sim analytical network YAML (default: one Switch of all ranks, 50 GB/s, 500 ns), or an InfraGraph document (YAML or JSON): rank r on its r-th NPU, every message routed over its links."),
    network_model: str = typer.Option("congestion-unaware", "--network-model",
                                      help="congestion-unaware (default, as ASTRA-sim's analytical backend): each message as if its links were idle; congestion-aware (as ASTRA-sim's congestion_aware backend): messages routed over the network's links, each link serving them one at a time, so messages that meet queue; on any number of dimensions and on an InfraGraph."),
    system: Optional[Path] = typer.Option(None, "--system", "-s",
                                          help="ASTRA-sim system JSON (collective algorithms, chunks, endpoint delay, roofline)."),
    network_fit: Optional[Path] = typer.Option(None, "--network-fit",
                                               help="A trace-convert calibrate folder (or its fit.json): each collective kind and send/receive the capture showed is priced on its own fitted Ring of the set's ranks, any other on the shared fit (network.yml, which is what ASTRA-sim reads). In place of --network."),
    bandwidth: List[str] = typer.Option([], "--bandwidth", metavar="LEVEL=RATE",
                                        help="What-if: a level's link bandwidth, a factor or a rate (inter-node=x5, inter-node=500Mbit/s, 0=12.5GB/s). LEVEL: a level of the --network-fit cluster (intra-node, inter-node) or a dimension index of the network. Repeatable."),
    latency: List[str] = typer.Option([], "--latency", metavar="LEVEL=TIME",
                                      help="What-if: a level's latency, a factor or a time (inter-node=x0.5, intra-node=2us): on a --network-fit cluster, what a round of no bytes takes there, its fitted floor included. Repeatable."),
    comm_group: Optional[Path] = typer.Option(None, "--comm-group", "-g",
                                              help="comm_group.json; default: the one beside the traces."),
    memory: Optional[Path] = typer.Option(None, "--memory", "-m",
                                          help="ASTRA-sim remote memory JSON (memory-type, remote-mem-bw, ...)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of the table."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Also save the JSON document here."),
    timeline: Optional[Path] = typer.Option(None, "--timeline", help="Write a Chrome/Perfetto trace (.json or .json.gz)."),
    manifest: Optional[Path] = typer.Option(None, "--manifest",
                                            help="A trace-capture manifest.json: print measured vs predicted step time."),
    roofline: Optional[bool] = typer.Option(None, "--roofline/--no-roofline",
                                            help="Compute time from num_ops and tensor_size (default: as the system JSON says)."),
    peak_tflops: Optional[float] = typer.Option(None, "--peak-tflops", help="Peak compute for the roofline (overrides peak-perf)."),
    mem_bw: Optional[float] = typer.Option(None, "--mem-bw-gbps", help="Local memory bandwidth (overrides local-mem-bw)."),
    scale: Optional[str] = typer.Option(None, "--scale", help="What-if multipliers, e.g. compute=0.5,comm=2 (host, compute, comm, memory)."),
    limits: Optional[str] = typer.Option(None, "--limits",
                                         help="Ops in flight per rank and lane (0 = unlimited); default host=1,compute=1,comm=1,recv=0,mem=0 (on a --network-fit cluster of gloo, comm=2 per process group: gloo runs each group's calls on two worker threads of its own, and sends on none)."),
    as_captured: bool = typer.Option(False, "--as-captured",
                                     help="Replay a capture on the system it ran on, to compare with its measured steps: --comm calibrated --host-time timeline --align recorded --lanes stream (each can still be set on its own)."),
    comm: Optional[str] = typer.Option(None, "--comm",
                                       help="model (default): cost communication with the network model; measured: the trace's own durations where recorded (the shortest of a collective's members); calibrated: each member's recorded time after the last one arrived, waiting removed, sends as rendezvous (a capture replayed on the system it ran on)."),
    host_gaps: bool = typer.Option(False, "--host-gaps", help="Short for --host-time gaps."),
    host_time: Optional[str] = typer.Option(None, "--host-time",
                                            help="ops (default): each host op its recorded duration; gaps: and the recorded time between host ops (Python between operators), as Lumos does; timeline: re-timed from the recorded start times (untraced time where it happened, time blocked in communication or on the device removed), for captured runs."),
    align: Optional[str] = typer.Option(None, "--align",
                                        help="start (default): every rank begins at 0; recorded: at its first recorded start time relative to the earliest rank (a capture's skew between ranks)."),
    lanes: Optional[str] = typer.Option(None, "--lanes",
                                        help="kind (default): one host thread, one GPU compute and one comm queue per rank, as ASTRA-sim; stream: a host lane per recorded thread and a device lane per CUDA stream, each with the --limits of its kind (converted GPU traces)."),
    memory_slot: str = typer.Option("comm", "--memory-slot",
                                    help="comm (default, as ASTRA-sim): memory loads and stores take the communication slot, one in flight with collectives under comm's limit; own: a mem lane of their own."),
    collective_start: str = typer.Option("arrival", "--collective-start",
                                         help="arrival (default, as ASTRA-sim): each member of a collective goes through its phases from its own arrival, so an early rank may also finish early; last: every member starts when the last arrives (on the model only; --comm measured/calibrated take the record)."),
    exact_memory: bool = typer.Option(False, "--exact-memory",
                                      help="Take the memory JSON's remote-mem-bw and remote-mem-latency as written; by default they are whole numbers, as ASTRA-sim stores them (12.5 GB/s is 12)."),
    offload: List[int] = typer.Option([], "--offload", help="Reduce in the switch on this dimension (repeatable; Switch dims only)."),
    resolve: str = typer.Option("data,ctrl", "--resolve", help="Which dependencies hold a node back: data,ctrl | data | ctrl."),
    window: int = typer.Option(8192, "--window", help="Nodes each feeder keeps decoded ahead of the replay."),
    validate: bool = typer.Option(True, "--validate/--no-validate",
                                  help="Validate the rank set first and refuse it on errors (exit 1); --no-validate replays it as it is."),
    replicas: str = typer.Option("auto", "--replicas",
                                 help="auto (default): a set of 256 ranks or more whose ranks are replicas of each other (same graph up to renaming ranks, priced alike by the network: a generated or scaled job's data-parallel copies) replays one rank per class, every rank's row still printed, exactly as a full replay; the timeline and collectives are the replayed ranks'. Sets where that is not exact replay whole. on: by classes at any size, or exit 1 saying why not; off: every rank."),
    absent_peers: str = typer.Option("wait", "--absent-peers",
                                     help="wait (default): a rank the set's sends, receives or groups name but no file holds is a validation error (exit 1; with --no-validate the replay waits for it and stops with a deadlock that names it); assume: such ranks arrive with the last rank given (one rank file of a multi-rank job replays on its own; the network still costs the whole group)."),
) -> None:
    """Replay a rank set on a simulated system and print per-rank finish, compute, exposed
    communication, overlap and idle time.

    Example (ASTRA-sim's own 4-NPU all-reduce, 43,000 ns there):

        trace-replay traces/all_reduce --network Ring_4npus.yml --system Ring_4chunks.json

    A capture against its own measured steps:

        trace-replay out/ddp --as-captured --manifest traces/ddp/manifest.json

    Links as queues (two messages on one link take twice as long), on an InfraGraph of the cluster:

        trace-replay out/job --network cluster.infragraph.yaml --network-model congestion-aware

    What-if on the cluster the probe measured, links between machines 5x faster (docs/howto/what-if.md):

        trace-replay out/job --network-fit out/job-net --bandwidth inter-node=x5
    """
    from chakra_tools.replay import (AS_CAPTURED, CaptureModes, RanksetRefused, SystemSpec, parse_limits,
                                     replay_rankset)

    modes = (AS_CAPTURED if as_captured else CaptureModes()).merged_with(
        comm=comm, host_time=host_time or ("gaps" if host_gaps else None), align=align, lanes=lanes,
        coll_start=collective_start)
    spec = SystemSpec(network, system, memory, tuple(offload), peak_tflops, mem_bw, _scales(scale), roofline,
                      exact_memory, kind_fit=network_fit, links=_links(bandwidth, latency),
                      network_model=network_model)
    try:
        result = replay_rankset(rankset, spec, comm_group=comm_group, modes=modes,
                                limits=parse_limits(limits) if limits else None,
                                memory_on_comm=_memory_slot(memory_slot), resolve=_resolve(resolve),
                                window=window, manifest=manifest, validate=validate, on_warning=_warn,
                                absent_peers=_absent_peers(absent_peers), replicas=replicas)
    except RanksetRefused as e:
        _refused(e)
    result.save(out, timeline)
    _print(result, as_json)
    classes = result.config.get("replicas")
    if classes and not as_json:
        typer.echo(f"note: {_replicas_line(classes)}", err=True)
    if modes.comm != "model" and (network is not None or network_fit is not None or bandwidth or latency):
        typer.echo(f"warning: --comm {modes.comm} (--as-captured) takes communication from the capture's record: "
                   "the network given prices only what the record lacks; add --comm model to replay on it",
                   err=True)
    if manifest and modes != AS_CAPTURED and not as_json:
        typer.echo("note: this compares a replay on the simulated system with the capture's own run; "
                   "--as-captured replays it as it ran (docs/reference/trace-replay.md)", err=True)
    elif result.fidelity and modes == CaptureModes() and network_fit is None and not as_json:
        typer.echo("note: these rank files carry their capture's timeline, which the default leaves aside (host "
                   "ops back to back, one lane per kind, as ASTRA-sim runs them): start a what-if from the modelled "
                   "baseline, --as-captured --comm model (the recorded host timeline and streams, communication "
                   "priced on the network given); --as-captured replays the run as it was", err=True)


def _replicas_line(classes: dict) -> str:
    """What `--replicas` did, in one line."""
    if classes["replayed"] == "all":
        return f"replayed all {classes['ranks']:,} ranks, not by replica classes: {classes['why']}"
    shown = ", ".join(f"{r} ({n:,} ranks)" for r, n in list(classes["classes"].items())[:6])
    more = f", ... ({len(classes['classes'])} classes)" if len(classes["classes"]) > 6 else ""
    return (f"replayed {len(classes['replayed']):,} of {classes['ranks']:,} ranks, one per class of replicas "
            f"(every row above is exact; the timeline holds the replayed ranks): {shown}{more}")


def _absent_peers(choice: str) -> bool:
    if choice not in ("wait", "assume"):
        raise typer.BadParameter(f"{choice!r}: use wait or assume", param_hint="--absent-peers")
    return choice == "assume"


def _print(result, as_json: bool) -> None:
    """The table, the comparison and the warnings; or the JSON document."""
    from chakra_tools.core.replaydoc import write_replay_result
    from chakra_tools.replay.fidelity import format_comparison

    if as_json:
        doc = result.to_dict()
        if len(doc.get("events", ())) <= PRETTY_LIMIT:
            print_json(doc)
        else:
            write_replay_result(doc, sys.stdout)
        return
    typer.echo(result.table())
    if result.fidelity:
        typer.echo(format_comparison(result.fidelity))
    for d in result.diagnostics:
        _warn(d)


def _warn(diagnostic) -> None:
    typer.echo(f"warning: {diagnostic}", err=True)


#: a refused rank set's findings printed (trace-validate prints them all)
SHOWN_ERRORS = 10


def _refused(e) -> NoReturn:
    """A rank set validation refused: its first findings, then how to see all or replay anyway."""
    for d in e.report.errors[:SHOWN_ERRORS]:
        typer.echo(f"error: {d}", err=True)
    typer.echo(f"{e} (trace-validate lists them all; --no-validate replays anyway)", err=True)
    raise typer.Exit(1)


#: above this many events the JSON is written compactly (json's indenting encoder is pure Python)
PRETTY_LIMIT = 20_000


def _scales(text: Optional[str]):
    from chakra_tools.replay import Scales

    try:
        return Scales.parse(text)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--scale") from None


def _links(bandwidth: List[str], latency: List[str]):
    from chakra_tools.replay.links import parse_changes

    try:
        return parse_changes(bandwidth, latency)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--bandwidth/--latency") from None


def _memory_slot(text: str) -> bool:
    if text not in ("comm", "own"):
        raise typer.BadParameter("use comm or own", param_hint="--memory-slot")
    return text == "comm"


def _resolve(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    if not kinds or not set(kinds) <= {"data", "ctrl"}:
        raise typer.BadParameter("use data,ctrl | data | ctrl", param_hint="--resolve")
    return kinds
