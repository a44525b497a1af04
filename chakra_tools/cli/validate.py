"""trace-validate: list every violation in a trace or rank set (exit 1 if any error)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .common import handle_errors, new_app, print_json

app = new_app()


@app.command()
@handle_errors
def validate(
    paths: List[Path] = typer.Argument(..., metavar="PATH", help="A .et file, a folder of PREFIX.RANK.et files, or such a prefix."),
    comm_group: Optional[Path] = typer.Option(None, "--comm-group", "-g",
                                              help="Communicator-group file; default: comm_group.json beside the traces."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of text."),
    stats: bool = typer.Option(False, "--stats", help="Also print a summary: node counts, collectives, bytes, durations."),
    show: int = typer.Option(50, "--show", help="How many findings of each kind to list (all are counted)."),
    target: Optional[str] = typer.Option(None, "--for", metavar="CONSUMER",
                                         help="Also what this consumer rejects or mis-runs: astra-sim (METADATA nodes, collective kinds it cannot simulate, pg_name without comm_group.json, dependencies on later nodes...; docs/reference/trace-validate.md)."),
    absent_peers: str = typer.Option("error", "--absent-peers", metavar="error|assume",
                                     help="error (default): the files are the whole job, and a rank they name (a send's destination, a receive's source, a group member, a gap in the file numbers) without a file is an error; assume: they are one part of a larger job (one rank file of many), and such ranks are warnings, as trace-replay --absent-peers assume replays them."),
) -> None:
    """Check traces for everything a simulator needs, within and across ranks.

    Within a rank: duplicate ids, dependencies on absent nodes, cycles, attributes of the wrong
    protobuf kind, communication nodes missing comm_type/comm_size/comm_src/comm_dst/comm_tag,
    pg_name not an integer or not in comm_group.json, a collective whose recorded group size is not
    its group's. Across ranks: every process group issues the same collectives in the same order,
    every send has a matching receive, and every rank the files name has a file (with
    --absent-peers assume: a warning).

    Exit code: 0 clean (warnings allowed), 1 errors found, 2 input unreadable.

    Examples:

        trace-validate out/trace --comm-group out/comm_group.json --stats

        trace-validate out/ddp --for astra-sim
    """
    from chakra_tools.core.consumers import rules_for
    from chakra_tools.core.stats import format_summary, summarize_path
    from chakra_tools.core.validate import validate_path

    try:
        rules_for(target)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--for") from None
    if absent_peers not in ("error", "assume"):
        raise typer.BadParameter(f"{absent_peers!r}: use error or assume", param_hint="--absent-peers")
    reports = [validate_path(p, comm_group, examples_per_code=show, target=target,
                             absent_peers=absent_peers == "assume") for p in paths]
    summaries = [summarize_path(p, comm_group) for p in paths] if stats else []
    if as_json:
        docs = [r.to_dict(summaries[i] if stats else None) for i, r in enumerate(reports)]
        print_json(docs[0] if len(docs) == 1 else docs)
    else:
        for i, (p, r) in enumerate(zip(paths, reports)):
            _print_report(p, r)
            if stats:
                typer.echo(format_summary(summaries[i]))
    if any(r.error_count for r in reports):
        raise typer.Exit(1)


def _print_report(path: Path, report) -> None:
    for d in report.diagnostics:
        typer.echo(f"{d.severity}: {d}")
    for code, n in sorted(report.diagnostics.omitted().items()):
        typer.echo(f"... and {n} more [{code}]")
    errors = report.error_count
    warnings = len(report.diagnostics) - errors
    verdict = "OK" if not errors else "FAILED"
    unrecorded = report.world_size is None and "bad-world-size" not in report.diagnostics.counts
    size = " (the files do not record the job's size)" if unrecorded else ""
    typer.echo(f"{path}: {len(report.ranks)} rank(s){size}, {report.nodes} nodes: "
               f"{errors} error(s), {warnings} warning(s) — {verdict}")
