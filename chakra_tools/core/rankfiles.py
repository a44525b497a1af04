"""A rank set's files: how they are named, and writing them all or nothing.

`write_ranks` takes the ranks one at a time, so a set made rank by rank (a capture scaled to
16,384 ranks: 10.8 GB held whole) is written without holding it; `RankSet.write` is it for a set
in memory.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, Iterable, Mapping

from .commit import atomic_output, staged_in
from .errors import ChakraToolsError, InputError
from .model import MAX_RANK

RANK_FILE = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et(?P<gz>\.gz)?$")


def write_ranks(out_dir: str | Path, prefix: str, ranked: Iterable[tuple[int, object]],
                comm_groups: Mapping[str, Iterable[int]], *, compress: bool = False,
                world_size: int | None = None, before_commit: Callable[[Path], None] | None = None) -> list[Path]:
    """Write `<out_dir>/<prefix>.<rank>.et` for each (rank, graph) of `ranked` (a graph: anything
    with core.graph.Graph's `write`), in the order given, and `comm_group.json` if there are
    groups; `world_size` into every rank's GlobalMetadata (see `RankSet.write`).

    All or nothing: the files are written into a staging folder inside `out_dir` and moved into
    place only once every one is written and `before_commit(stage)` (a check of the staged set,
    which raises to refuse it) has passed, so a failure leaves what was there before untouched
    (and no folder this call created). Then what an earlier set of the same prefix left is
    removed: its other ranks, and a comm_group.json this set does not have when no other rank
    set shares the folder (a reader would take them as this set's)."""
    out = Path(out_dir)
    prefix = check_prefix(prefix)
    stage = None
    try:
        with staged_in(out, prefix) as staged:
            stage = staged.stage
            names = []
            for r, graph in ranked:
                if type(r) is not int or not 0 <= r <= MAX_RANK:
                    raise InputError(f"{out}: rank {r!r} is not a rank (an integer 0..{MAX_RANK}): no file written")
                names.append(f"{prefix}.{r}.et{'.gz' if compress else ''}")
                graph.write(staged.path(names[-1]), compress=compress, world_size=world_size)
            if comm_groups:
                names.append("comm_group.json")
                write_comm_groups(staged.path(names[-1]), comm_groups)
            if before_commit is not None:
                before_commit(stage)
            return staged.commit(names, stale_files(out, prefix, names))
    except ChakraToolsError as e:
        if stage is not None:  # name the file the user asked for, not the stage
            e.message = e.message.replace(str(stage), str(out))
        raise


def stale_files(out: Path, prefix: str, names: list[str]) -> list[str]:
    """What a new set of `prefix` replaces in `out`: the earlier set's other ranks, and a
    comm_group.json it does not have when every rank file in `out` is of `prefix` (a reader
    would take them as the new set's)."""
    keep, others, stale = set(names), False, []
    for p in out.iterdir():
        m = RANK_FILE.match(p.name)
        if m is None:
            continue
        if m.group("prefix") != prefix:
            others = True
        elif p.name not in keep:
            stale.append(p.name)
    if "comm_group.json" not in keep and not others and (out / "comm_group.json").exists():
        stale.append("comm_group.json")
    return stale


#: the longest prefix whose rank files' names fit a file system's 255 bytes
_MAX_PREFIX_BYTES = 255 - len(f".{MAX_RANK}.et.gz")


def check_prefix(prefix, where: str = "prefix") -> str:
    """`prefix` if it is a plain file name, one that `<prefix>.<rank>.et` keeps inside the output
    folder and that the rank-set reader finds again; else an InputError starting with `where`.

    >>> check_prefix("trace")
    'trace'
    >>> check_prefix("../up", "--prefix")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    chakra_tools.core.errors.InputError: --prefix is "../up", not a plain file name: it holds a "/" ...
    """
    if type(prefix) is not str:
        raise InputError(f"{where} is {json.dumps(prefix, default=repr)[:40]}, not a file name (a string)")
    why = None
    bad = next((c for c in prefix if c in "/\\" or not c.isprintable()), None)
    if not prefix:
        why = "it is empty (the files would be hidden, .0.et, and no reader would find them)"
    elif bad is not None:  # a folder, or a control or invisible character (a lone surrogate too)
        why = f"it holds a {json.dumps(bad)}"
    elif prefix.startswith("."):
        why = 'it starts with "." (hidden files, and names of ours in progress, start so)'
    elif len(prefix.encode()) > _MAX_PREFIX_BYTES:
        why = f"it is longer than {_MAX_PREFIX_BYTES} bytes (a file name holds at most 255)"
    if why:
        raise InputError(f"{where} is {json.dumps(prefix)[:80]}, not a plain file name: {why} (rank files "
                         "are named <prefix>.<rank>.et inside the output folder)")
    return prefix


def write_comm_groups(path: str | Path, groups: Mapping[str, Iterable[int]]) -> None:
    ordered = {k: list(groups[k]) for k in sorted(groups, key=lambda k: (len(k), k))}
    with atomic_output(path, "w") as f:
        json.dump(ordered, f, indent=1)
        f.write("\n")
