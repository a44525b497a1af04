"""The command line: `chakra-tools <command>` and one console script per command.

Each stage keeps its commands in `chakra_tools/cli/<stage>.py` as a typer app; this module only
assembles them. Stage code is imported inside the commands, so `trace-validate --help` never
imports torch.
"""

from __future__ import annotations

import copy
import sys

from . import capture, convert, jsondump, replay, upgrade, validate, visualize
from .common import new_app

HELP = """Chakra execution traces of distributed ML training: capture, convert, replay, visualize.

Pipeline: trace-capture train.py  ->  trace-convert traces/<run>  ->  trace-replay out/trace
--network net.yml  ->  trace-visualize report out/trace.
"""

SUBAPPS = {
    "capture": capture.app,
    "convert": convert.app,
    "replay": replay.app,
    "validate": validate.app,
    "visualize": visualize.app,
    "json": jsondump.app,
    "upgrade": upgrade.app,
}

app = new_app(HELP, no_args_is_help=True)
for _name, _sub in SUBAPPS.items():
    if len(_sub.registered_commands) == 1 and not _sub.registered_groups:
        # A one-command app (trace-validate) is `chakra-tools validate`, not `... validate validate`.
        _info = copy.copy(_sub.registered_commands[0])
        _info.name = _name
        app.registered_commands.append(_info)
    else:
        app.add_typer(_sub, name=_name)


def main() -> None:
    _start("chakra-tools")
    app()


def _start(prog: str) -> None:
    """What every console script does first: `--version` answered, a closed pipe (`| head`)
    ending the command quietly as it ends `cat` (SIGPIPE's default action, exit 141 in the
    shell), and the interpreter's last collection skipped."""
    if sys.argv[1:] == ["--version"] or sys.argv[1:] == ["-V"]:
        print(f"{prog} {version()}")
        raise SystemExit(0)
    import signal

    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    _skip_last_collection()


def version() -> str:
    """The installed chakra-tools' version (pyproject.toml's, via the package metadata)."""
    from importlib.metadata import PackageNotFoundError, version as dist_version

    try:
        return dist_version("chakra-tools")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _skip_last_collection() -> None:
    """When the process ends, the interpreter's last full collection walks every object once
    more: 0.1 s for a graph of 100k nodes, after the command is done. Objects frozen at exit
    are left out of it (the console scripts only; in-process callers keep their collector)."""
    import atexit
    import gc

    atexit.register(gc.freeze)


def _run(name: str) -> None:
    _start(f"trace-{name}")
    sub = SUBAPPS[name]
    argv = sys.argv[1:]
    prepare = getattr(sys.modules[f"{__package__}.{name}"], "prepare_argv", None)
    if prepare:
        argv = prepare(argv)
    sub(args=argv, prog_name=f"trace-{name}")


def capture_main() -> None:
    _run("capture")


def convert_main() -> None:
    _run("convert")


def replay_main() -> None:
    _run("replay")


def validate_main() -> None:
    _run("validate")


def visualize_main() -> None:
    _run("visualize")
