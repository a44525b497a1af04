"""chakra-tools json dump|load: a rank set as one valid JSON document, and back."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import handle_errors, new_app

app = new_app("A rank set as one valid JSON document, and back (lossless).", no_args_is_help=True)


@app.command()
@handle_errors
def dump(
    path: Path = typer.Argument(..., metavar="RANKSET", help="A .et file, a folder of traces, or a prefix."),
    out: Path = typer.Option(..., "--out", "-o", help="The JSON file to write."),
    comm_group: Optional[Path] = typer.Option(None, "--comm-group", "-g", help="Communicator-group file to include."),
) -> None:
    """Write every rank of RANKSET into one JSON document.

    Example:

        chakra-tools json dump out/trace -o trace.json
    """
    from chakra_tools.core import jsondump
    from chakra_tools.core.graph import RankSet

    rs = RankSet.load(path, comm_group)
    jsondump.dump(rs, out)
    typer.echo(f"{out}: {len(rs)} rank(s), {sum(len(g) for g in rs)} nodes")


@app.command()
@handle_errors
def load(
    path: Path = typer.Argument(..., metavar="JSON", help="A document written by `json dump`."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for PREFIX.RANK.et and comm_group.json."),
    prefix: Optional[str] = typer.Option(None, "--prefix", help="File prefix; default: the one recorded."),
) -> None:
    """Write the rank set of a JSON document back as .et files (byte-identical to the originals).

    The whole document is checked before anything is written (a key of the wrong type, a rank
    outside 0..2^31-1, a prefix that is no plain file name: exit 2, naming the file and the key),
    so a refused document leaves the output folder as it was.

    Example:

        chakra-tools json load trace.json -o roundtrip/
    """
    from chakra_tools.core import jsondump
    from chakra_tools.core.rankfiles import check_prefix

    if prefix is not None:  # a name from the command line, checked like the one recorded
        check_prefix(prefix, "--prefix")
    rs = jsondump.load(path)
    files = rs.write(out, prefix)
    typer.echo(f"wrote {len(files)} file(s) to {out}")
