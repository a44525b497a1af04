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
  (past the time limit), a crash (killed by a signal), a partial or stale output left behind.

The commands' own error handling is kept: the child only wraps the undecorated command
function (inside `handle_errors`) to record an unexpected exception's type and place before the
CLI handles it.
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
from typing import Callable

from .cases import CASE_MAKERS, Case, Seeds, _cli, load_seeds, make_case  # noqa: F401


#: input kinds, in the order cases are dealt to them
KINDS = ("et", "comm_group", "host_et", "kineto", "manifest", "network", "system", "memory", "text", "onnx",
         "result")

#: kinds whose failures are all fixed: the short run in `make test` asserts none fail. A kind
#: joins this list once `bench/fuzz.py --kinds KIND --count 2000` reports no failure for it.
FIXED_KINDS = ("network", "system", "memory", "text", "onnx", "result", "comm_group", "et", "host_et",
               "kineto", "manifest")


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

def classify(case: Case, d: Path, result) -> tuple[str, str | None, str]:
    """(outcome, failure signature or None, the message seen)."""
    stderr = result.stderr if result.stderr_bytes is not None else ""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    rc = result.exit_code
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
    temps = [p for p in d.rglob("*") if re.match(r"\..*\.tmp-\d+$", p.name)]
    if temps:
        return "FAILURE", "temporary file left behind", str(temps[0].relative_to(d))
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


def run_case(kind: str, index: int, seed: int, seeds: Seeds, d: Path) -> dict:
    """Make and run one case here (in the child); the report as a dict."""
    rng = random.Random(f"{seed}-{index}")
    UNEXPECTED.clear()
    try:
        case = make_case(kind, rng, seeds, d)
    except Exception as e:  # a mutator's own bug: report it as such, not as the tool's
        return {"kind": kind, "index": index, "outcome": "harness-error", "signature": repr(e)[:200],
                "what": "", "command": "", "message": traceback.format_exc()[-800:]}
    described = {"what": case.what, "command": f"trace-{case.command} " + " ".join(case.argv)}
    (d.parent / f"{d.name}.pre.json").write_text(json.dumps(described))  # for a hang or a crash
    t0 = time.perf_counter()
    result = _cli(case.command, case.argv)
    outcome, sig, message = classify(case, d, result)
    return {"kind": kind, "index": index, "outcome": outcome, "signature": sig, "what": case.what,
            "command": f"trace-{case.command} " + " ".join(case.argv), "message": message[:300],
            "seconds": round(time.perf_counter() - t0, 3)}


def _child(kind, index, seed, seeds, d: Path) -> None:
    try:
        fd = os.open(d.parent / f"{d.name}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        os.chdir(d.parent)
        d.mkdir()
        _patch_commands()
        rep = run_case(kind, index, seed, seeds, d)
        (d.parent / f"{d.name}.json").write_text(json.dumps(rep))
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
                    _child(kind, i, seed, seeds, d)
                running[pid] = (i, kind, time.monotonic(), d)
            finished = _reap(running, timeout)
            for pid, status in finished:
                i, kind, _, d = running.pop(pid)
                rep = _collect(i, kind, d, status, timeout)
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
    if (d / "in").exists():
        shutil.copytree(d / "in", dest / "in", dirs_exist_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "case.json").write_text(json.dumps(rep, indent=1))
