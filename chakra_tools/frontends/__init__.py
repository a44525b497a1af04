"""Front ends that are not PyTorch traces: ONNX models (ModTrans), ASTRA-sim 1.0 text workloads,
and a parameterised transformer generator. Each produces the same thing as the PyTorch
converter, a `RankSet` of Chakra ETs plus `comm_group.json`, through pure functions.

`onnx` is optional and imported only by the functions that read models.
"""

from .builder import describe
from .costs import DEVICES, Device, MeasuredTimes, device
from .generate import TransformerConfig, generate
from .text_et import TextOptions, text_to_rankset
from .textwl import TextWorkload, format_text_workload, parse_text_workload, read_text_workload
from .training import Comm, LayerSpec, Strategy, build_rankset

__all__ = [
    "DEVICES", "Comm", "Device", "LayerSpec", "MeasuredTimes", "Strategy", "TextOptions",
    "TextWorkload", "TransformerConfig", "build_rankset", "describe", "device",
    "format_text_workload", "generate", "parse_text_workload", "read_text_workload",
    "text_to_rankset",
]
