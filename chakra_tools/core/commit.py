"""Replacing a set of files all or nothing, even when the writer is killed at any instant.

A rank set is many files that readers (ours, ASTRA-sim's, Chakra's) find by name in a folder, so
no single rename can swap it, and renaming the whole folder would take the user's other files
with it. So a set is replaced as a database applies a transaction, with a redo journal:

1. **stage**: every new file is written into a staging folder beside its target
   (`.chakra-writing-<pid>-<random>` inside the output folder); nothing a reader looks at has changed;
2. **commit**: a journal (`.commit-<name>.json`: the moves from the stage, the old files to
   remove) is written to a temporary name and renamed into place. That rename is the instant the
   new set exists: before it the old set is whole, after it the new one is;
3. **apply**: the moves (`os.replace`, each atomic), the removals, the stage, the journal.

A writer killed before step 2 leaves only a staging folder no journal names; killed after it, a
journal. Every reader and writer of ours opens a folder through `recover`, which finishes what a
journal says (a move whose source is gone was done) and removes what a dead process left (its
staging folders and `.<name>.chakra-tmp-<pid>` files), so a reader sees the old set or the new one, never
a mix. A tool that does not know the journal (ASTRA-sim) reading a folder whose writer was killed
mid-apply sees a mix until any command of ours touches the folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from .errors import InputError

STAGE_PREFIX = ".chakra-writing-"
JOURNAL = re.compile(r"^\.commit-(?P<name>.+)\.json$")
#: what a writer of ours leaves while it works: a staging folder or a temporary file (`temp_name`),
#: both named with the writer's process id, and named apart from any other program's
_LEFTOVER = re.compile(r"^(?:\.chakra-writing-(?P<stage>\d+)-.+|\..+\.chakra-tmp-(?P<tmp>\d+))$")


def temp_name(path: str | Path) -> Path:
    """The temporary file a write of `path` goes to before its rename: hidden, beside it, named
    with this process so that `recover` removes it once the process is gone."""
    path = Path(path)
    return path.with_name(f".{path.name}.chakra-tmp-{os.getpid()}")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    except OverflowError:  # a number no process has
        return False
    return True


class Staged:
    """New files for `folder`, written under `path(name)` and put in place by `commit`.

    `name` names the journal (a rank set's prefix): two sets of other prefixes may be written into
    one folder at once. Used as a context manager, an exception before `commit` removes the stage.
    """

    def __init__(self, folder: str | Path, name: str):
        self.folder = Path(folder)
        self.name = name
        recover(self.folder)
        self.stage = Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{os.getpid()}-", dir=self.folder))
        self._outside: list[tuple[Path, Path]] = []  # (temporary file, target) of files elsewhere

    def path(self, name: str) -> Path:
        """Where to write the file that becomes `folder/name`."""
        return self.stage / name

    def beside(self, target: str | Path) -> Path:
        """Where to write a file that becomes `target` in another folder (a replay's timeline
        beside its result): a temporary file in the target's folder, moved by the same commit."""
        target = Path(target)
        tmp = temp_name(target)
        self._outside.append((tmp, target))
        return tmp

    def commit(self, names: Iterable[str], remove: Iterable[str] = ()) -> list[Path]:
        """Put the staged `names` in place and remove `remove` (names in `folder`), as one step
        for our readers; returns the paths written."""
        names = list(names)
        moves = [[str(self.stage.name + "/" + n), n] for n in names]
        moves += [[str(t), str(d)] for t, d in self._outside]
        journal = {"stage": self.stage.name, "moves": moves, "remove": sorted(set(remove) - set(names))}
        path = self.folder / f".commit-{self.name}.json"
        tmp = temp_name(path)
        tmp.write_text(json.dumps(journal))
        os.replace(tmp, path)  # the commit point
        _apply(self.folder, path, journal)
        return [self.folder / n for n in names] + [d for _, d in self._outside]

    def abort(self) -> None:
        shutil.rmtree(self.stage, ignore_errors=True)
        for tmp, _ in self._outside:
            tmp.unlink(missing_ok=True)

    def __enter__(self) -> "Staged":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


@contextmanager
def staged_in(folder: str | Path, name: str) -> Iterator[Staged]:
    """A `Staged` for `folder`, made first with its parents; a failure removes the folders this
    made again (empty), so a refused write leaves no trace of itself."""
    folder = Path(folder)
    created = [d for d in (folder, *folder.parents) if not d.exists()]  # deepest first
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{folder}: cannot make the folder: {e.strerror}") from None
    try:
        with Staged(folder, name) as staged:
            yield staged
    except BaseException:
        for d in created:
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        raise


def _apply(folder: Path, path: Path, journal: dict) -> None:
    """Carry out a journal; safe to run again, and by another process at the same time."""
    for src, dst in journal["moves"]:
        try:
            os.replace(folder / src, folder / dst)
        except FileNotFoundError:  # moved already (by the writer, or a reader that helped)
            pass
    for name in journal["remove"]:
        (folder / name).unlink(missing_ok=True)
    shutil.rmtree(folder / journal["stage"], ignore_errors=True)
    path.unlink(missing_ok=True)


def _journal(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
        moves, remove, stage = doc["moves"], doc["remove"], doc["stage"]
        ok = (isinstance(stage, str) and stage.startswith(STAGE_PREFIX) and "/" not in stage
              and all(isinstance(m, list) and len(m) == 2 and all(isinstance(p, str) for p in m) for m in moves)
              and all(isinstance(n, str) and "/" not in n for n in remove))
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise InputError(f"{path}: not a journal of an interrupted write (chakra-tools' .commit-*.json); "
                         "remove it if nothing of ours wrote it")
    return doc


def recover(folder: str | Path) -> None:
    """Finish the writes a killed process committed in `folder` and remove what dead writers left
    (their staging folders, their temporary files). Every command of ours that reads or writes a
    rank set or a replay result calls it on the folder first."""
    folder = Path(folder)
    try:
        entries = [e.name for e in os.scandir(folder) if e.name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as e:
        raise InputError(f"{folder}: cannot read: {e.strerror}") from None
    try:
        for name in sorted(entries):
            if JOURNAL.match(name):
                path = folder / name
                _apply(folder, path, _journal(path))
        for name in entries:
            m = _LEFTOVER.match(name)
            if m and not _alive(int(m.group("stage") or m.group("tmp"))):
                leftover = folder / name
                if leftover.is_dir():
                    shutil.rmtree(leftover, ignore_errors=True)
                else:
                    leftover.unlink(missing_ok=True)
    except PermissionError as e:
        raise InputError(f"{folder}: a write a killed process left unfinished here needs write access "
                         f"to complete ({e.filename}: {e.strerror})") from None


def committing(folder: str | Path) -> bool:
    """Whether a journal is in `folder` (a write in progress, or one a killed writer left)."""
    try:
        return any(JOURNAL.match(e.name) for e in os.scandir(folder) if e.name.startswith(".commit-"))
    except OSError:
        return False


@contextmanager
def atomic_output(path: str | Path, mode: str = "wb"):
    """Write to a temporary file beside `path` and rename it into place only on success,
    so a failure never leaves a partial file nor clobbers an existing one."""
    path = Path(path)
    tmp = temp_name(path)
    try:
        f = open(tmp, mode)
    except OSError as e:  # named by the path the user gave, not the hidden temporary one
        why = "no such folder" if isinstance(e, FileNotFoundError) else e.strerror
        raise InputError(f"{path}: cannot write: {why}" + (f" ({path.parent})" if isinstance(e, FileNotFoundError)
                                                            else "")) from None
    try:
        with f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
