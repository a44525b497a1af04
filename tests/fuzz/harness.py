"""The fuzz harness: mutated inputs of every kind through the public commands, each case in a
forked child with a time limit, each outcome classified.

A case is (input kind, index): its random generator is seeded with "SEED-INDEX", so any case is
re-run alone with `python bench/fuzz.py --seed SEED --case INDEX`. The parent loads every seed
input and imports every command once, then forks one child per case (at most `jobs` at a time);
the child writes the mutated input under a fresh folder, runs one command there through typer's
CliRunner, and reports what happened. Outcomes:

- ``clean``: exit 0, or exit 1 from a validating command with its findings (a rejected input);
- ``error``: a documented error: exit 1-3, the last line on stderr ``error: ...`` naming the
  input (a path inside the case's folder, or an input file's name), no traceback, nothing half
  written;
- ``FAILURE``: an exception that is not a ChakraToolsError (signature: its type and the
  innermost place in chakra_tools that raised it), a traceback, an error naming no file, a hang
  (past the time limit), a crash (killed by a signal), a partial or stale output left behind, a
  temporary file or staging folder left behind, a file written outside the output folder.

The commands' own error handling is kept: the child only wraps the undecorated command
function (inside `handle_errors`) to record an unexpected exception's type and place before the
CLI handles it. A Python API case (kind `api`) calls the function itself: a ChakraToolsError is
its documented error, anything else a failure.

Each case gets a box, `WORK/caseN/`: its folder `case/` (`in/`, `out/`, and `cwd/`, the child's
working folder, empty) and the sentinel folder `outside/` that hostile absolute paths point into.
Whatever the command creates in the box outside `case/out/` is a write outside the output folder,
and so is anything new beside the boxes in WORK (a path that climbs three levels from `out/`).
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from .cases import CASE_MAKERS, OUTSIDE, Case, Seeds, _cli, load_seeds, make_case  # noqa: F401


#: input kinds, in the order cases are dealt to them
KINDS = ("et", "comm_group", "host_et", "kineto", "manifest", "network", "system", "memory", "text", "onnx",
         "result", "jsondoc", "legacy", "api", "infragraph")

#: kinds whose failures are all fixed: the short run in `make test` asserts none fail. A kind
#: joins this list once `bench/fuzz.py --kinds KIND --count 2000` reports no failure for it.
FIXED_KINDS = ("network", "system", "memory", "text", "onnx", "result", "comm_group", "et", "host_et",
               "kineto", "manifest", "jsondoc", "legacy", "api", "infragraph")


# --------------------------------------------------------------------------------------------
# running a command in this process
# --------------------------------------------------------------------------------------------

#: unexpected exceptions recorded by the wrapped commands of this process
UNEXPECTED: list[tuple[str, str]] = []
_PATCHED = False


def _signature(e: BaseException) -> tuple[str, str]:
    """(exception type, innermost place in chakra_tools: path:line in function)."""
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if "chakra_tools" in f.filename and "/cli/" not in f.filename] or \
        [f for f in frames if "chakra_tools" in f.filename] or frames
    f = ours[-1]
    path = f.filename.split("chakra_tools/", 1)[-1]
    where = f"chakra_tools/{path}:{f.lineno} ({f.name})" if "chakra_tools" in f.filename else \
        f"{Path(f.filename).name}:{f.lineno} ({f.name})"
    inner = frames[-1]
    if inner is not f:
        where += f" <- {Path(inner.filename).name}:{inner.lineno}"
    return type(e).__name__, where


def _patch_commands() -> None:
    """Wrap each command's own function (inside the CLI's error handler) so that an exception the
    CLI would not expect is recorded with its place; the CLI still handles it as it does."""
    global _PATCHED
    if _PATCHED:
        return
    import click
    import typer

    from chakra_tools.cli import common, main
    from chakra_tools.core.errors import ChakraToolsError

    expected = (ChakraToolsError, typer.Exit, click.exceptions.ClickException, click.exceptions.Abort,
                click.exceptions.Exit, KeyboardInterrupt, SystemExit)

    def recording(fn):
        @functools.wraps(fn)
        def wrapper(*a, **kw):
            try:
                return fn(*a, **kw)
            except expected:
                raise
            except BaseException as e:
                UNEXPECTED.append(_signature(e))
                raise
        return wrapper

    for sub in main.SUBAPPS.values():
        for info in sub.registered_commands:
            cb = info.callback
            inner = getattr(cb, "__wrapped__", None)
            if inner is not None:
                info.callback = common.handle_errors(recording(inner))
    _PATCHED = True


# --------------------------------------------------------------------------------------------
# classifying an outcome
# --------------------------------------------------------------------------------------------

def classify(case: Case, d: Path, result, strays: list[str] = ()) -> tuple[str, str | None, str]:
    """(outcome, failure signature or None, the message seen). `strays`: what the command created
    outside its output folder (`_strays`), paths relative to the case's box."""
    stderr = result.stderr if result.stderr_bytes is not None else ""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    rc = result.exit_code
    if strays:
        return "FAILURE", f"write outside the output folder: {strays[0]}", last
    if UNEXPECTED:
        etype, where = UNEXPECTED[0]
        return "FAILURE", f"{etype} at {where}", last
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        etype, where = _signature(exc)
        return "FAILURE", f"{etype} at {where}", last
    if "internal error" in last:
        return "FAILURE", "internal error: " + _pattern(last), last
    if "Traceback (most recent call last)" in stderr + result.stdout:
        return "FAILURE", "traceback printed", last
    temps = _temporaries(d)
    if temps:
        what = next(label for label, pattern in TEMPORARY_KINDS.items() if pattern.match(temps[0].name))
        return "FAILURE", f"temporary file left behind ({what})", str(temps[0].relative_to(d))
    if rc == 0:
        if case.stale is not None and case.stale.exists():
            return "FAILURE", f"stale output kept beside the new one ({case.stale.name})", ""
        return "clean", None, ""
    left = _left_behind(case)
    if left:
        return "FAILURE", f"partial output after exit {rc} ({left})", last
    if rc == 1 and case.validating:
        return "clean", None, last
    if not last.startswith("error:") and not re.search(r"(Invalid value|Error):", stderr):
        return "FAILURE", f"exit {rc} without an error: line", last
    options = [a for a in case.argv if a.startswith("--")]  # a mistake in an option names the option
    if not (str(d) in stderr or any(n and n in stderr for n in case.names)
            or any(f"{o} " in last for o in options)):
        return "FAILURE", "error naming no input: " + _pattern(last), last
    return "error", None, last


