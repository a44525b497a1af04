"""chakra-tools upgrade: legacy (2023, proto2-era) Chakra traces into today's format."""

from __future__ import annotations

from pathlib import Path

import typer

from .common import handle_errors, new_app

app = new_app()


@app.command()
@handle_errors
def upgrade(
    old: Path = typer.Argument(..., metavar="OLD", help="A legacy .et file, or a folder / prefix of them."),
    new: Path = typer.Argument(..., metavar="NEW", help="The file to write, or a folder to write it into (for a rank set, the folder)."),
) -> None:
    """Rewrite a legacy Chakra trace (attributes in field 11, dependencies in `parent`, as
    Chakra's generator wrote until late 2023) in today's schema: every attribute kept under
    today's contract names and kinds, `parent` as ctrl_deps, `runtime` as duration_micros.

    Exit code: 0 written, 2 not a legacy trace, unreadable or damaged (the error names the file,
    the byte offset and the node; nothing is written, and a rank set upgraded there before is
    left whole).

    Example:

        chakra-tools upgrade one_comm_coll_node_allgather.0.et allgather.0.et
    """
    from chakra_tools.core.upgrade import upgrade_set

    for u in upgrade_set(old, new):
        assumed = ", ".join(f"{name} on {n} node(s)" for name, n in sorted(u.assumed.items()))
        typer.echo(f"{u.target}: {u.nodes} node(s) from {u.source}" + (f" (assumed {assumed})" if assumed else ""))
