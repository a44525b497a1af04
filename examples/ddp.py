"""Data parallel training with DistributedDataParallel over gloo (CPU), one process per rank.

    torchrun --nproc-per-node 2 examples/ddp.py --steps 8
    trace-capture -- torchrun --nproc-per-node 2 examples/ddp.py --steps 8
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--fail-rank", type=int, default=-1, help="this rank raises (tests)")
    parser.add_argument("--fail-at", type=int, default=-1, help="at this step (tests)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, args.width), nn.ReLU(), nn.Linear(args.width, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    x, y = torch.randn(args.batch, 64, generator=gen), torch.randn(args.batch, 1, generator=gen)
    for step in range(args.steps):
        if step == args.fail_at and rank == args.fail_rank:
            raise RuntimeError(f"rank {rank} failing on purpose at step {step}")
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        print(f"ddp: {args.steps} steps on {dist.get_world_size()} ranks, loss {loss.item():.4f}")
    dist.barrier()  # all ranks done before teardown: gloo aborts now and then (torch 2.13,
    dist.destroy_process_group()  # 'terminate called') when a peer is still tearing down


if __name__ == "__main__":
    main()
