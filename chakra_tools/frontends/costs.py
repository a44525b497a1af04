"""Compute times for front ends that have no measured trace: a roofline of a named device, or
per-operator times measured in a captured Chakra trace.

Roofline (the same model as ASTRA-sim's roofline mode): an op with F FLOPs touching B bytes takes
max(F / peak, B / bandwidth). Device figures are the vendors' datasheet peaks (dense, no sparsity):
the tensor-core peak for 16-bit types and the vector FP32 peak for 32-bit ones. Real kernels reach
a fraction of peak; `efficiency` scales the peak for what-if studies.

Measured: the forward compute ops of a captured trace (our converter's output) are grouped by
kind (convolution, matrix multiply, ...) in trace order; the n-th ONNX op of a kind takes the n-th
measured time of that kind, so a model exported from the same program lines up op by op. Ops with
no measurement fall back to the roofline when a device is given, else to the kind's mean.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import mean

from chakra_tools.core.errors import InputError
from chakra_tools.core.model import NodeType


@dataclass(frozen=True)
class Device:
    """A device for the roofline: peaks in FLOP/s and memory bandwidth in bytes/s."""

    name: str
    peak_flops_16: float
    peak_flops_32: float
    mem_bw: float
    efficiency: float = 1.0

    def peak(self, dtype_bytes: int) -> float:
        return (self.peak_flops_32 if dtype_bytes >= 4 else self.peak_flops_16) * self.efficiency

    def time_ns(self, flops: int, nbytes: int, dtype_bytes: int = 2) -> int:
        """Roofline time in ns, at least 1 for any work.

        >>> DEVICES["A100"].time_ns(312 * 10**9, 0)   # 312 GFLOP at 312 TFLOP/s = 1 ms
        1000000
        """
        if flops <= 0 and nbytes <= 0:
            return 0
        t = max(flops / self.peak(dtype_bytes), nbytes / (self.mem_bw * self.efficiency))
        return max(1, round(t * 1e9))


#: Datasheet peaks: (16-bit tensor dense, FP32 vector) FLOP/s, HBM bytes/s.
DEVICES: dict[str, Device] = {d.name: d for d in (
    Device("V100", 125e12, 15.7e12, 900e9),
    Device("A100", 312e12, 19.5e12, 2.039e12),
    Device("H100", 989e12, 67e12, 3.35e12),
    Device("H200", 989e12, 67e12, 4.8e12),
    Device("B200", 2250e12, 80e12, 8e12),
    Device("MI250X", 383e12, 47.9e12, 3.2e12),
    Device("MI300X", 1307e12, 163.4e12, 5.3e12),
)}


def device(spec: str, efficiency: float = 1.0) -> Device:
    """A named device (`H100`), or a custom one as `TFLOPS:GBps` (e.g. `400:2000`)."""
    key = spec.upper()
    if key in DEVICES:
        return replace(DEVICES[key], efficiency=efficiency)
    m = re.fullmatch(r"([\d.]+):([\d.]+)", spec)
    if m:
        tf, gbs = float(m.group(1)) * 1e12, float(m.group(2)) * 1e9
        return Device(spec, tf, tf, gbs, efficiency)
    raise InputError(f"unknown device {spec!r}: use one of {', '.join(DEVICES)} or TFLOPS:GBps "
                     "(e.g. 400:2000)")


#: Op kind -> pattern on a trace op's name (lower case). First match wins.
KIND_PATTERNS: tuple[tuple[str, str], ...] = (
    ("Conv", r"conv"),
    ("MatMul", r"addmm|\bmm\b|matmul|linear|gemm|bmm|baddbmm"),
    ("BatchNormalization", r"batch_norm|batchnorm"),
    ("LayerNormalization", r"layer_norm|layernorm"),
    ("Relu", r"relu"),
    ("MaxPool", r"max_pool"),
    ("AveragePool", r"avg_pool|adaptive_avg"),
    ("Softmax", r"softmax"),
    ("Gelu", r"gelu"),
)
#: ONNX op -> the kind it is measured as.
ONNX_KIND = {"Gemm": "MatMul", "MatMul": "MatMul", "Conv": "Conv", "ConvTranspose": "Conv",
             "GlobalAveragePool": "AveragePool", "LRN": None}


def kind_of(name: str) -> str | None:
    low = name.lower()
    for kind, pat in KIND_PATTERNS:
        if re.search(pat, low):
            return kind
    return None


@dataclass
class MeasuredTimes:
    """Forward and backward durations (ns) per op kind, in trace order."""

    fwd: dict[str, list[int]] = field(default_factory=dict)
    bwd: dict[str, list[int]] = field(default_factory=dict)
    source: str = ""
    _next: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_trace(cls, path: str | Path) -> "MeasuredTimes":
        """Read one rank's `.et`; keeps the outermost op of a kind where ops of it nest."""
        from chakra_tools.core.graph import Graph

        g = Graph.read(path)
        spans: dict[tuple[str, bool], list[tuple[int, int]]] = {}
        for n in g:
            if n.type is not NodeType.COMP_NODE or n.duration_micros <= 0:
                continue
            kind = kind_of(n.name)
            if kind:
                bwd = "backward" in n.name.lower()
                spans.setdefault((kind, bwd), []).append((n.start_time_micros, n.duration_micros))
        out = cls(source=str(path))
        for (kind, bwd), ss in spans.items():
            (out.bwd if bwd else out.fwd)[kind] = [d * 1000 for d in _outermost(ss)]
        if not out.fwd:
            raise InputError(f"{path}: no compute ops with durations that look like convolutions, "
                             "matrix multiplies or activations")
        return out

    def take(self, onnx_op: str) -> int | None:
        """The next forward time measured for an op of this kind, else the kind's mean."""
        kind = ONNX_KIND.get(onnx_op, onnx_op)
        times = self.fwd.get(kind) if kind else None
        if not times:
            return None
        i = self._next.get(kind, 0)
        self._next[kind] = i + 1
        return times[i] if i < len(times) else round(mean(times))

    def backward_ratio(self, onnx_op: str) -> float | None:
        """Measured backward / forward time of a kind, when the trace has both."""
        kind = ONNX_KIND.get(onnx_op, onnx_op)
        f, b = self.fwd.get(kind), self.bwd.get(kind)
        return sum(b) / sum(f) if f and b and sum(f) else None


def _outermost(spans: list[tuple[int, int]]) -> list[int]:
    """Durations of the spans not inside an earlier one (aten::conv2d holds aten::convolution).

    Without timestamps (all zero) nothing can be nested, so every span counts.

    >>> _outermost([(0, 10), (1, 8), (2, 5), (20, 4)])
    [10, 4]
    """
    if all(start == 0 for start, _ in spans):
        return [d for _, d in spans]
    out, end = [], None
    for start, dur in sorted(spans, key=lambda s: (s[0], -s[1])):
        if end is None or start >= end:
            out.append(dur)
            end = start + dur
    return out
