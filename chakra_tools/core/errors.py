"""Errors and diagnostics shared by every stage.

Two kinds of trouble: an *error* stops the work (a file cannot be read, an input is missing) and is
raised as a `ChakraToolsError`; a *diagnostic* is a finding about a trace that the work can go on
with (a reader assumption, a validation violation) and is returned as data, never logged-and-raised.
Both name the file, the rank and the node so that a user can go straight to the place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


class ChakraToolsError(Exception):
    """Base of every error this package raises on purpose; the CLI prints it without a traceback.

    Context is added as the error climbs (`add_context("while converting rank 3")`), so the message
    reads outermost first: "while converting rank 3: rank-3.host.json: node 12: ...".
    """

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message
        self.context: list[str] = []

    def add_context(self, text: str) -> "ChakraToolsError":
        self.context.insert(0, text)
        return self

    def __str__(self) -> str:
        return ": ".join([*self.context, self.message])


class InputError(ChakraToolsError):
    """The user's input is missing, unreadable or not what the command takes."""


class TraceReadError(ChakraToolsError):
    """A trace file is truncated or corrupt; names the file, the byte offset and the last good node."""

    def __init__(self, path: str | Path, offset: int, reason: str, last_good: str | None = None):
        where = f"{path}: byte {offset}: {reason}"
        after = f" (last good node: {last_good})" if last_good else " (before the first node)"
        super().__init__(where + after)
        self.path, self.offset, self.reason, self.last_good = str(path), offset, reason, last_good


class TraceWriteError(ChakraToolsError):
    """A graph cannot be written in the wire format (e.g. a node that would encode to zero bytes)."""


@dataclass(frozen=True)
class Diagnostic:
    """One finding about a trace, located as precisely as the finding allows.

    >>> str(Diagnostic("error", "dangling-data-dep", "depends on unknown node 4410",
    ...                file="t.3.et", rank=3, node_id=812, node_name="nccl:all_reduce"))
    "t.3.et: rank 3: node 812 ('nccl:all_reduce'): depends on unknown node 4410 [dangling-data-dep]"
    """

    severity: str  # "error" | "warning"
    code: str
    message: str
    file: str | None = None
    rank: int | None = None
    node_id: int | None = None
    node_name: str | None = None
    extra: dict = field(default_factory=dict, compare=False)

    def __str__(self) -> str:
        parts = []
        if self.file:
            parts.append(str(self.file))
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        if self.node_id is not None:
            parts.append(f"node {self.node_id}" + (f" ({self.node_name!r})" if self.node_name else ""))
        return ": ".join([*parts, self.message]) + f" [{self.code}]"

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("severity", "code", "message", "file", "rank", "node_id", "node_name")}
        if self.extra:
            d["extra"] = self.extra
        return {k: v for k, v in d.items() if v is not None}


class Diagnostics:
    """Collects diagnostics with a cap per code, so a million-node file with one systematic quirk
    reports the quirk, its count and a few examples rather than a million lines."""

    def __init__(self, examples_per_code: int = 20):
        self.examples_per_code = examples_per_code
        self.items: list[Diagnostic] = []
        self.counts: dict[str, int] = {}

    def add(self, diagnostic: Diagnostic) -> None:
        n = self.counts.get(diagnostic.code, 0)
        self.counts[diagnostic.code] = n + 1
        if n < self.examples_per_code:
            self.items.append(diagnostic)

    def extend(self, diagnostics) -> None:
        for d in diagnostics:
            self.add(d)

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return sum(self.counts.values())

    def omitted(self) -> dict[str, int]:
        """Codes whose count exceeds the examples kept, with how many were left out."""
        return {c: n - self.examples_per_code for c, n in self.counts.items() if n > self.examples_per_code}