#: what the writers stage a file or a rank set in before moving it into place, by the label a
#: failure shows (core/commit.py: `.NAME.chakra-tmp-PID`, `.chakra-writing-PID-XXXX/`, and the
#: journal of a commit; the names of earlier versions too)
TEMPORARY_KINDS = {".writing-*": re.compile(r"\.(chakra-)?writing-"),
                   ".tmp-*": re.compile(r"\..*\.(chakra-)?tmp-\d+"),
                   ".commit-*.json": re.compile(r"\.commit-.*\.json")}
TEMPORARY = re.compile("|".join(p.pattern for p in TEMPORARY_KINDS.values()))


def _temporaries(d: Path) -> list[Path]:
    """Staging files and folders left anywhere in the case's folder, outermost first."""
    return sorted((p for p in d.rglob("*") if TEMPORARY.match(p.name)), key=lambda p: len(p.parts))


def _strays(box: Path, before: set[Path], allowed: Path) -> list[str]:
    """What is in `box` now that was not `before`, outside the `allowed` folder: paths relative
    to the box, outermost first."""
    new = [p for p in box.rglob("*") if p not in before and p != allowed and allowed not in p.parents]
    return [str(p.relative_to(box)) for p in sorted(new, key=lambda p: (len(p.parts), str(p)))]


