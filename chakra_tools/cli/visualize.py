"""trace-visualize: placeholder until the visualize stage lands (see its issue)."""

import typer

app = typer.Typer(help="(not implemented yet)", add_completion=False)


@app.command()
def visualize() -> None:
    """Not implemented yet."""
    raise typer.Exit(2)
