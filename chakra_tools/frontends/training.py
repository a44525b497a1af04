"""A training loop as a graph: layers x parallel strategy -> one ET per rank.

This is ASTRA-sim 2.0's idea of a workload: the training loop unrolled into a graph, so any
parallelisation is just a different graph. Every layer runs three computations per microbatch,
forward (`fwd`), input gradient (`ig`) and weight gradient (`wg`); a strategy adds the
communication each needs:

* data parallel (`dp`): each layer's gradient is all-reduced once per iteration, after the last
  microbatch's weight gradient, overlapping the rest of the backward pass. With ZeRO stage 1 or 2
  the gradient is reduce-scattered and the updated parameters all-gathered after the optimizer
  step (the same traffic; the stages differ in memory only); with stage 3 (FSDP) every layer also
  all-gathers its parameters before its forward and its backward, each microbatch.
* tensor parallel (`tp`): a layer's `fwd_post` / `bwd_post` collectives (e.g. Megatron's
  all-reduce after attention and after the MLP) in the tensor-parallel group; compute and
  gradients are per rank (already divided by `tp`).
* pipeline parallel (`pp`): layers are split into contiguous stages with about equal forward time;
  stage boundaries send activations forward and gradients backward, one send/recv pair per
  microbatch, in a GPipe schedule (all forwards, then all backwards) that cannot deadlock.
* expert parallel (`ep`): a layer's `fwd_pre`/`fwd_post` all-to-alls run in the expert group (`ep`
  consecutive data-parallel ranks); expert gradients are all-reduced among the ranks that hold the
  same experts (`edp`, dp/ep ranks) rather than the whole data-parallel group.

Sizes are bytes per rank. A `Comm` names the whole buffer a collective reduces or gathers; the
node's `comm_size` follows the project's convention (what ASTRA-sim's collective models take):
the buffer for all-reduce, the full input for reduce-scatter, what this rank sends for
all-to-all, and this rank's contribution (buffer / group size) for all-gather. Collectives of a
group that holds one rank are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chakra_tools.core.errors import InputError
from chakra_tools.core.graph import RankSet
from chakra_tools.core.model import CommType

from .builder import GraphBuilder
from chakra_tools.core.layout import ParallelLayout

from .groups import GroupTable

GROUPS = ("tp", "dp", "ep", "edp", "world")


@dataclass(frozen=True)
class Comm:
    kind: CommType
    group: str  # one of GROUPS
    size: int
    label: str = ""


@dataclass(frozen=True)
class LayerSpec:
    """One layer, per rank and per microbatch (times in ns, sizes in bytes)."""

    name: str
    fwd_ns: int
    ig_ns: int
    wg_ns: int
    grad_bytes: int = 0  # this rank's share of the layer's gradient (0: no weights)
    out_bytes: int = 0  # activation the layer hands on (a pipeline send if it ends a stage)
    fwd_flops: int = 0
    fwd_bytes: int = 0
    expert: bool = False
    fwd_pre: tuple[Comm, ...] = ()
    fwd_post: tuple[Comm, ...] = ()
    bwd_pre: tuple[Comm, ...] = ()
    bwd_post: tuple[Comm, ...] = ()


@dataclass(frozen=True)
class Strategy:
    """How the job is parallelised. `stages`: layers per pipeline stage (default: balanced by
    forward time); `optimizer_ns`: time of the optimizer step."""

    tp: int = 1
    dp: int = 1
    pp: int = 1
    ep: int = 1
    microbatches: int = 1
    zero: int = 0
    iterations: int = 1
    stages: tuple[int, ...] | None = None
    optimizer_ns: int = 0

    def layout(self) -> ParallelLayout:
        try:
            return ParallelLayout(self.tp, self.dp, self.pp, self.ep)
        except ValueError as e:
            raise InputError(str(e)) from None

    def check(self) -> None:
        if self.zero not in (0, 1, 2, 3):
            raise InputError(f"ZeRO stage must be 0, 1, 2 or 3, got {self.zero}")
        if self.microbatches < 1 or self.iterations < 1:
            raise InputError("microbatches and iterations must be at least 1")


def split_stages(layers: list[LayerSpec], pp: int, counts: tuple[int, ...] | None = None
                 ) -> list[list[LayerSpec]]:
    """Contiguous stages; by default each closes once it holds its share of forward time.

    >>> ls = [LayerSpec(str(i), t, 0, 0) for i, t in enumerate([4, 1, 1, 1, 1, 4])]
    >>> [[l.name for l in s] for s in split_stages(ls, 2)]
    [['0', '1', '2'], ['3', '4', '5']]
    """
    if len(layers) < pp:
        raise InputError(f"{pp} pipeline stages need at least {pp} layers, the model has {len(layers)}")
    if counts:
        if len(counts) != pp or sum(counts) != len(layers) or min(counts) < 1:
            raise InputError(f"stage sizes {list(counts)} must be {pp} positive counts summing to "
                             f"{len(layers)} layers")
    else:
        counts = _balanced_counts([max(l.fwd_ns, 1) for l in layers], pp)
    out, i = [], 0
    for c in counts:
        out.append(layers[i:i + c])
        i += c
    return out


def _balanced_counts(weights: list[int], pp: int) -> tuple[int, ...]:
    total, counts, acc, start = sum(weights), [], 0, 0
    for i, w in enumerate(weights):
        acc += w
        left_layers, left_stages = len(weights) - i - 1, pp - len(counts) - 1
        if left_stages == 0:
            break
        if (acc >= total * (len(counts) + 1) / pp or left_layers == left_stages) and left_layers >= left_stages:
            counts.append(i + 1 - start)
            start = i + 1
    counts.append(len(weights) - start)
    return tuple(counts)


@dataclass
class _RankProgram:
    """Builds one rank's iterations."""

    rank: int
    stage: int
    layers: list[LayerSpec]
    strategy: Strategy
    layout: ParallelLayout
    table: GroupTable
    prev_stage_out: int = 0  # bytes the previous stage sends per microbatch
    b: GraphBuilder = field(init=False)
    param_ready: dict[int, list] = field(default_factory=dict)

    def __post_init__(self):
        self.b = GraphBuilder(self.rank)

    def members(self, group: str) -> tuple[int, ...]:
        lay = self.layout
        return {"tp": lay.tp_group, "dp": lay.dp_group, "ep": lay.ep_group, "edp": lay.edp_group,
                "world": lambda r: tuple(range(lay.world))}[group](self.rank)

    def coll(self, name: str, c: Comm, deps) -> int | None:
        """A collective over `c.group`; an all-gather's comm_size is this rank's share."""
        key = (c.group, self.layout.first_of(c.group, self.rank))
        known = self.table.by_key.get(key)
        if known is None:  # each group listed once for the job, not once per collective and rank
            members = self.members(c.group)
            known = self.table.by_key[key] = (self.table.id_of(members) if len(members) > 1 else "", len(members))
        gid, size_of_group = known
        if size_of_group < 2 or c.size <= 0:
            return None
        size = c.size // size_of_group if c.kind is CommType.ALL_GATHER else c.size
        return self.b.coll(name, deps, c.kind, size, gid)

    def comms(self, name: str, comms, deps: list) -> list:
        for c in comms:
            nid = self.coll(f"{name}:{c.label or c.kind.name.lower()}", c, deps)
            deps = [nid] if nid is not None else deps
        return deps

    def tag(self, it: int, mb: int, backward: bool, boundary: int) -> int:
        s = self.strategy
        return ((it * s.microbatches + mb) * 2 + backward) * s.pp + boundary + 1

    def grad_group(self, ly: LayerSpec) -> str:
        return "edp" if ly.expert else "dp"

    def gather_params(self, i: int, ly: LayerSpec, where: str, deps: list) -> list:
        """ZeRO-3: all-gather this layer's parameters before it runs."""
        if self.strategy.zero != 3 or not ly.grad_bytes:
            return deps
        nid = self.coll(f"{ly.name}:{where}:allgather_params",
                        Comm(CommType.ALL_GATHER, self.grad_group(ly), ly.grad_bytes), deps)
        return deps if nid is None else [*deps, nid]

    # -- the loop -----------------------------------------------------------------------------
    def iteration(self, it: int, prev: list) -> list:
        s = self.strategy
        last_fwd = prev
        for mb in range(s.microbatches):
            last_fwd = self.forward(it, mb, last_fwd)
        syncs, last = [], last_fwd
        for mb in range(s.microbatches):
            last = self.backward(it, mb, last, syncs if mb == s.microbatches - 1 else None)
        return self.step(it, [*last, *syncs])

    def forward(self, it: int, mb: int, prev: list) -> list:
        """One microbatch forward: receive, the stage's layers, send; returns the last nodes."""
        s, tagged = self.strategy, f"it{it}.mb{mb}"
        deps = list(prev)
        if self.stage > 0:
            src = self.layout.stage_peer(self.rank, -1)
            deps.append(self.b.recv(f"{tagged}:recv_activation", [], src,
                                    self.prev_stage_out, self.tag(it, mb, False, self.stage - 1)))
        for i, ly in enumerate(self.layers):
            name = f"{ly.name}.{tagged}"
            deps = self.gather_params(i, ly, "fwd", deps)
            deps = self.comms(f"{name}:fwd", ly.fwd_pre, deps)
            f = self.b.comp(f"{name}:fwd", [*deps, *self.param_ready.get(i, [])], ly.fwd_ns,
                            num_ops=ly.fwd_flops, tensor_size=ly.fwd_bytes)
            deps = self.comms(f"{name}:fwd", ly.fwd_post, [f])
        if self.stage < s.pp - 1:
            dst = self.layout.stage_peer(self.rank, +1)
            self.b.send(f"{tagged}:send_activation", deps, dst, self.layers[-1].out_bytes,
                        self.tag(it, mb, False, self.stage))
        return deps

    def backward(self, it: int, mb: int, prev: list, syncs: list | None) -> list:
        """One microbatch backward; `syncs` (last microbatch only) collects gradient syncs."""
        s, tagged = self.strategy, f"it{it}.mb{mb}"
        deps = list(prev)
        if self.stage < s.pp - 1:
            src = self.layout.stage_peer(self.rank, +1)
            deps.append(self.b.recv(f"{tagged}:recv_gradient", [], src, self.layers[-1].out_bytes,
                                    self.tag(it, mb, True, self.stage)))
        for i in reversed(range(len(self.layers))):
            ly = self.layers[i]
            name = f"{ly.name}.{tagged}"
            deps = self.gather_params(i, ly, "bwd", deps)
            deps = self.comms(f"{name}:bwd", ly.bwd_pre, deps)
            ig = self.b.comp(f"{name}:ig", deps, ly.ig_ns, num_ops=ly.fwd_flops,
                             tensor_size=ly.fwd_bytes)
            post = self.comms(f"{name}:bwd", ly.bwd_post, [ig])
            wg = self.b.comp(f"{name}:wg", [ig], ly.wg_ns, num_ops=ly.fwd_flops if ly.grad_bytes else 0,
                             tensor_size=ly.fwd_bytes if ly.grad_bytes else 0)
            if syncs is not None:
                self.sync_gradient(it, ly, wg, syncs)
            deps = [wg] if post == [ig] else [*post, wg]
        if self.stage > 0:
            dst = self.layout.stage_peer(self.rank, -1)
            self.b.send(f"{tagged}:send_gradient", deps, dst, self.prev_stage_out,
                        self.tag(it, mb, True, self.stage - 1))
        return deps

    def sync_gradient(self, it: int, ly: LayerSpec, wg: int, syncs: list) -> None:
        """After the last microbatch: all-reduce (ZeRO 0) or reduce-scatter the layer's gradient."""
        if not ly.grad_bytes:
            return
        zero = self.strategy.zero
        kind, label = ((CommType.ALL_REDUCE, "allreduce") if zero == 0
                       else (CommType.REDUCE_SCATTER, "reducescatter"))
        nid = self.coll(f"{ly.name}.it{it}:grad_{label}", Comm(kind, self.grad_group(ly), ly.grad_bytes), [wg])
        if nid is not None:
            syncs.append(nid)

    def step(self, it: int, deps: list) -> list:
        s = self.strategy
        opt = self.b.comp(f"it{it}:optimizer_step", deps, s.optimizer_ns)
        self.param_ready = {}
        for i, ly in enumerate(self.layers):
            ready = [opt]
            if s.zero in (1, 2) and ly.grad_bytes:
                nid = self.coll(f"{ly.name}.it{it}:allgather_params",
                                Comm(CommType.ALL_GATHER, self.grad_group(ly), ly.grad_bytes), [opt])
                ready = [nid] if nid is not None else ready
            self.param_ready[i] = ready
        return [opt]


