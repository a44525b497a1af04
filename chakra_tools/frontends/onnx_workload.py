"""ONNX model -> training workloads: an ASTRA-sim 1.0 text file, or Chakra ET rank sets.

The model's weight layers become the workload's layers (ModTrans's choice, and what ASTRA-sim's
own workloads list: ResNet-50 has 54 = 53 convolutions + 1 fc); the ops between two weight layers
(activations, pooling, normalisation) are folded into the layer before them, so no compute is
lost. The ONNX input's batch is what one data-parallel replica processes per iteration.

Per layer: forward = the folded ops' time; input gradient = the same again (the transposed
products cost what the forward did); weight gradient = the weight op's forward time (one more
product of the same size), 0 for layers without weights. Communication per strategy:

| strategy | forward | input gradient | weight gradient |
| --- | --- | --- | --- |
| data (DATA) | - | - | all-reduce of the weight bytes |
| tensor (MODEL) | all-gather of the output (each NPU sends its 1/t) | all-reduce of the input gradient | - |
| hybrid | as tensor, in the model group | as tensor | all-reduce of the weight shard |

With tensor parallelism of degree t each rank computes 1/t of a layer and holds 1/t of its
weights; with m microbatches each runs 1/m of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from chakra_tools.core.errors import InputError
from chakra_tools.core.model import CommType

from .costs import Device, MeasuredTimes
from .onnx_model import DTYPES, ModelSummary
from .textwl import Phase, TextLayer, TextWorkload
from .training import Comm, LayerSpec, Strategy, build_rankset


@dataclass(frozen=True)
class FoldedLayer:
    """A weight layer plus the weight-less ops after it, with its costs (whole batch, one rank)."""

    name: str
    op: str
    weight_bytes: int
    in_bytes: int
    out_bytes: int
    flops: int
    bytes_touched: int
    fwd_ns: int
    ig_ns: int
    wg_ns: int


def fold(summary: ModelSummary, device: Device | None = None,
         measured: MeasuredTimes | None = None) -> list[FoldedLayer]:
    """The weight layers with the other ops folded in, timed by `measured` or `device`."""
    if not summary.layers:
        raise InputError(f"{summary.source}: no layer with weights (Conv, Gemm, MatMul, ...) found")
    if device is None and measured is None:
        raise InputError("compute times need a device (--device H100) or a measured trace (--measured)")
    starts = {ly.index: ly for ly in summary.layers}
    dtype_bytes = max((b for lbl, b in DTYPES.values() if lbl == summary.layers[0].dtype), default=4)
    groups: list[tuple] = []
    leading = []  # ops before the first weight layer join it
    for op in summary.ops:
        if op.index in starts:
            groups.append((starts[op.index], [*leading, op] if not groups else [op]))
        elif groups:
            groups[-1][1].append(op)
        else:
            leading.append(op)
    return [_fold_one(layer, ops, device, measured, dtype_bytes) for layer, ops in groups]


def _fold_one(layer, ops, device, measured, dtype_bytes) -> FoldedLayer:
    times = [_op_time(op, device, measured, dtype_bytes) for op in ops]
    own_op, own = next((op, t) for op, t in zip(ops, times) if op.index == layer.index)
    ratio = (measured.backward_ratio(layer.op) if measured else None) or 2.0
    fwd = sum(times)
    return FoldedLayer(layer.name, layer.op, layer.bytes, own_op.in_bytes, ops[-1].out_bytes,
                       sum(op.flops for op in ops), sum(op.bytes_touched for op in ops),
                       fwd, round(fwd + own * (ratio / 2 - 1)), round(own * ratio / 2))


def _op_time(op, device: Device | None, measured: MeasuredTimes | None, dtype_bytes: int) -> int:
    if measured is not None:
        t = measured.take(op.op)
        if t is not None:
            return t
    if device is not None:
        return device.time_ns(op.flops, op.bytes_touched, dtype_bytes)
    return 0


# -- ASTRA-sim 1.0 text ---------------------------------------------------------------------

TEXT_POLICIES = ("DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_TRANSFORMER")


def to_text_workload(layers: list[FoldedLayer], policy: str, *, model_parallel: int = 1,
                     frequency_ghz: float = 1.0, source: str = "model") -> TextWorkload:
    """The ASTRA-sim 1.0 workload of `layers` under `policy`; `model_parallel` is the model
    group's size for MODEL and the hybrids (compute and weights per NPU are divided by it)."""
    if policy not in TEXT_POLICIES:
        raise InputError(f"cannot write policy {policy!r}; choose one of {', '.join(TEXT_POLICIES)}")
    mp = 1 if policy == "DATA" else model_parallel
    if mp < 1:
        raise InputError(f"model parallel degree must be at least 1, got {mp}")

    def cycles(ns: int) -> int:
        return round(ns / mp * frequency_ghz)

    rows = []
    for ly in layers:
        model = policy != "DATA"
        fwd = Phase(cycles(ly.fwd_ns), *(("ALLGATHER", ly.out_bytes // mp) if model else ("NONE", 0)))
        ig = Phase(cycles(ly.ig_ns), *(("ALLREDUCE", ly.in_bytes) if model else ("NONE", 0)))
        data = policy != "MODEL" and ly.weight_bytes > 0
        wg = Phase(cycles(ly.wg_ns), *(("ALLREDUCE", ly.weight_bytes // mp) if data else ("NONE", 0)))
        rows.append(TextLayer(ly.name, fwd, ig, wg, 0))
    options = {"model_parallel_NPU_group": mp} if policy == "HYBRID_TRANSFORMER" else {}
    return TextWorkload(policy, tuple(rows), options, source)


# -- Chakra ET rank sets --------------------------------------------------------------------

def layer_specs(layers: list[FoldedLayer], tp: int = 1, microbatches: int = 1) -> list[LayerSpec]:
    """Per-rank, per-microbatch layers for `build_rankset`."""
    m = microbatches
    specs = []
    for ly in layers:
        weighted = ly.weight_bytes > 0
        fwd_post = (Comm(CommType.ALL_GATHER, "tp", ly.out_bytes // m, "allgather_output"),) if weighted else ()
        bwd_post = (Comm(CommType.ALL_REDUCE, "tp", ly.in_bytes // m, "allreduce_input_grad"),) if weighted else ()
        specs.append(LayerSpec(
            ly.name, ly.fwd_ns // (tp * m), ly.ig_ns // (tp * m), ly.wg_ns // (tp * m),
            grad_bytes=ly.weight_bytes // tp, out_bytes=ly.out_bytes // m,
            fwd_flops=ly.flops // (tp * m), fwd_bytes=ly.bytes_touched // (tp * m),
            fwd_post=fwd_post, bwd_post=bwd_post))
    return specs


STRATEGIES = ("data", "tensor", "pipeline", "hybrid")


def strategy_for(name: str, npus: int, *, tp: int = 1, pp: int = 1, microbatches: int = 1,
                 zero: int = 0, iterations: int = 1) -> Strategy:
    """`data`: npus-way DP; `tensor`: npus-way TP; `pipeline`: npus stages; `hybrid`: tp x pp
    given, the rest data parallel."""
    if name == "data":
        return Strategy(dp=npus, zero=zero, iterations=iterations, microbatches=microbatches)
    if name == "tensor":
        return Strategy(tp=npus, iterations=iterations, microbatches=microbatches)
    if name == "pipeline":
        return Strategy(pp=npus, microbatches=max(microbatches, 1), iterations=iterations)
    if name == "hybrid":
        if npus % (tp * pp):
            raise InputError(f"tp {tp} x pp {pp} does not divide {npus} NPUs")
        return Strategy(tp=tp, pp=pp, dp=npus // (tp * pp), microbatches=microbatches, zero=zero,
                        iterations=iterations)
    raise InputError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")


def onnx_rankset(layers: list[FoldedLayer], strategy: Strategy, source: str = "model"):
    return build_rankset(layer_specs(layers, strategy.tp, strategy.microbatches), strategy,
                         source=source)
