"""Tensor parallelism (Megatron-style MLP block) over gloo, CPU: the first layer is split by
columns, the second by rows, and one all-reduce per block joins the partial sums in forward (and
one in backward, through an autograd function).

    torchrun --nproc-per-node 2 examples/tensor_parallel.py --steps 6
    trace-capture -- torchrun --nproc-per-node 2 examples/tensor_parallel.py --steps 6
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn


class CopyToParallel(torch.autograd.Function):
    """Identity forward; all-reduce the input gradient in backward (column-parallel input)."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad


class ReduceFromParallel(torch.autograd.Function):
    """All-reduce the partial sums in forward; identity backward (row-parallel output)."""

    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


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
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    model = nn.Sequential(*[ParallelMLP(args.width, 4 * args.width, world)
                            for _ in range(args.layers)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)  # every rank sees the same batch
    x = torch.randn(args.batch, args.width, generator=gen)
    y = torch.randn(args.batch, args.width, generator=gen)
    for _ in range(args.steps):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        print(f"tensor_parallel: {args.steps} steps on {world} ranks, loss {loss.item():.4f}")
    dist.barrier()  # all ranks done before teardown: gloo aborts now and then (torch 2.13,
    dist.destroy_process_group()  # 'terminate called') when a peer is still tearing down


if __name__ == "__main__":
    main()
