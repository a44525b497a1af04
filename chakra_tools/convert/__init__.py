"""PyTorch host + device traces -> Chakra execution trace rank sets (see docs/reference/trace-convert.md).

    from chakra_tools.convert import convert_run, convert_rank
    report = convert_run("traces/train-20260101-120000")          # writes .../chakra/
    graph = convert_rank("rank0.host.json", "rank0.device.json", 0).graph

No torch and no typer here: conversion runs on machines without either.
"""

from .rank import convert_rank
from .run import convert, convert_run, inputs_from_files, inputs_from_run

__all__ = ["convert", "convert_rank", "convert_run", "inputs_from_files", "inputs_from_run"]