def _left_behind(case: Case) -> str:
    for p in case.outputs:
        if p.is_file():
            return f"{p.name} written"
        if p.is_dir():
            inside = [q for q in p.iterdir() if q != case.stale]
            if inside:
                return f"{len(inside)} file(s) in {p.name}/"
            if case.stale is None:  # the folder was not there before the command
                return f"empty folder {p.name}/"
    return ""


def _pattern(message: str) -> str:
    """A message with its paths and numbers blanked, to group alike messages."""
    m = re.sub(r"/\S+", "PATH", message)
    m = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", m)
    return re.sub(r"\d+", "N", m)[:60]


# --------------------------------------------------------------------------------------------
# the child
# --------------------------------------------------------------------------------------------

MEMORY_LIMIT = 4 << 30


def run_case(kind: str, index: int, seed: int, seeds: Seeds, box: Path, ordinal: int = 0) -> dict:
    """Make and run one case here (in the child), in the folder `box/case` (the box made, the
    working folder `box/case/cwd`); the report as a dict."""
    rng = random.Random(f"{seed}-{index}")
    UNEXPECTED.clear()
    d = box / "case"
    try:
        case = make_case(kind, rng, seeds, d, ordinal)
    except Exception as e:  # a mutator's own bug: report it as such, not as the tool's
        return {"kind": kind, "index": index, "outcome": "harness-error", "signature": repr(e)[:200],
                "what": "", "command": "", "message": traceback.format_exc()[-800:]}
    described = {"what": case.what, "command": case.line()}
    (box.parent / f"{box.name}.pre.json").write_text(json.dumps(described))  # for a hang or a crash
    before = set(box.rglob("*"))
    t0 = time.perf_counter()
    result = _call(case.call) if case.call else _cli(case.command, case.argv)
    seconds = time.perf_counter() - t0
    outcome, sig, message = classify(case, d, result, _strays(box, before, d / "out"))
    return {"kind": kind, "index": index, "outcome": outcome, "signature": sig, "what": case.what,
            "command": case.line(), "message": message[:300], "seconds": round(seconds, 3)}


def _call(fn: Callable[[], object]) -> SimpleNamespace:
    """Run a Python API call as `classify` sees a command: a ChakraToolsError is a documented
    error (its exit code, `error: MESSAGE` on stderr); anything else an unexpected exception."""
    from chakra_tools.core.errors import ChakraToolsError

    res = SimpleNamespace(exit_code=0, stdout="", stderr="", stderr_bytes=b"", exception=None)
    try:
        fn()
    except ChakraToolsError as e:
        res.exit_code, res.stderr = e.exit_code, f"error: {e}\n"
    except Exception as e:  # noqa: BLE001 - what the harness is here to find
        UNEXPECTED.append(_signature(e))
        res.exit_code, res.exception = 70, e
    return res


