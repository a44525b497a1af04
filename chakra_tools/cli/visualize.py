"""trace-visualize: graphs, timelines, an HTML report and a summary of any trace.

Inputs: a Chakra ET rank set (a .et file, a folder of PREFIX.RANK.et files, or such a prefix), a
replay result (`trace-replay --out result.json`) or a captured run (a `trace-capture` folder, or
Kineto device traces). Stage code is imported inside the commands.
"""

from __future__ import annotations

import re
import webbrowser
from pathlib import Path
from typing import List, Optional

import typer

from .common import handle_errors, new_app, print_json, progress

app = new_app(help="Turn a trace (captured, converted or replayed) into a graph, a timeline or a report.",
              no_args_is_help=True)

INPUT_HELP = ("A .et file, a folder of PREFIX.RANK.et files or such a prefix; a replay result .json; "
              "or a captured run folder (manifest.json or Kineto traces).")


def _bar(enabled: bool, desc: str, total: int | None = None):
    return lambda it: progress(it, total=total, desc=desc, enabled=enabled)


# --------------------------------------------------------------------------------------------
# graph
# --------------------------------------------------------------------------------------------

@app.command()
@handle_errors
def graph(
    path: Path = typer.Argument(..., metavar="INPUT", help="A .et file, a folder of PREFIX.RANK.et files, or such a prefix."),
    out: Path = typer.Option(..., "--out", "-o", help="Output: .graphml (any size), .dot or .svg (small graphs)."),
    fmt: Optional[str] = typer.Option(None, "--format", "-f", help="graphml, dot or svg; default: from --out's suffix."),
    rank: Optional[str] = typer.Option(None, "--rank", "-r", help="Ranks to keep, e.g. 0,2-3."),
    ids: Optional[str] = typer.Option(None, "--ids", help="Node id range FIRST:LAST (inclusive; either end may be open)."),
    step: Optional[str] = typer.Option(None, "--step", help="Training steps to keep, e.g. 3 or 2-4."),
    kind: Optional[List[str]] = typer.Option(None, "--kind", "-k", help="Node kinds: comp, coll, send, recv, mem_load, mem_store, metadata (repeat or comma-separate)."),
    name: Optional[str] = typer.Option(None, "--name", help="Regular expression searched in node names."),
    around: Optional[str] = typer.Option(None, "--around", help="Keep the neighbourhood of one node: NODE or RANK:NODE."),
    radius: int = typer.Option(1, "--radius", help="Dependency hops (either direction) kept around --around."),
    max_nodes: Optional[int] = typer.Option(None, "--max-nodes", help="Largest graph DOT/SVG will draw (default 1000)."),
    comm_group: Optional[Path] = typer.Option(None, "--comm-group", "-g", help="Communicator-group file."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
    show_progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars on stderr."),
) -> None:
    """Write the dependency graph as GraphML, DOT or SVG, optionally filtered.

    GraphML has no size limit; DOT and SVG refuse graphs over --max-nodes and suggest a filter.
    SVG needs Graphviz's `dot` program. Nodes are styled by kind, edges solid for data and
    dashed for control dependencies.

    Examples:

        trace-visualize graph out/trace -o trace.graphml
        trace-visualize graph out/trace --rank 0 --around 812 --radius 2 -o n812.svg
        trace-visualize graph out/trace --rank 1 --kind coll,send,recv -o comm.dot
    """
    from chakra_tools.visualize.drawing import write_graph

    sel = _selection(rank, ids, step, kind, name, around, radius)
    doc = write_graph(path, out, sel, fmt=fmt, comm_group=comm_group, max_nodes=max_nodes,
                      progress=_bar(show_progress, "graphml", None))
    nodes, edges = doc["nodes"], doc["edges"]
    if as_json:
        print_json(doc)
    else:
        typer.echo(f"{out}: {doc['format']}, {nodes} nodes, {edges} edges from {len(doc['ranks'])} rank(s) "
                   f"({sel.describe()})")


def _selection(rank, ids, step, kind, name, around, radius):
    from chakra_tools.visualize.select import Selection, parse_around, parse_ints, parse_kinds, parse_range

    return Selection(
        ranks=parse_ints(rank, "--rank") if rank else None,
        id_range=parse_range(ids) if ids else None,
        steps=parse_ints(step, "--step") if step else None,
        kinds=parse_kinds(kind) if kind else None,
        name=name,
        around=parse_around(around) if around else None,
        radius=radius,
    )


# --------------------------------------------------------------------------------------------
# timeline
# --------------------------------------------------------------------------------------------

TIME = re.compile(r"^\s*([0-9.]+)\s*(ns|us|µs|ms|s)?\s*$")
UNIT_NS = {"ns": 1, "us": 1000, "µs": 1000, "ms": 1_000_000, "s": 1_000_000_000, None: 1000}


def parse_time(text: str) -> int:
    """"1.5ms" -> 1500000 ns; a bare number is µs (the trace format's unit)."""
    from chakra_tools.core.errors import InputError

    m = TIME.match(text)
    if not m:
        raise InputError(f"--window {text!r}: expected a time like 250us, 1.5ms or 2s")
    return round(float(m.group(1)) * UNIT_NS[m.group(2)])


@app.command()
@handle_errors
def timeline(
    path: Path = typer.Argument(..., metavar="INPUT", help=INPUT_HELP),
    out: Path = typer.Option(..., "--out", "-o", help="Chrome/Perfetto trace JSON; .json.gz compresses."),
    gz: bool = typer.Option(False, "--gzip", "-z", help="Compress (also implied by a .gz name)."),
    rank: Optional[str] = typer.Option(None, "--rank", "-r", help="Ranks to draw, e.g. 0-3."),
    window: Optional[str] = typer.Option(None, "--window", help="Only START:END, times from the run's start (250us, 1.5ms, 2s)."),
    max_events: int = typer.Option(500_000, "--max-events", help="Split into numbered parts of at most this many events."),
    flows: str = typer.Option("all", "--flows", help="Dependency arrows: all, cross-rank or none."),
    comm_group: Optional[Path] = typer.Option(None, "--comm-group", "-g", help="Communicator-group file (rank sets)."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
    show_progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars on stderr."),
) -> None:
    """Write a Chrome/Perfetto timeline: one process per rank, lanes for host threads, compute and
    communication, flows for dependencies across lanes and ranks.

    Open the file at https://ui.perfetto.dev or chrome://tracing. Huge traces are split into
    parts of --max-events each (or cut with --window) so a browser can open them.

    Examples:

        trace-visualize timeline out/trace -o trace.json.gz
        trace-visualize timeline result.json -o replay.json --window 0:5ms
        trace-visualize timeline traces/run1 -o measured.json.gz
    """
    from chakra_tools.visualize.select import parse_ints
    from chakra_tools.visualize.sources import load_events
    from chakra_tools.visualize.timeline import write_timeline

    es = load_events(path, comm_group=comm_group).narrow(parse_ints(rank, "--rank") if rank else None, flows)
    span = None
    if window:
        lo, _, hi = window.partition(":")
        span = (parse_time(lo) if lo else 0, parse_time(hi) if hi else 2**62)
    doc = write_timeline(es, out, window_ns=span, max_events=max_events, compress=True if gz else None,
                         progress=_bar(show_progress, "events", len(es.events)))
    files = doc["files"]
    if as_json:
        print_json(doc)
    else:
        where = str(files[0]) if len(files) == 1 else f"{len(files)} parts ({files[0]} ...)"
        typer.echo(f"{where}: {doc['events_written']} events, {doc['flows_written']} flows, "
                   f"{doc['ranks']} rank(s), {doc['lanes']} lanes ({es.label} times)")
        for n in es.notes[:3]:
            typer.echo(f"note: {n}", err=True)


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------

@app.command()
@handle_errors
def report(
    paths: List[Path] = typer.Argument(..., metavar="INPUT...", help=INPUT_HELP + " Give a measured and a simulated one to compare them."),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="The HTML file to write."),
    title: str = typer.Option("Chakra trace report", "--title", help="Page title."),
    rank: Optional[str] = typer.Option(None, "--rank", "-r", help="Ranks to include, e.g. 0-7."),
    comm_group: Optional[Path] = typer.Option(None, "--comm-group", "-g", help="Communicator-group file (rank sets)."),
    fit: Optional[Path] = typer.Option(None, "--fit", help="A calibrated network (trace-convert calibrate's folder or its fit.json): show its fit and replay every rank-set input on it."),
    measured: Optional[Path] = typer.Option(None, "--measured", help="A real run at the target scale (trace-capture folder or its manifest.json): its measured step against each prediction."),
    bandwidth: List[str] = typer.Option([], "--bandwidth", metavar="LEVEL=RATE", help="What-if, with --fit: as trace-replay's --bandwidth (inter-node=x5, inter-node=500Mbit/s)."),
    latency: List[str] = typer.Option([], "--latency", metavar="LEVEL=TIME", help="What-if, with --fit: as trace-replay's --latency."),
    open_it: bool = typer.Option(False, "--open", help="Open the report in the default browser."),
    as_json: bool = typer.Option(False, "--json", help="Print the report's numbers as JSON."),
) -> None:
    """Write one self-contained HTML report (opens with no network): per-rank breakdown, top
    operators, communication volume by kind and group, the critical path, and measured against
    simulated side by side when both are given.

    For a scaled run (trace-convert scale) or any prediction: --fit NET replays each rank-set
    input as trace-replay --network-fit NET does (with --bandwidth/--latency changes) and shows
    the fit; --measured RUN puts the measured step of a real run at that scale beside each
    predicted one. The page then leads with the prediction and its error.

    Examples:

        trace-visualize report out/trace -o report.html --open
        trace-visualize report traces/run1 result.json -o compare.html
        trace-visualize report out/ddp-dp4 --fit out/net --measured traces/ddp4 -o whatif.html
    """
    from chakra_tools.visualize.report import report_data, write_report
    from chakra_tools.visualize.whatif import whatif_data
    from chakra_tools.visualize.sources import load_events
    from chakra_tools.visualize.select import parse_ints

    ranks = parse_ints(rank, "--rank") if rank else None
    sets = [load_events(p, comm_group=comm_group).narrow(ranks) for p in paths]
    from chakra_tools.replay.links import parse_changes

    try:
        links = parse_changes(bandwidth, latency)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--bandwidth/--latency") from None
    if links and fit is None:
        raise typer.BadParameter("a what-if change needs the network it changes: give --fit NET",
                                 param_hint="--bandwidth/--latency")
    whatif = None
    if fit is not None or measured is not None or any(es.label == "scaled" for es in sets):
        whatif = whatif_data(paths, fit=fit, measured=measured, comm_group=comm_group, links=links)
    write_report(sets, out, title=title, whatif=whatif)
    if as_json:
        print_json({"out": str(out), **report_data(sets, whatif)})
    else:
        typer.echo(f"{out}: report of {', '.join(f'{es.label} {es.source}' for es in sets)}")
    if open_it:
        webbrowser.open(out.resolve().as_uri())


# --------------------------------------------------------------------------------------------
# summary
# --------------------------------------------------------------------------------------------

@app.command()
@handle_errors
def summary(
    path: Path = typer.Argument(..., metavar="INPUT", help="A .et file, a folder of PREFIX.RANK.et files, or such a prefix."),
    comm_group: Optional[Path] = typer.Option(None, "--comm-group", "-g", help="Communicator-group file."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Print what is in a trace: nodes by type, collectives and bytes by kind and group,
    send/recv pairs, durations.

    Example:

        trace-visualize summary out/trace --json
    """
    from chakra_tools.core.stats import format_summary, summarize_path

    s = summarize_path(path, comm_group)
    if as_json:
        print_json(s)
    else:
        typer.echo(format_summary(s))
