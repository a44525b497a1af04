"""The shell examples of README.md and docs/**/*.md run from a clone, and the pages' links resolve.

Every fenced ```sh block is an example. A block whose first line is `# illustrative: ...` needs
the reader's own files or several machines and is not run (the comment says what it needs).
Every other block runs, command by command (a line, with its `\\` continuations; comments
dropped), in a temporary folder that holds `examples/` and `traces/examples/` of the repository
(symbolic links; `traces/` itself is a real folder, so captures do not write into the clone),
with `.venv/bin` first on PATH. The blocks of a page run in page order in one folder, so a block
may use what an earlier block of the same page wrote.

Not run, wherever they appear: `make ...` (the demo and the suite themselves) and `python
bench/...` (the benchmarks; docs/validation.md reports what they measured).

A block that captures (`trace-capture`, `torchrun`, the network probe, `accelerate`, `mpirun`),
or that reads what such a block wrote, needs torch and takes seconds to minutes: those blocks run
under the `slow` marker (`make test-all`), each page's blocks in order, the capture-free ones
included. The default run (`make test`) runs every page's capture-free blocks.

A failing command fails the test with the page, the line of the command and its output.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]

ILLUSTRATIVE = re.compile(r"#\s*illustrative:\s*\S")
CAPTURE_PROGRAMS = {"trace-capture", "torchrun", "accelerate", "mpirun", "mpiexec", "srun"}
CAPTURE_MODULES = {"chakra_tools.capture.probe", "torch.distributed.run"}
#: options whose value is a file or folder the command writes
OUTPUT_OPTIONS = {"-o", "--out", "--timeline"}
SHELL_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "<", "&"}
FAST_TIMEOUT_S = 120
SLOW_TIMEOUT_S = 600


@dataclass
class Command:
    line: int  # 1-based line of the page where the command starts
    words: list[str]

    @property
    def text(self) -> str:
        return shlex.join(self.words)

    @property
    def program(self) -> list[str]:
        """The words from the program on (a leading VAR=value dropped)."""
        i = 0
        while i < len(self.words) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", self.words[i]):
            i += 1
        return self.words[i:]

    @property
    def kind(self) -> str:
        """'skip' (make, benchmarks), 'capture' (needs torch and a launch) or 'run'."""
        prog = self.program
        name = Path(prog[0]).name if prog else ""
        if name in ("make", "sudo"):
            return "skip"
        if name.startswith("python") and len(prog) > 1 and prog[1].startswith("bench/"):
            return "skip"
        if name in CAPTURE_PROGRAMS or CAPTURE_MODULES & set(prog):
            return "capture"
        return "run"

    def outputs(self) -> set[str]:
        return {v for o, v in zip(self.words, self.words[1:]) if o in OUTPUT_OPTIONS}


@dataclass
class Block:
    page: Path
    line: int  # line of the opening fence
    commands: list[Command] = field(default_factory=list)
    illustrative: bool = False
    captures: bool = False  # set by page_blocks: captures, or reads what a capturing block wrote

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def parse_commands(lines: list[str], first_line: int, where: str, strict: bool = True) -> list[Command]:
    commands, pending, start = [], "", None
    for i, raw in enumerate(lines):
        if start is None:
            start = first_line + i
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        logical, pending = pending + raw, ""
        try:
            words = shlex.split(logical, comments=True)
        except ValueError as e:
            raise AssertionError(f"{where}: line {start}: cannot split {logical!r}: {e}") from None
        if words:
            ops = SHELL_OPERATORS & set(words)
            assert not (strict and ops), f"{where}: line {start}: shell operator {ops} (one command per line)"
            commands.append(Command(start, words))
        start = None
    assert not pending, f"{where}: the block ends inside a continued line"
    return commands


def page_blocks(page: Path) -> list[Block]:
    """The page's ```sh blocks in order, each marked illustrative and/or capture-dependent."""
    lines = page.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if re.fullmatch(r"\s*```sh\s*", lines[i]):
            j = i + 1
            while j < len(lines) and not re.fullmatch(r"\s*```\s*", lines[j]):
                j += 1
            assert j < len(lines), f"{page.relative_to(REPO)}:{i + 1}: unclosed ```sh block"
            body = lines[i + 1:j]
            block = Block(page, i + 1)
            block.illustrative = bool(body) and bool(ILLUSTRATIVE.match(body[0].strip()))
            block.commands = parse_commands(body, i + 2, block.where, strict=not block.illustrative)
            blocks.append(block)
            i = j
        i += 1
    written: set[str] = set()  # what capturing blocks (and the blocks that read them) wrote
    for b in blocks:
        if b.illustrative:
            continue
        reads = {w for c in b.commands for w in c.words}
        b.captures = any(c.kind == "capture" for c in b.commands) or any(
            w == p or w.startswith(p + "/") for w in reads for p in written)
        if b.captures:
            written |= {o.rstrip("/") for c in b.commands for o in c.outputs()}
    return blocks