def _child(kind, index, seed, seeds, box: Path, ordinal: int) -> None:
    try:
        fd = os.open(box.parent / f"{box.name}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        (box / OUTSIDE).mkdir(parents=True)
        (box / "case" / "cwd").mkdir(parents=True)
        os.chdir(box / "case" / "cwd")
        _patch_commands()
        rep = run_case(kind, index, seed, seeds, box, ordinal)
        (box.parent / f"{box.name}.json").write_text(json.dumps(rep))
    finally:
        os._exit(0)


# --------------------------------------------------------------------------------------------
# the parent
# --------------------------------------------------------------------------------------------

@dataclass
class Report:
    seed: int
    count: int
    seconds: float = 0.0
    by_kind: dict = field(default_factory=lambda: defaultdict(Counter))
    failures: dict = field(default_factory=dict)  # signature -> {"count", "kinds", "example"}

    def add(self, rep: dict) -> None:
        self.by_kind[rep["kind"]][rep["outcome"]] += 1
        sig = rep.get("signature")
        if rep["outcome"] in ("FAILURE", "harness-error"):
            f = self.failures.setdefault(sig, {"count": 0, "kinds": Counter(), "example": rep})
            f["count"] += 1
            f["kinds"][rep["kind"]] += 1

    def failing_kinds(self) -> set[str]:
        return {k for k, c in self.by_kind.items() if c["FAILURE"] or c["harness-error"]}

    def to_dict(self) -> dict:
        return {"seed": self.seed, "count": self.count, "seconds": round(self.seconds, 1),
                "by_kind": {k: dict(v) for k, v in sorted(self.by_kind.items())},
                "failures": [{"signature": s, "count": f["count"], "kinds": dict(f["kinds"]),
                              "example": f["example"]} for s, f in
                             sorted(self.failures.items(), key=lambda kv: -kv[1]["count"])]}

    def text(self) -> str:
        outcomes = ("clean", "error", "FAILURE", "harness-error")
        rows = [f"{'kind':<12}" + "".join(f"{o:>14}" for o in outcomes) + f"{'total':>8}"]
        total = Counter()
        for k in KINDS:
            c = self.by_kind.get(k)
            if not c:
                continue
            total.update(c)
            rows.append(f"{k:<12}" + "".join(f"{c[o]:>14}" for o in outcomes) + f"{sum(c.values()):>8}")
        rows.append(f"{'all':<12}" + "".join(f"{total[o]:>14}" for o in outcomes) + f"{sum(total.values()):>8}")
        out = [f"fuzz: seed {self.seed}, {self.count} cases, {self.seconds:.0f} s", *rows]
        if self.failures:
            out.append(f"\n{len(self.failures)} distinct failure signature(s):")
            for s, f in sorted(self.failures.items(), key=lambda kv: -kv[1]["count"]):
                ex = f["example"]
                kinds = ", ".join(f"{k} {n}" for k, n in f["kinds"].most_common())
                out.append(f"- {s}  [{f['count']}: {kinds}]")
                out.append(f"    case {ex['index']} ({ex['kind']}): {ex['what'][:160]}")
                out.append(f"    {ex['command'][:240]}")
                if ex.get("message"):
                    out.append(f"    -> {ex['message'][:200]}")
        return "\n".join(out)


def run(seed: int, count: int, *, kinds=KINDS, jobs: int | None = None, timeout: float = 20.0,
        quick: bool = False, keep: Path | None = None, start: int = 0, cases: list[int] | None = None,
        progress: Callable[[int, int], None] | None = None) -> Report:
    """Run cases start .. start+count-1 (or the listed `cases`), kinds dealt in turn; a Report.
    `keep`: a folder where the input of the first case of each failure signature is copied.
    The commands are wrapped (`_patch_commands`) in each child only: this process's are left
    as they are."""
    import chakra_tools.cli.main  # noqa: F401  every command and what it imports, before forking
    _preload()
    jobs = jobs or os.cpu_count() or 1
    work = Path(tempfile.mkdtemp(prefix="chakra-fuzz-"))
    try:
        seeds = load_seeds(work, quick=quick)
        indices = cases if cases is not None else list(range(start, start + count))
        report = Report(seed, len(indices))
        t0 = time.perf_counter()
        pending = list(reversed(indices))
        running: dict[int, tuple[int, str, float, Path]] = {}
        done = 0
        while pending or running:
            while pending and len(running) < jobs:
                i = pending.pop()
                kind = kinds[i % len(kinds)]
                d = work / f"case{i}"
                pid = os.fork()
                if pid == 0:
                    _child(kind, i, seed, seeds, d, i // len(kinds))
                running[pid] = (i, kind, time.monotonic(), d)
            finished = _reap(running, timeout)
            for pid, status in finished:
                i, kind, _, d = running.pop(pid)
                rep = _collect(i, kind, d, status, timeout)
                rep = _climbed(work, rep)
                report.add(rep)
                if keep is not None and rep["outcome"] != "clean" and rep["outcome"] != "error" \
                        and report.failures[rep["signature"]]["count"] == 1:
                    _keep(d, keep, rep)
                shutil.rmtree(d, ignore_errors=True)
                for suffix in (".json", ".log", ".pre.json"):
                    (work / f"case{i}{suffix}").unlink(missing_ok=True)
                done += 1
                if progress:
                    progress(done, len(indices))
            if not finished:
                time.sleep(0.005)
        report.seconds = time.perf_counter() - t0
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


#: what WORK holds besides what a case climbs out of its box to write
_WORK_NAMES = re.compile(r"seeds$|case\d+(\.json|\.log|\.pre\.json)?$")


def _climbed(work: Path, rep: dict) -> dict:
    """A case whose command wrote beside the boxes in WORK (removed, so no later case is blamed
    for it) failed. With more than one case at a time the blame lands on the case finished first,
    which the signature's path and a rerun of the case alone settle."""
    stray = sorted(p.name for p in work.iterdir() if not _WORK_NAMES.match(p.name))
    for name in stray:
        path = work / name
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    if not stray:
        return rep
    return {**rep, "outcome": "FAILURE", "signature": f"write outside the output folder: ../{stray[0]}"}


def _preload() -> None:
    """Import what the commands import lazily, once, so that children do not each import it."""
    import chakra_tools.convert.run  # noqa: F401
    import chakra_tools.core.stats  # noqa: F401
    import chakra_tools.core.validate  # noqa: F401
    import chakra_tools.frontends  # noqa: F401
    import chakra_tools.frontends.onnx_model  # noqa: F401
    import chakra_tools.frontends.onnx_workload  # noqa: F401
    import chakra_tools.replay  # noqa: F401
    import chakra_tools.replay.engine  # noqa: F401
    import chakra_tools.visualize.report  # noqa: F401
    import chakra_tools.visualize.sources  # noqa: F401
    import chakra_tools.visualize.timeline  # noqa: F401
    import chakra_tools.visualize.drawing  # noqa: F401
    import onnx  # noqa: F401
    import yaml  # noqa: F401


def _reap(running: dict, timeout: float) -> list[tuple[int, int | str]]:
    out = []
    now = time.monotonic()
    for pid, (_, _, started, _) in list(running.items()):
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            out.append((pid, status))
        elif now - started > timeout:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            out.append((pid, "timeout"))
    return out


def _collect(i: int, kind: str, d: Path, status, timeout: float) -> dict:
    base = {"kind": kind, "index": i, "what": "", "command": "", "message": ""}
    rep_file = d.parent / f"{d.name}.json"
    if status == "timeout":
        return {**base, "outcome": "FAILURE", "signature": f"hang (no result in {timeout:.0f} s)",
                **_describe(d)}
    if rep_file.exists():
        return json.loads(rep_file.read_text())
    log = d.parent / f"{d.name}.log"
    tail = log.read_text(errors="replace")[-300:] if log.exists() else ""
    sig = f"crash (signal {os.WTERMSIG(status)})" if os.WIFSIGNALED(status) else "crash (no report)"
    if "MemoryError" in tail:
        sig = "MemoryError (child died)"
    return {**base, **_describe(d), "outcome": "FAILURE", "signature": sig, "message": tail}


def _describe(d: Path) -> dict:
    pre = d.parent / f"{d.name}.pre.json"
    return json.loads(pre.read_text()) if pre.exists() else {}


def _keep(d: Path, keep: Path, rep: dict) -> None:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", rep["signature"])[:80].strip("-")
    dest = keep / f"{rep['kind']}-{rep['index']}-{slug}"
    if (d / "case" / "in").exists():
        shutil.copytree(d / "case" / "in", dest / "in", dirs_exist_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "case.json").write_text(json.dumps(rep, indent=1))
