"""The command `trace-capture` runs, read before anything is made: a script, a module or a
launcher (torchrun, mpirun, accelerate...), checked, named, and what it says of the ranks and
nodes it starts. No torch here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from chakra_tools.core.errors import InputError

from . import protocol

PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)*)?(\.exe)?$")
LAUNCHER_MODULES = {"torch.distributed.run", "torch.distributed.launch"}
# Launchers that may be Python scripts themselves: run as given, never as `python FILE`.
LAUNCHERS = {"torchrun", "mpirun", "mpiexec", "srun", "deepspeed", "accelerate", "horovodrun",
             "torchx", "oshrun", "prterun"}


@dataclass
class Command:
    """What runs: `argv` as executed, the capture mode, a name for the run folder."""

    argv: list[str]
    mode: str
    name: str


# --- the command ---------------------------------------------------------------------------


def check_script(path: str, what: str = "script") -> Path:
    """A readable file that compiles as Python, or an InputError that says what is wrong."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such {what}")
    if not p.is_file():
        raise InputError(f"{path}: not a file")
    try:
        source = p.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    if b"\0" in source[:4096]:
        raise InputError(f"{path}: not a Python script (binary file)")
    try:
        compile(source, str(p), "exec", dont_inherit=True)
    except SyntaxError as e:
        raise InputError(f"{path}: not a Python script: line {e.lineno}: {e.msg}") from None
    except ValueError as e:
        raise InputError(f"{path}: not a Python script: {e}") from None
    return p


def check_module(name: str) -> None:
    """`-m NAME`: its top-level package must be importable from here (the child's sys.path[0]
    is the working directory, as for `python -m`). Only the top level is looked up, so nothing
    of the user's is imported."""
    top = name.split(".")[0]
    if not top or not all(part.isidentifier() for part in name.split(".")):
        raise InputError(f"-m {name}: not a module name")
    sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(top) is not None
    finally:
        sys.path.pop(0)
    if not found:
        raise InputError(f"-m {name}: no module named {top!r}")


