"""trace-capture: placeholder until the capture stage lands (see its issue)."""

import typer

app = typer.Typer(help="(not implemented yet)", add_completion=False)


@app.command()
def capture() -> None:
    """Not implemented yet."""
    raise typer.Exit(2)
