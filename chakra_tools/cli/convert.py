"""trace-convert: PyTorch traces (default), ONNX models, ASTRA-sim text workloads, generated
workloads -> Chakra execution traces.

`trace-convert RUN_FOLDER` is short for `trace-convert pytorch RUN_FOLDER`: `prepare_argv` inserts
the subcommand when the first word is not one.
"""

from __future__ import annotations

import typer

from . import frontends

app = typer.Typer(help=__doc__.split("\n\n")[0], no_args_is_help=True, add_completion=False,
                  context_settings={"help_option_names": ["-h", "--help"]})
SUBCOMMANDS = {"pytorch", "onnx", "text", "generate"}


def prepare_argv(argv: list[str]) -> list[str]:
    if argv and argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help"):
        return ["pytorch", *argv]
    return argv


@app.command()
def pytorch() -> None:
    """(placeholder until the converter lands)"""
    raise typer.Exit(2)


frontends.register(app)