def _looks_like_python_file(path: str) -> bool:
    p = Path(path)
    if p.suffix in (".py", ".pyw"):
        return True
    try:
        with open(p, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def _direct(words: list[str], python: str) -> Command:
    """`SCRIPT ARGS` or `-m MODULE ARGS`, run by `python`."""
    if words[0] == "-m":
        if len(words) < 2:
            raise InputError("-m needs a module name")
        check_module(words[1])
        return Command([python, "-m", *words[1:]], "direct", words[1].split(".")[-1])
    check_script(words[0])
    return Command([python, *words], "direct", Path(words[0]).stem)


def _launcher(words: list[str]) -> Command:
    """A launcher (torchrun, mpirun, ...) on PATH; its script, if one is named, must be Python."""
    exe = shutil.which(words[0])
    if exe is None and Path(words[0]).name in LAUNCHERS:
        raise InputError(f"{words[0]}: launcher not found on PATH")
    if exe is None:
        raise InputError(f"{words[0]}: no such script, and no launcher of that name on PATH")
    name = Path(words[0]).name
    rest = words[1:]
    if "-m" in rest[:-1]:
        module = rest[rest.index("-m") + 1]
        if module in LAUNCHER_MODULES:
            rest = rest[rest.index("-m") + 2:]
        else:
            name = module.split(".")[-1]
    scripts = [w for w in rest if w.endswith(".py") and not w.startswith("-")]
    if scripts:
        check_script(scripts[0])
        name = Path(scripts[0]).stem
    return Command(words, "launcher", name)


def parse_command(words: list[str], python: str = sys.executable) -> Command:
    """Decide how to run `words` (the arguments after the options).

    >>> parse_command(["-m", "json.tool"]).argv[1:]
    ['-m', 'json.tool']
    """
    if not words:
        raise InputError("no script given: trace-capture [OPTIONS] [--] SCRIPT [ARGS...]")
    first = words[0]
    if first.startswith("-") and first != "-m":
        raise InputError(f"{first}: unknown option (the options come before the script; "
                         "see trace-capture --help)")
    if PYTHON_NAME.match(Path(first).name) and len(words) > 1:
        interpreter = shutil.which(first)
        if interpreter is None:
            raise InputError(f"{first}: no such interpreter on PATH")
        if words[1] == "-m" and len(words) > 2 and words[2] in LAUNCHER_MODULES:
            return _launcher_module(words)
        return _direct(words[1:], interpreter)
    if first == "-m" and len(words) > 1 and words[1] in LAUNCHER_MODULES:
        return _launcher_module([python, *words])
    if Path(first).name in LAUNCHERS:
        return _launcher(words)
    if first == "-m" or first.endswith((".py", ".pyw")):
        return _direct(words, python)
    if Path(first).is_file() and _looks_like_python_file(first):
        return _direct(words, python)
    if Path(first).is_file() and not os.access(first, os.X_OK):
        raise InputError(f"{first}: not a Python script (and not an executable launcher)")
    return _launcher(words)


def _launcher_module(words: list[str]) -> Command:
    """`python -m torch.distributed.run ... SCRIPT`: a launcher written as a module."""
    scripts = [w for w in words[3:] if w.endswith(".py")]
    name = "run"
    if scripts:
        check_script(scripts[0])
        name = Path(scripts[0]).stem
    return Command(words, "launcher", name)


#: the options by which launchers say how many processes to start on this node
PROCESS_COUNT_OPTIONS = {"--nproc-per-node", "--nproc_per_node", "--num_processes",
                         "--num-processes", "-n", "-np", "--np"}


def requested_processes(argv: list[str]) -> int | None:
    """How many processes a launcher command asks for (its options before the script), if it
    says.

    >>> requested_processes(["accelerate", "launch", "--num_processes", "2", "t.py", "-n", "9"])
    2
    >>> requested_processes(["torchrun", "--nproc-per-node=4", "t.py"])
    4
    """
    words = _launcher_words(argv)
    for option, value in zip(words, words[1:]):
        if option in PROCESS_COUNT_OPTIONS and value.isdigit():
            return int(value)
    return None


@dataclass(frozen=True)
class NodeSpec:
    """This node's place in a multi-node launch: its node rank (None where the command does not
    say: the folder is then named after the host) and the launch's node count."""

    rank: int | None
    count: int

    def folder(self) -> str:
        return protocol.node_folder(self.rank) if self.rank is not None else f"node-{socket.gethostname()}"


def _launcher_words(argv: list[str]) -> list[str]:
    """The launcher's own options (before the script), `--opt=value` split in two."""
    words: list[str] = []
    for w in argv[1:]:
        if (w.endswith(".py") and not w.startswith("-")) or w in ("-m", "--module"):
            break
        words.extend(w.split("=", 1) if w.startswith("--") else [w])
    return words


def launcher_nodes(argv: list[str], env=os.environ) -> NodeSpec | None:
    """The node of a multi-node launch (torchrun's `--nnodes N --node-rank I`; `--nnodes MIN:MAX`
    counts MAX), None for a launch on one node.

    >>> launcher_nodes(["torchrun", "--nnodes=2", "--node-rank", "1", "t.py", "--nnodes", "9"])
    NodeSpec(rank=1, count=2)
    >>> launcher_nodes(["torchrun", "--nproc-per-node", "4", "t.py"]) is None
    True
    """
    words = _launcher_words(argv)
    opts = dict(zip(words, words[1:]))
    count_text = opts.get("--nnodes", "1").split(":")[-1]
    count = int(count_text) if count_text.isdigit() else 1
    if count <= 1:
        return None
    rank_text = opts.get("--node-rank", opts.get("--node_rank"))
    rank = int(rank_text) if rank_text and rank_text.isdigit() else protocol.env_int(protocol.NODE_RANK_VARS, None, env)
    return NodeSpec(rank, count)


def least_ranks(cmd: Command) -> int:
    """The ranks a launcher command surely starts: its process count (per node: at least), except
    for accelerate, whose --num_processes may start one plain process (fewer_ranks_warning)."""
    if cmd.mode != "launcher" or Path(cmd.argv[0]).name == "accelerate":
        return 1
    return requested_processes(cmd.argv) or 1


def fewer_ranks_warning(argv: list[str], world_size: int) -> str | None:
    """A launcher that started fewer ranks than its command asked for (accelerate launch --cpu,
    or on a machine without GPUs, runs one plain process): the capture is the run as it was,
    and says that the run was not the one asked for."""
    asked = requested_processes(argv)
    if asked is None or asked <= world_size:
        return None
    text = f"the command asks for {asked} processes, but {world_size} rank(s) ran"
    if Path(argv[0]).name == "accelerate":
        text += (" (accelerate launch runs one plain process with --cpu, or on a machine "
                 "without GPUs, unless given --mpirun_hostfile; `accelerate launch --multi_gpu "
                 "--num_processes N` starts N under torchrun, on CPU too)")
    return text
