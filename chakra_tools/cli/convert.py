"""trace-convert: PyTorch traces (default), ONNX models, ASTRA-sim text workloads, generated
workloads -> Chakra execution traces.

`trace-convert RUN_FOLDER` is short for `trace-convert pytorch RUN_FOLDER`: `prepare_argv` inserts
the subcommand when the first word is not one.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from . import frontends
from .common import handle_errors, new_app, print_json

USAGE = """\
**trace-convert RUN_FOLDER -o OUT** converts a trace-capture run (short for `trace-convert pytorch
RUN_FOLDER`); the commands below convert other inputs or work on converted traces.

    trace-convert traces/ddp -o out/ddp
    trace-convert pytorch --host rank0.et.json --device rank0.kineto.json -o out/gpu
    trace-convert calibrate out/ddp --probe traces/probe -o out/ddp-net
    trace-convert scale out/ddp --dp 8 -o out/ddp-dp8
    trace-convert generate --config examples/workloads/gpt_8rank.yml -o out/gpt8
"""
app = new_app(help=__doc__.split("\n\n")[0] + "\n\n" + USAGE, no_args_is_help=True)
SUBCOMMANDS = {"pytorch", "onnx", "text", "generate", "calibrate", "scale"}


def prepare_argv(argv: list[str]) -> list[str]:
    if argv and argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help"):
        return ["pytorch", *argv]
    return argv


@app.command()
@handle_errors
def pytorch(
    run: Optional[List[Path]] = typer.Argument(None, metavar="[RUN_FOLDER...]",
                                               help="A trace-capture run folder (found through its manifest.json); for a multi-node launch, the run folder the nodes shared, or each node's folder."),
    host: List[Path] = typer.Option([], "--host", help="A host execution trace (.json or .json.gz); once per rank."),
    device: List[Path] = typer.Option([], "--device", help="Its Kineto device trace; once per rank, in the same order."),
    rank: List[int] = typer.Option([], "--rank", help="The global rank of each --host/--device pair (default: the rank each device trace records in its distributedInfo when they all do, each a different one; else 0, 1, ...)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="Output folder; default RUN_FOLDER/chakra, or ./chakra."),
    prefix: str = typer.Option("trace", "--prefix", help="Files are OUT/PREFIX.RANK.et."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Ranks converted at once (default: CPU count)."),
    executor: str = typer.Option("auto", "--executor", help="auto, serial, process or dask."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="Dask scheduler address (with --executor dask)."),
    check: bool = typer.Option(True, "--check/--no-check", help="Validate the rank set before writing."),
    force: bool = typer.Option(False, "--force", help="Write even if validation finds errors (they are still listed)."),
    metadata_nodes: bool = typer.Option(False, "--metadata-nodes",
                                        help="Write process-group setup as a METADATA node, as older tools did (ASTRA-sim 2.0 aborts on it; default: a plain COMP node)."),
    target: Optional[str] = typer.Option(None, "--for", metavar="CONSUMER",
                                         help="What the output is for. By default collectives ASTRA-sim 2.0 cannot simulate (barrier, reduce, gather, scatter) are written as the nearest kind it runs, the recorded kind kept in recorded_comm_type, so ASTRA-sim runs the output unchanged. astra-sim: that, and validate for it too (its findings stop the conversion, as trace-validate --for astra-sim); exact: keep every recorded kind."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON report instead of text."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar, no summary."),
) -> None:
    """Convert PyTorch host (+ device) traces into Chakra execution traces for simulators.

    Writes OUT/PREFIX.RANK.et for every rank and OUT/comm_group.json, ready for ASTRA-sim and
    trace-replay. Validation runs on the whole rank set first; mismatched collective sequences or
    unmatched sends stop the conversion (exit 3) unless --force.

    Examples:

        trace-convert traces/train-20260101-120000

        trace-convert traces/job -o out/job          # a multi-node run: node-0/, node-1/, ...

        trace-convert --host rank0.et.json --device rank0.kineto.json --rank 0 -o out
    """
    from chakra_tools.convert.run import consumer_options, convert, default_out, inputs_from_files, inputs_from_run
    from chakra_tools.core.errors import InputError

    try:
        consumer = consumer_options(target)
    except InputError as e:
        raise typer.BadParameter(str(e), param_hint="--for") from None
    run = list(run or []) or None
    if run is not None and (host or device):
        raise InputError("give a RUN_FOLDER or --host/--device traces, not both")
    if run is None and not (host or device):
        raise InputError("nothing to convert: give a RUN_FOLDER or --host H [--device D] ...")
    inputs = (inputs_from_run(run) if run is not None
              else inputs_from_files([str(p) for p in host], [str(p) for p in device], list(rank)))
    if run is not None and len(run) > 1 and out is None:
        raise InputError("several run folders (one per node) make one job: name its output folder with -o")
    out_dir = out or default_out(run[0] if run else None)
    bar = _bar(len(inputs.ranks), enabled=not quiet and not as_json)
    try:
        report = convert(inputs, out_dir, prefix=prefix, jobs=jobs, executor=executor,
                         scheduler=scheduler, check=check, force=force, metadata_nodes=metadata_nodes,
                         **consumer, on_rank_done=lambda r: bar.update(1) if bar else None)
    finally:
        if bar:
            bar.close()
    if as_json:
        print_json(report.to_dict())
    elif not quiet:
        _print_report(report, out_dir)


def _bar(total: int, enabled: bool):
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="converting ranks", unit="rank", leave=False, file=sys.stderr)


def _print_report(report, out_dir: Path) -> None:
    nodes = sum(s["nodes"] for s in report.stats.values())
    typer.echo(f"trace-convert: {len(report.stats)} rank(s), {nodes} nodes -> {out_dir}")
    for d in report.diagnostics:
        typer.echo(f"  {d.severity}: {d}", err=True)
    for code, n in report.diagnostics.omitted().items():
        typer.echo(f"  ... {n} more [{code}]", err=True)


@app.command(short_help="Fit the network a capture ran on: from a probe's sweep (--probe), or from its own "
                        "collectives.")
@handle_errors
def calibrate(
    rankset: Path = typer.Argument(..., metavar="RUN-et", help="A converted capture (folder, prefix or file)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for network.yml, system.json and fit.json (created)."),
    manifest: Optional[Path] = typer.Option(None, "--manifest",
                                            help="The capture's manifest.json: also replay it on the default and the fitted network and print the error against its measured steps."),
    npus: Optional[int] = typer.Option(None, "--npus", min=1,
                                       help="NPUs of the network written (default: the capture's ranks); give the rank count of a scaled set to replay it."),
    comm_group: Optional[Path] = typer.Option(None, "--comm-group", help="comm_group.json, if not beside the rank files."),
    probe: Optional[Path] = typer.Option(None, "--probe",
                                         help="The probe's folder or probe.json (torchrun ... -m chakra_tools.capture.probe --out PROBE, under the job's own launcher): latency and bandwidth within and between machines, measured over a sweep of sizes; the fit then has the cluster's hierarchy and prices each collective with its library's algorithm, and the capture's own step, replayed on it, says how much of a shared uplink's rate calls in flight together get (docs/howto/what-if.md)."),
    as_json: bool = typer.Option(False, "--json", help="Print the fit report as JSON."),
) -> None:
    """Fit an ASTRA-sim network to the capture's own collectives and send/receive.

    Latency, bandwidth and the reduction's memory bandwidth are fitted to
    every timed collective and send/receive, waits taken out as --comm calibrated takes them
    out; OUT/network.yml and OUT/system.json are ordinary ASTRA-sim files (edit them freely),
    OUT/fit.json the residuals per kind and size and a per-kind fit (one latency per collective
    kind and for send/receive, the byte costs shared), which trace-replay --network-fit OUT
    prices communication with (ASTRA-sim has one network for every kind: it reads the shared
    fit). Docs: docs/reference/trace-convert.md, calibrate.

    Example:

        trace-convert calibrate out/ddp -o out/ddp-net --manifest traces/ddp/manifest.json

        trace-replay out/ddp --network out/ddp-net/network.yml --system out/ddp-net/system.json

        trace-replay out/ddp --network-fit out/ddp-net
    """
    from chakra_tools.replay.api import check_calibration
    from chakra_tools.replay.calfile import format_calibration, write_calibration
    from chakra_tools.replay.clusterfit import ONE_SIZE_WARNING
    from chakra_tools.replay.netfit import calibrate as fit
    from chakra_tools.replay.sharefit import fit_sharing

    cal = fit(rankset, npus=npus, comm_group=comm_group, probe=probe)
    cal, _ = fit_sharing(rankset, cal, comm_group=comm_group,
                         progress=None if as_json else lambda m: typer.echo(f"calibrate: {m}", err=True))
    if cal.one_size and cal.cluster is None and as_json:
        typer.echo(ONE_SIZE_WARNING, err=True)
    if manifest is not None:
        check_calibration(rankset, cal, manifest)
    out.mkdir(parents=True, exist_ok=True)
    write_calibration(cal, out)
    if as_json:
        print_json(cal.to_dict())
    else:
        typer.echo(format_calibration(cal))
        typer.echo("wrote " + ", ".join(cal.files.values()))


@app.command(short_help="Rewrite a converted capture to another data-parallel degree (--dp N).")
@handle_errors
def scale(
    rankset: Path = typer.Argument(..., metavar="RUN-et", help="A converted capture (folder, prefix or file)."),
    dp: int = typer.Option(..., "--dp", help="The data-parallel degree to rewrite it to (ranks = tp x pp x dp)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder for PREFIX.RANK.et + comm_group.json."),
    batch: str = typer.Option("per-rank", "--batch",
                              help="per-rank: each rank's batch stays (compute unchanged); global: the job's batch stays (compute scales by old/new degree)."),
    tp: Optional[int] = typer.Option(None, "--tp", help="The captured tensor-parallel degree, where the graph leaves a choice (a 2-rank job whose collectives are on the world is taken as data parallel). Kept as it is."),
    pp: Optional[int] = typer.Option(None, "--pp", help="The captured pipeline degree, where the graph leaves a choice. Kept as it is."),
    all_to_all: str = typer.Option("refuse", "--all-to-all",
                                   help="An all-to-all on a group that grows or shrinks with the degree: refuse (default: what it would carry is not in the trace), or per-rank: each rank keeps its buffer, re-split in equal shares over the new group (experts spread over the data-parallel group, each rank's tokens the same; unequal shares are refused)."),
    comm_group: Optional[Path] = typer.Option(None, "--comm-group", help="comm_group.json, if not beside the rank files."),
    as_json: bool = typer.Option(False, "--json", help="Print what was done as JSON."),
) -> None:
    """Rewrite a converted capture to another data-parallel degree. The job's tensor x data x
    pipeline layout is read off its process groups and send/receive peers (Megatron-LM's rank
    order: tensor-parallel ranks innermost, then data, then stages); its replicas are copied or
    dropped, the data-parallel groups, the world and comm_group.json rewritten, send/receive
    peers moved to their replica, all-gather shares (ZeRO/FSDP) resized, the gradient all-reduce
    kept, the old degree's collective waits out of the host ops (the converter's, or taken out of
    the step nodes, ProfilerStep#N, for a set converted before it did). The
    tensor-parallel and pipeline degrees are kept: changing them re-splits layers, which the
    trace does not show. What no layout explains (another rank order, expert parallelism,
    all-to-all on a group that grows, unless --all-to-all per-rank says each rank keeps its
    buffer) is refused with the node named, and so is growing a job
    whose replicas exchange nothing the trace shows (no data-parallel collective, not even on
    a group of one as DDP makes at one rank). A collective whose group at the new degree is its
    rank alone is left out (ASTRA-sim never completes one). The output is validated before it is
    written.

    Examples (then replay it on a network calibrated from the capture):

        trace-convert scale out/ddp --dp 4 -o out/ddp-dp4

        trace-convert scale out/tp2x2 --dp 1 -o out/tp2   # a tp 2 x dp 2 capture: tp 2 kept, 2 ranks

        trace-convert scale out/moe --dp 8 --all-to-all per-rank -o out/moe-8   # experts over the dp group

        trace-convert calibrate out/ddp --npus 4 -o out/net

        trace-replay out/ddp-dp4 --network out/net/network.yml --system out/net/system.json
    """
    from chakra_tools.convert.scale import scale as rescale

    report = rescale(rankset, dp, out, batch=batch, comm_group=comm_group, tp=tp, pp=pp, all_to_all=all_to_all)
    if as_json:
        print_json({"out": str(out), **report.to_dict()})
        return
    resized = ", ".join(f"{n} {k}" for k, n in sorted(report.resized.items())) or "none"
    kept = "".join(f", {k} {v} kept" for k, v in (("tp", report.tp), ("pp", report.pp)) if v > 1)
    typer.echo(f"trace-convert scale: dp {report.old_dp} -> {report.new_dp}{kept}: {report.old_ranks} -> "
               f"{report.new_ranks} ranks ({report.batch} batch); nodes resized: {resized} -> {out}")
    waits = ", ".join(f"rank {r} {ns / 1e6:.3f} ms" for r, ns in sorted(report.waits_ns.items()) if ns)
    if waits:
        typer.echo(f"the old degree's collective waits, out of the host ops: {waits}")
    for t, p in report.alternatives:
        typer.echo(f"note: the graph fits tp={t} pp={p} as well (it cannot tell those groups apart); taken as "
                   f"tp={report.tp} pp={report.pp}: give --tp/--pp to say otherwise", err=True)
    lone = sum(report.lone_dropped.values())
    if lone:
        typer.echo(f"note: {lone} collectives left out on {len(report.lone_dropped)} ranks: their group at dp "
                   f"{report.new_dp} is one rank (they move nothing, and ASTRA-sim never completes one); what "
                   "waited for them waits for what they waited for", err=True)
    for pg in report.dropped_groups:
        typer.echo(f"note: process group {pg} had no collective and was dropped", err=True)


frontends.register(app)
