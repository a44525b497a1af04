"""What every command shares: error reporting, JSON output, progress. Only the CLI imports typer."""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any, Callable, Iterable, TypeVar

import click
import typer
from typer.exceptions import TyperException

from chakra_tools.core.errors import ChakraToolsError

F = TypeVar("F", bound=Callable[..., Any])


def new_app(help: str | None = None, **kw: Any) -> typer.Typer:
    """A typer app with the settings every command shares: -h, markdown help (docstring lines
    are joined into paragraphs; indented lines stay as examples), no completion install."""
    kw.setdefault("context_settings", {})
    kw["context_settings"].setdefault("help_option_names", ["-h", "--help"])
    return typer.Typer(help=help, add_completion=False, rich_markup_mode="markdown", **kw)


#: the exit code of a bug (EX_SOFTWARE): not a user's mistake, and not one of the documented codes
#: (1 validation errors found, 2 bad input or environment, 3 deadlock / conversion refused, 130 Ctrl-C)
BUG_EXIT = 70
DEBUG_ENV = "CHAKRA_TOOLS_DEBUG"


def handle_errors(fn: F) -> F:
    """Print a ChakraToolsError as one clear line on stderr and exit with its code (2 by default),
    instead of a traceback; an OS error (a missing folder, a full disk, no permission) the same
    way, with exit 2. Anything else is a bug: one line that says so and where, exit 70, the
    traceback only with CHAKRA_TOOLS_DEBUG=1. Ctrl-C exits 130 quietly."""

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
        except (typer.Exit, typer.Abort, TyperException, click.exceptions.ClickException):
            raise  # typer's own: usage errors print as such
        except OSError as e:
            typer.echo(f"error: {os_error_text(e)}", err=True)
            raise typer.Exit(2) from None
        except Exception as e:  # noqa: BLE001 - the last line of defence: never a bare traceback
            if os.environ.get(DEBUG_ENV):
                raise
            typer.echo(f"error: internal error (a bug in chakra-tools, not in your input): {bug_text(e)}; "
                       f"please report it with the command line; {DEBUG_ENV}=1 shows the traceback", err=True)
            raise typer.Exit(BUG_EXIT) from None

    return wrapper  # type: ignore[return-value]


def os_error_text(e: OSError) -> str:
    """`path: reason` of an OS error (both paths of a failed rename)."""
    where = ": ".join(str(p) for p in (e.filename, e.filename2) if p is not None)
    reason = e.strerror or str(e)
    return f"{where}: {reason}" if where else reason


def bug_text(e: BaseException) -> str:
    """`Type: message at file:line`, the innermost frame of our own code."""
    import traceback

    frames = [f for f in traceback.extract_tb(e.__traceback__) if "chakra_tools" in f.filename]
    at = f" at {frames[-1].filename.split('chakra_tools')[-1].lstrip('/')}:{frames[-1].lineno}" if frames else ""
    return f"{type(e).__name__}: {e}{at}"


def print_json(doc: Any) -> None:
    """`doc` on stdout, indented. Encoded in C (msgspec): the standard library's encoder drops to
    Python once asked to indent, 60 ms for a 256-rank replay's document, a fifth of the command."""
    import msgspec

    try:
        text = msgspec.json.format(msgspec.json.encode(doc, enc_hook=str), indent=1).decode()
    except (TypeError, ValueError, OverflowError):  # what msgspec will not take (an int past 64 bits)
        text = json.dumps(doc, indent=1, default=str)
    sys.stdout.write(text + "\n")


def progress(iterable: Iterable, *, total: int | None = None, desc: str = "", enabled: bool = True):
    """A tqdm bar on stderr when it is a terminal (or forced), else the plain iterable."""
    if not enabled or not sys.stderr.isatty():
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="", leave=False, file=sys.stderr)
