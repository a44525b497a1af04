"""Parameterised transformer training -> per-rank Chakra ET, for what-if studies at any scale.

A decoder-only transformer (GPT-style): an embedding, `layers` blocks of attention + MLP (or a
mixture-of-experts MLP), and an output projection (`lm_head`). Sizes follow Megatron-LM's
tensor-parallel layout: attention and MLP weights are split `tp` ways, with one all-reduce of the
activations after each (forward) and of the input gradient before each (backward), and the
embedding and output projection split by vocabulary. FLOPs per microbatch of b sequences of s
tokens with hidden size h, FFN size f and vocabulary V, per rank:

    attention  (8 b s h^2 + 4 b s^2 h) / tp      MLP  4 b s h f / tp (x top-k for MoE)
    lm_head    2 b s h V / tp

Compute times come from the roofline of a named device (see `costs.py`); gradients and
activations are in the model's dtype (2 bytes: bf16). `batch` is the global batch in sequences:
each data-parallel replica runs batch/dp of it, in `microbatches` pieces. The optimizer step is
timed as memory-bound: 16 bytes read and written per parameter the rank updates.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

from chakra_tools.core.errors import InputError
from chakra_tools.core.files import read_yaml_mapping
from chakra_tools.core.graph import RankSet
from chakra_tools.core.model import CommType

from .costs import Device, device
from .training import Comm, LayerSpec, Strategy, build_rankset


@dataclass(frozen=True)
class TransformerConfig:
    """One training job. Parallel degrees multiply to the number of ranks (tp x dp x pp); `ep`
    must divide dp; `experts` > 0 makes every MLP a mixture of experts routing each token to
    `top_k` of them; `zero` is the ZeRO stage (3 = FSDP)."""

    layers: int = 24
    hidden: int = 2048
    ffn: int = 0  # 0: 4 x hidden
    heads: int = 16
    seq: int = 2048
    batch: int = 64
    vocab: int = 50304
    dtype_bytes: int = 2
    experts: int = 0
    top_k: int = 2
    tp: int = 1
    dp: int = 1
    pp: int = 1
    ep: int = 1
    microbatches: int = 1
    zero: int = 0
    iterations: int = 1
    device: str = "H100"
    efficiency: float = 1.0

    @property
    def world(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def ffn_size(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def micro_batch(self) -> int:
        return self.batch // (self.dp * self.microbatches)

    def check(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
                raise InputError(f"{f.name} must not be negative, got {v}")
        if self.batch % (self.dp * self.microbatches):
            raise InputError(f"batch {self.batch} must split evenly over dp {self.dp} x "
                             f"microbatches {self.microbatches}")
        if self.hidden % self.tp or self.ffn_size % self.tp or self.heads % self.tp:
            raise InputError(f"hidden {self.hidden}, ffn {self.ffn_size} and heads {self.heads} "
                             f"must be divisible by tp {self.tp}")
        if self.experts and self.experts % self.ep:
            raise InputError(f"experts {self.experts} must be divisible by ep {self.ep}")
        if self.ep > 1 and not self.experts:
            raise InputError("ep > 1 needs a mixture-of-experts model (experts > 0)")

    @classmethod
    def from_mapping(cls, data: dict, source: str = "config") -> "TransformerConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(f"{source}: unknown keys {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)

    @classmethod
    def from_file(cls, path: str | Path) -> "TransformerConfig":
        return cls.from_mapping(read_yaml_mapping(path), str(path))

    def to_dict(self) -> dict:
        return asdict(self)


def transformer_layers(cfg: TransformerConfig, dev: Device) -> list[LayerSpec]:
    """The model's layers, per rank and per microbatch."""
    b, s, h, t, d = cfg.micro_batch, cfg.seq, cfg.hidden, cfg.tp, cfg.dtype_bytes
    act = b * s * h * d
    tp_ar = Comm(CommType.ALL_REDUCE, "tp", act, "tp_allreduce")

    def timed(name, flops, param_elems, act_elems, **kw) -> LayerSpec:
        nbytes = (param_elems + act_elems) * d
        fwd = dev.time_ns(flops, nbytes, d)
        wg = dev.time_ns(flops, nbytes, d) if param_elems else 0
        return LayerSpec(name, fwd, fwd, wg, grad_bytes=param_elems * d, out_bytes=act,
                         fwd_flops=flops, fwd_bytes=nbytes, **kw)

    out = [timed("embedding", 0, cfg.vocab * h // t, 2 * b * s * h, fwd_post=(tp_ar,))]
    for i in range(cfg.layers):
        attn_flops = (8 * b * s * h * h + 4 * b * s * s * h) // t
        out.append(timed(f"block{i}.attn", attn_flops, 4 * h * h // t,
                         b * s * (6 * h // t + 2 * h) + 2 * b * (cfg.heads // t) * s * s,
                         fwd_post=(tp_ar,), bwd_post=(tp_ar,)))
        out.append(_mlp(cfg, i, timed, tp_ar))
    out.append(timed("lm_head", 2 * b * s * h * cfg.vocab // t, cfg.vocab * h // t,
                     b * s * (h + cfg.vocab // t), bwd_post=(tp_ar,)))
    return out


def _mlp(cfg: TransformerConfig, i: int, timed, tp_ar: Comm) -> LayerSpec:
    b, s, h, f, t = cfg.micro_batch, cfg.seq, cfg.hidden, cfg.ffn_size, cfg.tp
    if not cfg.experts:
        return timed(f"block{i}.mlp", 4 * b * s * h * f // t, 2 * h * f // t, b * s * (2 * h + 2 * f // t),
                     fwd_post=(tp_ar,), bwd_post=(tp_ar,))
    routed = b * s * h * cfg.top_k * cfg.dtype_bytes
    dispatch = Comm(CommType.ALL_TO_ALL, "ep", routed, "ep_dispatch")
    combine = Comm(CommType.ALL_TO_ALL, "ep", routed, "ep_combine")
    local_experts = cfg.experts // cfg.ep
    return timed(f"block{i}.moe", 4 * b * s * h * f * cfg.top_k // t, local_experts * 2 * h * f // t,
                 b * s * cfg.top_k * (2 * h + 2 * f // t), expert=True,
                 fwd_pre=(dispatch,), fwd_post=(combine, tp_ar), bwd_pre=(combine,),
                 bwd_post=(dispatch, tp_ar))


def generate(cfg: TransformerConfig) -> RankSet:
    """The rank set of `cfg` (tp x dp x pp ranks) plus its process groups."""
    cfg.check()
    dev = device(cfg.device, cfg.efficiency)
    layers = transformer_layers(cfg, dev)
    params = sum(ly.grad_bytes for ly in layers) // cfg.dtype_bytes // cfg.pp
    shard = cfg.dp if cfg.zero else 1
    strategy = Strategy(tp=cfg.tp, dp=cfg.dp, pp=cfg.pp, ep=cfg.ep, microbatches=cfg.microbatches,
                        zero=cfg.zero, iterations=cfg.iterations,
                        optimizer_ns=round(params / shard * 16 / dev.mem_bw * 1e9))
    return build_rankset(layers, strategy, prefix="workload", generator="transformer",
                         num_layers=cfg.layers, hidden=cfg.hidden, seq=cfg.seq, batch=cfg.batch,
                         device=dev.name)
