"""Tensor parallelism (Megatron-style MLP block) over gloo, CPU: the first layer is split by
columns, the second by rows, and one all-reduce per block joins the partial sums in forward (and
one in backward, through an autograd function). With `--tp K`, world/K tensor-parallel groups
of K consecutive ranks (Megatron-LM's order) run side by side as data-parallel replicas, each on
its own batch, and every rank all-reduces its gradients with the ranks that hold the same shard
(one flat bucket, as DDP; over a group of one where K is the world size, as DDP at one rank).
Without `--tp` the whole world is one tensor-parallel group and there is no gradient all-reduce.

    torchrun --nproc-per-node 2 examples/tensor_parallel.py --steps 6
    trace-capture -- torchrun --nproc-per-node 4 examples/tensor_parallel.py --tp 2   # tp 2 x dp 2
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn

from replicas import average_gradients


#: this rank's tensor-parallel group (None: the world), set once in main()
TP_GROUP = None


class CopyToParallel(torch.autograd.Function):
    """Identity forward; all-reduce the input gradient in backward (column-parallel input)."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=TP_GROUP)
        return grad


class ReduceFromParallel(torch.autograd.Function):
    """All-reduce the partial sums in forward; identity backward (row-parallel output)."""

    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        dist.all_reduce(x, group=TP_GROUP)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


def parallel_groups(world: int, tp: int, replicas: bool):
    """(this rank's tensor-parallel group, its data-parallel group, None without `replicas`); a
    group that is the world is None. Every rank creates every group, as torch requires."""
    rank, dp = dist.get_rank(), world // tp
    mine_tp = mine_dp = None
    for d in range(dp):
        g = dist.new_group(list(range(d * tp, d * tp + tp))) if 1 < tp < world else None
        mine_tp = g if rank // tp == d else mine_tp
    for t in range(tp if replicas else 0):
        g = dist.new_group(list(range(t, world, tp))) if dp < world else None
        mine_dp = g if rank % tp == t else mine_dp
    return mine_tp, mine_dp


class ParallelMLP(nn.Module):
    def __init__(self, width: int, hidden: int, world: int):
        super().__init__()
        self.up = nn.Linear(width, hidden // world)  # column-parallel: a slice of the outputs
        self.down = nn.Linear(hidden // world, width, bias=False)  # row-parallel

    def forward(self, x):
        h = torch.relu(self.up(CopyToParallel.apply(x)))
        return x + ReduceFromParallel.apply(self.down(h))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tp", type=int, default=0,
                        help="tensor-parallel degree, the rest data-parallel replicas with a gradient all-reduce "
                             "(default: the whole world, no replicas); the world must be a multiple")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    global TP_GROUP
    rank, world = dist.get_rank(), dist.get_world_size()
    tp = args.tp or world
    if world % tp:
        raise SystemExit(f"--tp {tp} does not divide the world size {world}")
    dp = world // tp
    TP_GROUP, dp_group = parallel_groups(world, tp, bool(args.tp))
    torch.manual_seed(rank % tp)  # the same shard on every replica
    model = nn.Sequential(*[ParallelMLP(args.width, 4 * args.width, tp)
                            for _ in range(args.layers)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank // tp)  # a tensor-parallel group shares its batch
    x = torch.randn(args.batch, args.width, generator=gen)
    y = torch.randn(args.batch, args.width, generator=gen)
    for _ in range(args.steps):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        if args.tp:
            average_gradients(model, dp_group, dp)
        opt.step()
    if rank == 0:
        print(f"tensor_parallel: {args.steps} steps on {tp} tensor-parallel x {dp} data-parallel "
              f"ranks, loss {loss.item():.4f}")
    dist.barrier()  # all ranks done before teardown: gloo aborts now and then (torch 2.13,
    dist.destroy_process_group()  # 'terminate called') when a peer is still tearing down


if __name__ == "__main__":
    main()
