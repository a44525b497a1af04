"""Fully sharded data parallel training (FSDP2, `fully_shard`) over gloo (CPU), one process per rank.

Each Linear is its own FSDP unit: its parameters live sharded, are all-gathered before its
forward and again before its backward, and its gradients are reduce-scattered back to the shards.

    torchrun --nproc-per-node 2 examples/fsdp.py --steps 8
    trace-capture -- torchrun --nproc-per-node 2 examples/fsdp.py --steps 8
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    dims = [64] + [args.width] * args.layers + [1]
    layers = [m for a, b in zip(dims, dims[1:]) for m in (nn.Linear(a, b), nn.ReLU())][:-1]
    model = nn.Sequential(*layers)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(rank)
    x, y = torch.randn(args.batch, 64, generator=gen), torch.randn(args.batch, 1, generator=gen)
    for _ in range(args.steps):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        print(f"fsdp: {args.steps} steps on {dist.get_world_size()} ranks, loss {loss.item():.4f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
