"""What every command shares: error reporting, JSON output, progress. Only the CLI imports typer."""

from __future__ import annotations

import functools
import json
import sys
from typing import Any, Callable, Iterable, TypeVar

import typer

from chakra_tools.core.errors import ChakraToolsError

F = TypeVar("F", bound=Callable[..., Any])


def new_app(help: str | None = None, **kw: Any) -> typer.Typer:
    """A typer app with the settings every command shares: -h, markdown help (docstring lines
    are joined into paragraphs; indented lines stay as examples), no completion install."""
    kw.setdefault("context_settings", {})
    kw["context_settings"].setdefault("help_option_names", ["-h", "--help"])
    return typer.Typer(help=help, add_completion=False, rich_markup_mode="markdown", **kw)


def handle_errors(fn: F) -> F:
    """Print a ChakraToolsError as one clear line on stderr and exit with its code (2 by default),
    instead of a traceback. Ctrl-C exits 130 quietly."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ChakraToolsError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def print_json(doc: Any) -> None:
    json.dump(doc, sys.stdout, indent=1, sort_keys=False, default=str)
    sys.stdout.write("\n")


def progress(iterable: Iterable, *, total: int | None = None, desc: str = "", enabled: bool = True):
    """A tqdm bar on stderr when it is a terminal (or forced), else the plain iterable."""
    if not enabled or not sys.stderr.isatty():
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="", leave=False, file=sys.stderr)
