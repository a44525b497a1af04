"""trace-convert onnx | text | generate: the front ends that are not PyTorch traces."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the front-end subcommands to the trace-convert app (placeholder until they land)."""
