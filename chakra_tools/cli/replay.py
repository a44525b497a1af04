"""trace-replay: placeholder until the replay stage lands (see its issue)."""

import typer

app = typer.Typer(help="(not implemented yet)", add_completion=False)


@app.command()
def replay() -> None:
    """Not implemented yet."""
    raise typer.Exit(2)
