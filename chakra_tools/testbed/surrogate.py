"""A training job whose compute is timed waits and whose communication is real gloo.

Each layer's forward and backward is a `time.sleep` inside a `record_function` range, standing for
the device kernels of a real job: the waits cost no CPU, so 16 ranks on 2 cores keep the step they
would have on 16, and the time that remains is the communication's, which crosses real sockets
(the test bed's shaped links between nodes, loopback within one). The parallel layout is
Megatron-LM's rank order (core/layout.py: tensor-parallel ranks innermost, then data, then
pipeline stages), so a tensor-parallel group stays inside a node as on a real cluster.

What each layout does per step, per layer of its stage:

- data parallel (the default): forward waits; backward waits, then all-reduces the layer's
  gradient bucket asynchronously (DDP's buckets), all waited before the optimizer step;
- `--fsdp` (FSDP2's collectives): all-gather of the layer's parameters before its forward and
  again before its backward, a reduce-scatter of its gradient after the backward (asynchronous,
  waited before the optimizer step);
- `--tp T`: a synchronous all-reduce of the activations (forward) and of their gradient
  (backward) on the tensor-parallel group after each layer;
- `--pp P`: P stages, `--microbatches M` of GPipe: all forwards (each receives its activations
  from the previous stage and sends them on), then all backwards the other way;
- `--moe`: each layer's MLP is a mixture of experts spread over the data-parallel group (expert
  parallelism equal to data parallelism, as DeepSpeed-MoE places it by default): an all-to-all
  of the activations to the experts before the layer's wait and one back after it, in the
  forward and again in the backward;
- any mix of these; data-parallel groups all-reduce (or reduce-scatter) the gradients.

    torchrun --nproc-per-node 4 -m chakra_tools.testbed.surrogate --layers 6 --bucket-kib 256
    torchrun --nproc-per-node 4 -m chakra_tools.testbed.surrogate --pp 2 --microbatches 4

`--result FILE`: rank 0 writes the measured step (the wall-clock span of the timed steps over
their count, on every rank, the slowest rank's) and every rank's timed steps as JSON, for the
benchmark's real runs (testbed/jobs.py reads them).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import record_function

from chakra_tools.core.layout import ParallelLayout

FLOAT = 4  # bytes of a float32 element


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=6, help="layers per pipeline stage")
    p.add_argument("--fwd-ms", type=float, default=4.0, help="forward wait per layer and micro-batch")
    p.add_argument("--bwd-ms", type=float, default=8.0, help="backward wait per layer and micro-batch")
    p.add_argument("--opt-ms", type=float, default=2.0, help="optimizer step wait")
    p.add_argument("--bucket-kib", type=int, default=256, help="gradient bytes per layer (KiB)")
    p.add_argument("--activation-kib", type=int, default=64,
                   help="activation bytes per micro-batch (KiB): pipeline sends, tensor-parallel all-reduces")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages")
    p.add_argument("--microbatches", type=int, default=1)
    p.add_argument("--fsdp", action="store_true", help="shard parameters and gradients (FSDP2)")
    p.add_argument("--moe", action="store_true",
                   help="experts over the data-parallel group: an all-to-all of the activations before and "
                        "after each layer's wait, forward and backward")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2, help="steps left out of --result")
    p.add_argument("--result", type=Path, help="rank 0 writes the measured step here (JSON)")
    return p.parse_args(argv)


def wait(ms: float, name: str) -> None:
    with record_function(name):
        time.sleep(ms / 1000)


class Job:
    """One rank of the surrogate job: its groups and buffers, made once."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        if self.world % (args.tp * args.pp):
            raise SystemExit(f"surrogate: world {self.world} is not a multiple of tp {args.tp} x pp {args.pp}")
        self.layout = ParallelLayout(tp=args.tp, dp=self.world // (args.tp * args.pp), pp=args.pp)
        self.tp_group = self._groups(self.layout.tp_group, args.tp)
        # a data-parallel group even of one rank, as DDP makes one: its all-reduce is what says
        # what more replicas would exchange (trace-convert scale)
        self.dp_group = self._groups(self.layout.dp_group, max(2, self.layout.dp))
        _, _, self.stage = self.layout.coord(self.rank)
        act = args.activation_kib * 1024 // FLOAT
        self.act = torch.ones(act)
        self.act_in = torch.zeros(act)
        dp = self.layout.dp
        if args.moe:  # an equal share per expert's rank, on 3 or 6 ranks too (gloo asks it)
            tokens = -(-act // dp) * dp
            self.tokens, self.routed = torch.ones(tokens), torch.zeros(tokens)
        grad = args.bucket_kib * 1024 // FLOAT
        shard = -(-grad // dp)
        self.grads = [torch.ones(shard * dp) for _ in range(args.layers)]
        self.shards = [torch.zeros(shard) for _ in range(args.layers)]
        self.param = torch.nn.Parameter(torch.zeros(1))
        self.opt = torch.optim.SGD([self.param], lr=0.0)

    def _groups(self, members_of, size: int):
        """This rank's group among every group of that kind (each rank makes all of them, in the
        same order, as torch.distributed requires); None for groups of one."""
        mine = None
        seen = set()
        for r in range(self.world):
            members = members_of(r)
            if members in seen:
                continue
            seen.add(members)
            group = dist.new_group(list(members)) if size > 1 else None
            if self.rank in members:
                mine = group
        return mine

    # -- one step ------------------------------------------------------------------------------
    def step(self) -> None:
        a = self.args
        pending = []
        for m in range(a.microbatches):
            self._recv(-1)
            for layer in range(a.layers):
                self._gather(layer)
                self._to_experts()
                wait(a.fwd_ms, f"layer{layer}.forward")
                self._to_experts()
                self._tp_all_reduce()
            pending += self._send(+1)
        for m in range(a.microbatches):
            self._recv(+1)
            for layer in reversed(range(a.layers)):
                self._gather(layer)
                self._to_experts()
                wait(a.bwd_ms, f"layer{layer}.backward")
                self._to_experts()
                self._tp_all_reduce()
                if m == a.microbatches - 1:
                    pending += self._reduce_gradient(layer)
            pending += self._send(-1)
        for work in pending:
            work.wait()
        self.param.grad = torch.zeros(1)
        with record_function("optimizer"):
            time.sleep(a.opt_ms / 1000)
            self.opt.step()

    def _gather(self, layer: int) -> None:
        if self.args.fsdp and self.dp_group is not None:
            dist.all_gather_into_tensor(self.grads[layer], self.shards[layer], group=self.dp_group)

    def _reduce_gradient(self, layer: int) -> list:
        if self.dp_group is None:
            return []
        if self.args.fsdp:
            return [dist.reduce_scatter_tensor(self.shards[layer], self.grads[layer],
                                               group=self.dp_group, async_op=True)]
        return [dist.all_reduce(self.grads[layer], group=self.dp_group, async_op=True)]

    def _to_experts(self) -> None:
        """Tokens to their experts or back: an all-to-all of the activations, an equal share to
        every member of the data-parallel group."""
        if self.args.moe and self.dp_group is not None:
            dist.all_to_all_single(self.routed, self.tokens, group=self.dp_group)

    def _tp_all_reduce(self) -> None:
        if self.tp_group is not None:
            dist.all_reduce(self.act, group=self.tp_group)

    def _peer(self, delta: int) -> int | None:
        stage = self.stage + delta
        return self.layout.stage_peer(self.rank, delta) if 0 <= stage < self.args.pp else None

    def _recv(self, delta: int) -> None:
        peer = self._peer(delta)
        if peer is not None:
            dist.recv(self.act_in, src=peer)

    def _send(self, delta: int) -> list:
        peer = self._peer(delta)
        return [] if peer is None else [dist.isend(self.act, dst=peer)]


def _cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    job = Job(args)
    starts, cpu = [], []
    for _ in range(args.steps):
        if not starts:
            dist.barrier()  # one common start; then the job runs free
        starts.append(time.time_ns())
        cpu.append(_cpu_s())
        job.step()
    starts.append(time.time_ns())
    cpu.append(_cpu_s())
    timed = starts[args.warmup:]
    span = torch.tensor([(timed[-1] - timed[0]) / max(1, len(timed) - 1)], dtype=torch.float64)
    dist.all_reduce(span, op=dist.ReduceOp.MAX)
    # the host's cores the job kept busy over its timed steps (every rank's threads, gloo's too):
    # near all of them, the bed itself, not the network it models, set the pace
    busy = torch.tensor([cpu[-1] - cpu[args.warmup]], dtype=torch.float64)
    dist.all_reduce(busy)
    # every rank's timed steps, for a step measure that a stall of the shared host does not move
    steps = torch.tensor([b - a for a, b in zip(timed, timed[1:])], dtype=torch.float64)
    every = [torch.zeros_like(steps) for _ in range(job.world)]
    dist.all_gather(every, steps)
    if args.result is not None and job.rank == 0:
        args.result.write_text(json.dumps({
            "step_ns": int(span.item()), "steps_ns": [[int(x) for x in r.tolist()] for r in every],
            "world": job.world, "tp": args.tp, "pp": args.pp,
            "dp": job.layout.dp, "fsdp": args.fsdp, "steps": args.steps, "warmup": args.warmup,
            "cores_busy": round(busy.item() / ((timed[-1] - timed[0]) / 1e9), 3), "host_cores": os.cpu_count(),
            "hosts": os.environ.get("GROUP_WORLD_SIZE")}) + "\n")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