def build_rankset(layers: list[LayerSpec], strategy: Strategy, *, prefix: str = "workload",
                  **metadata) -> RankSet:
    """The rank set of `strategy.iterations` training iterations of `layers`.

    >>> ls = [LayerSpec("l0", 1000, 1000, 1000, grad_bytes=4096),
    ...       LayerSpec("l1", 1000, 1000, 1000, grad_bytes=4096)]
    >>> rs = build_rankset(ls, Strategy(dp=2))
    >>> for n in rs[1]: print(n)
    %0 COMP 'l0.it0.mb0:fwd' 1us
    %1 COMP 'l1.it0.mb0:fwd' 1us deps=[%0]
    %2 COMP 'l1.it0.mb0:ig' 1us deps=[%1]
    %3 COMP 'l1.it0.mb0:wg' 1us deps=[%2]
    %4 COMM_COLL 'l1.it0:grad_allreduce' ALL_REDUCE 4.0KiB pg=1 deps=[%3]
    %5 COMP 'l0.it0.mb0:ig' 1us deps=[%3]
    %6 COMP 'l0.it0.mb0:wg' 1us deps=[%5]
    %7 COMM_COLL 'l0.it0:grad_allreduce' ALL_REDUCE 4.0KiB pg=1 deps=[%6,%4]
    %8 COMP 'it0:optimizer_step' deps=[%6,%4,%7]
    """
    strategy.check()
    layout = strategy.layout()
    stages = split_stages(layers, strategy.pp, strategy.stages)
    table = GroupTable()
    table.id_of(tuple(range(layout.world)))
    graphs = {}
    for rank in range(layout.world):
        stage = layout.coord(rank)[2]
        prog = _RankProgram(rank, stage, stages[stage], strategy, layout, table,
                            stages[stage - 1][-1].out_bytes if stage > 0 else 0)
        prev: list = []
        for it in range(strategy.iterations):
            prev = prog.iteration(it, prev)
        graphs[rank] = prog.b.graph(**metadata, tp=strategy.tp, dp=strategy.dp, pp=strategy.pp,
                                    ep=strategy.ep, microbatches=strategy.microbatches,
                                    zero=strategy.zero, stage=stage)
    return RankSet(graphs, dict(table.groups), prefix=prefix)
