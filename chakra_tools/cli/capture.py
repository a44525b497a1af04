"""trace-capture: run a training script with host and device tracing on for chosen steps.

    trace-capture [OPTIONS] [--] SCRIPT [ARGS...]
    trace-capture [OPTIONS] -- -m MODULE [ARGS...]
    trace-capture [OPTIONS] -- torchrun --nproc-per-node 2 SCRIPT [ARGS...]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from .common import handle_errors, new_app

app = new_app(context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                "allow_interspersed_args": False})


def _summary(doc: dict, run: Path) -> str:
    steps = doc["captured_steps"]
    what = f"steps {steps}" if steps else "no complete step"
    line = (f"trace-capture: {doc['status']}: captured {what} on {doc['world_size']} "
            f"rank(s) -> {run}")
    if doc.get("error"):
        line += f"\ntrace-capture: {doc['error']}"
    return line + "".join(f"\ntrace-capture: warning: {w}" for w in doc.get("warnings") or [])


@app.command()
@handle_errors
def capture(
    ctx: typer.Context,
    command: List[str] = typer.Argument(None, metavar="[--] SCRIPT [ARGS...]",
                                        help="The script and its arguments, `-m MODULE ...`, or "
                                             "a launcher command line (torchrun ...)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="Run folder; default `traces/SCRIPT-TIMESTAMP`."),
    force: bool = typer.Option(False, "--force", help="Replace an existing run folder."),
    wait: int = typer.Option(1, "--wait", help="Steps to skip before the profiler warms up."),
    warmup: int = typer.Option(1, "--warmup", help="Steps the profiler warms up, not saved."),
    active: int = typer.Option(2, "--active", help="Steps captured."),
    no_profiler: bool = typer.Option(False, "--no-profiler", hidden=True,
                                     help="Benchmarks: hooks and annotations only."),
    annotate: str = typer.Option("auto", "--annotate", hidden=True,
                                 help="Benchmarks: auto | off | always."),
    no_ddp_hook: bool = typer.Option(False, "--no-ddp-hook",
                                     help="Leave DDP's C++ gradient all-reduce alone (it is then "
                                          "not annotated)."),
    annotate_waits: bool = typer.Option(True, "--annotate-waits/--no-annotate-waits",
                                        help="Mark where Work.wait() on an asynchronous call (async_op=True, isend, irecv) returned, so the converter makes the script's next op depend on that call and the replay re-creates the wait (docs/reference/trace-capture.md)."),
) -> None:
    """Run SCRIPT exactly as `python SCRIPT ARGS` would, and capture steps
    `wait+warmup .. wait+warmup+active-1` (0-based; a step ends when an optimizer steps or the
    script calls `chakra_tools.capture.step()`) on every rank: `rank-<r>.host.json.gz` (execution
    trace), `rank-<r>.device.json.gz` (Kineto) and `manifest.json` in the run folder. The exit
    code is the script's (the launcher's for a launcher command), or 2 when it exited 0 but the
    capture is not ok (no step captured, a rank left uncaptured).

    Examples:

        trace-capture train.py --epochs 1

        trace-capture --out traces/ddp -- torchrun --standalone --nproc-per-node 2 train.py

        trace-capture --out traces/job -- torchrun --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr node0 train.py

    (the last on every node, each with its --node-rank: each writes node-<k>/ of the run folder,
    and trace-convert reads them as one job; docs/howto/multi-node.md)
    """
    words = list(command or []) + list(ctx.args)
    if annotate not in ("auto", "off", "always"):
        raise typer.BadParameter("must be auto, off or always", param_hint="--annotate")
    from chakra_tools.capture import launch

    code, doc, run = launch.capture(words, out=out, force=force, wait=wait, warmup=warmup,
                                    active=active, profile=not no_profiler, annotate=annotate,
                                    ddp_hook=not no_ddp_hook, waits=annotate_waits)
    typer.echo(_summary(doc, run), err=True)
    sys.stdout.flush()
    raise typer.Exit(code)