def _workdir(tmp_path: Path) -> Path:
    work = tmp_path / "clone"
    (work / "traces").mkdir(parents=True)
    (work / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    (work / "traces" / "examples").symlink_to(REPO / "traces" / "examples", target_is_directory=True)
    return work


def _run_blocks(blocks: list[Block], tmp_path: Path, timeout: int) -> int:
    work = _workdir(tmp_path)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("CHAKRA_TOOLS_DEBUG", None)
    ran = 0
    for b in blocks:
        for c in b.commands:
            if c.kind == "skip":
                continue
            try:
                r = subprocess.run(["bash", "-c", c.text], cwd=work, env=env, capture_output=True,
                                   text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{b.page.relative_to(REPO)}:{c.line}: `{c.text}` ran past {timeout} s")
            if r.returncode != 0:
                pytest.fail(f"{b.page.relative_to(REPO)}:{c.line} (block at line {b.line}): `{c.text}` "
                            f"exited {r.returncode}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}")
            ran += 1
    return ran


def _pages_with(pred) -> list:
    out = []
    for page in PAGES:
        blocks = page_blocks(page)
        if any(pred(b) for b in blocks):
            out.append(pytest.param(page, id=str(page.relative_to(REPO))))
    return out


def _runnable(b: Block) -> bool:
    return not b.illustrative and any(c.kind != "skip" for c in b.commands)


@pytest.mark.parametrize("page", _pages_with(lambda b: _runnable(b) and not b.captures))
def test_capture_free_examples_run(page, tmp_path):
    blocks = [b for b in page_blocks(page) if _runnable(b) and not b.captures]
    assert _run_blocks(blocks, tmp_path, FAST_TIMEOUT_S) > 0


@pytest.mark.slow
@pytest.mark.parametrize("page", _pages_with(lambda b: _runnable(b) and b.captures))
def test_capture_examples_run(page, tmp_path):
    pytest.importorskip("torch")
    blocks = [b for b in page_blocks(page) if _runnable(b)]
    assert _run_blocks(blocks, tmp_path, SLOW_TIMEOUT_S) > 0


def test_examples_stay_inside_the_clone():
    """No runnable example reads a file outside the repository (../shared, a home folder)."""
    bad = []
    for page in PAGES:
        for b in page_blocks(page):
            if b.illustrative:
                continue
            for c in b.commands:
                if c.kind != "skip" and any(w.startswith(("../", "/", "~")) or "/../" in w for w in c.words):
                    bad.append(f"{b.page.relative_to(REPO)}:{c.line}: {c.text}")
    assert not bad, "examples that reach outside the clone:\n" + "\n".join(bad)


def test_illustrative_blocks_say_why():
    """`# illustrative:` is followed by what the block needs; only a block's first line marks it."""
    bad = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        for b in page_blocks(page):
            body_first = lines[b.line] if b.line < len(lines) else ""
            if "illustrative" in body_first and not b.illustrative:
                bad.append(f"{b.where}: {body_first.strip()!r}")
    assert not bad, "\n".join(bad)


# --- links ------------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    found, seen, fenced = set(), {}, False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"#{1,6}\s+(.*)", line)
        if m:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            found.add(slug if n == 0 else f"{slug}-{n}")
            seen[slug] = n + 1
    return found


def test_links_between_pages_resolve():
    bad = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                bad.append(f"{page.relative_to(REPO)}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                bad.append(f"{page.relative_to(REPO)}: {target}: no such heading in {dest.relative_to(REPO)}")
    assert not bad, "\n".join(bad)
