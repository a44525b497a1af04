"""Replacing a rank set, or a replay's result and timeline, survives SIGKILL at any instant.

A child process writes a new rank set (another job: other ranks, other bytes, a comm-group file)
over an old one and kills itself at its k-th file-system step (every rename, removal, folder
made or removed: the instants at which what a reader sees can change), for every k until a
write runs to its end; then more children are killed after random delays, which land inside
file writes as well. After each kill a reader of ours sees exactly the old set or exactly the
new one, the user's own file in the folder is untouched, and nothing the killed writer left
remains once the reader has opened the folder.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from chakra_tools.core.graph import find_rank_files
from tests.core.test_rankset_write import rankset

#: a child that writes `new` over OUT, killing itself at file-system step K (0: never)
CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from tests.core.test_kill_safe_writes import new_set, save_replay
    out, k, what = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    steps = 0
    def counted(f):
        def run(*a, **kw):
            global steps
            steps += 1
            if steps == k:
                os.kill(os.getpid(), signal.SIGKILL)
            return f(*a, **kw)
        return run
    for name in ("replace", "rename", "unlink", "rmdir", "mkdir"):
        setattr(os, name, counted(getattr(os, name)))
    if what == "rankset":
        new_set().write(out, "trace")
    else:
        save_replay(out, "new")
    print("steps", steps)
""")
ROOT = str(Path(__file__).resolve().parents[2])


def old_set():
    return rankset(8, {"1": list(range(8)), "2": [0, 1]})


def new_set():
    rs = rankset(5, {"7": [0, 1, 2, 3, 4]})
    for g in rs:  # other bytes in every rank, so that no old file passes for a new one
        g.nodes[1] = g.nodes[1].replace(name=f"new{g.rank}", duration_micros=100 + g.rank)
    return rs


def _snapshot(folder: Path) -> dict[str, bytes]:
    """What a reader of ours sees: the set's files (found through find_rank_files, which
    finishes a committed write first) and its comm-group file."""
    files = {p.name: p.read_bytes() for p in find_rank_files(folder / "trace").values()}
    groups = folder / "comm_group.json"
    if groups.exists():
        files[groups.name] = groups.read_bytes()
    return files


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) if folder.exists() else []


def _run_child(out: Path, k: int, what: str, *, delay: float | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", CHILD.format(root=ROOT), str(out), str(k), what]
    if delay is None:
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    out_text, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(argv, proc.returncode, out_text, err)


@pytest.fixture(scope="module")
def expected(tmp_path_factory):
    base = tmp_path_factory.mktemp("expected")
    old_set().write(base / "old", "trace")
    new_set().write(base / "new", "trace")
    return _snapshot(base / "old"), _snapshot(base / "new")


def _fresh(folder: Path) -> Path:
    old_set().write(folder, "trace")
    (folder / "notes.txt").write_text("the user's own file\n")
    return folder


def test_every_kill_instant_leaves_the_old_set_or_the_new_one(tmp_path, expected):
    old, new = expected
    seen = {"old": 0, "new": 0}
    k = 1
    while True:
        out = _fresh(tmp_path / f"k{k}")
        done = _run_child(out, k, "rankset")
        got = _snapshot(out)
        assert got in (old, new), f"kill at step {k}: a mix of the two sets: {sorted(got)}"
        seen["old" if got == old else "new"] += 1
        assert (out / "notes.txt").read_text() == "the user's own file\n"
        assert _leftovers(out) == [], f"kill at step {k}: left {_leftovers(out)}"
        if done.returncode == 0:  # the write ran to its end: every step has been a kill instant
            assert got == new
            break
        assert done.returncode == -signal.SIGKILL, done.stderr
        k += 1
    assert k > 10 and seen["old"] > 1 and seen["new"] > 1, (k, seen)


def test_kills_at_random_instants_never_show_a_mix(tmp_path, expected):
    old, new = expected
    rng = random.Random(20261204)
    t0 = time.perf_counter()
    _run_child(_fresh(tmp_path / "timing"), 0, "rankset")
    whole = time.perf_counter() - t0
    for i in range(12):
        out = _fresh(tmp_path / f"r{i}")
        _run_child(out, 0, "rankset", delay=rng.uniform(0.3, 1.0) * whole)
        got = _snapshot(out)
        assert got in (old, new), f"kill {i}: a mix: {sorted(got)}"
        assert _leftovers(out) == []


def save_replay(folder: Path, tag: str) -> None:
    """A replay's result and timeline written together (what trace-replay --out --timeline does)."""
    from chakra_tools.replay import SystemSpec, replay

    result = replay(folder.parent / f"{folder.name}-set", SystemSpec().backend(2))
    result.save(folder / "result.json", folder / "timeline.json")


def test_a_replay_killed_while_saving_leaves_both_outputs_old_or_both_new(tmp_path):
    from chakra_tools.core.commit import recover

    k = 1
    while True:
        out = tmp_path / f"k{k}"
        out.mkdir()
        rankset(2).write(tmp_path / f"k{k}-set", "trace")
        (out / "result.json").write_text("old result\n")
        (out / "timeline.json").write_text("old timeline\n")
        done = _run_child(out, k, "replay")
        recover(out)  # what every reader of ours does first
        texts = [(out / n).read_text() for n in ("result.json", "timeline.json")]
        olds = [t.startswith("old ") for t in texts]
        assert all(olds) or not any(olds), f"kill at step {k}: one output old, the other new"
        if not any(olds):
            assert '"makespan_ns"' in texts[0] and texts[1].startswith('{"traceEvents"')
        assert _leftovers(out) == [], f"kill at step {k}: left {_leftovers(out)}"
        if done.returncode == 0:
            assert not any(olds)
            break
        k += 1
    assert k > 3
