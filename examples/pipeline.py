"""Pipeline parallelism over 2 ranks (gloo, CPU): each rank holds one stage of an MLP; activations
go forward and gradients backward with send/recv, several microbatches per step (GPipe order:
all forwards, then all backwards).

    torchrun --nproc-per-node 2 examples/pipeline.py --steps 6
    trace-capture -- torchrun --nproc-per-node 2 examples/pipeline.py --steps 6
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn


def stage(rank: int, world: int, width: int) -> nn.Module:
    """Stage `rank` of `world`: the last one ends in the 1-wide output layer."""
    torch.manual_seed(rank)
    layers = [nn.Linear(width, width), nn.ReLU()]
    if rank == world - 1:
        layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def forward_all(model, rank, world, micro, x, y, width):
    """Forward every microbatch; returns what backward needs (inputs, outputs)."""
    saved = []
    for m in range(micro):
        if rank == 0:
            inp = x[m]
        else:
            inp = torch.empty(x[m].shape[0], width)
            dist.recv(inp, src=rank - 1, tag=m)
            inp.requires_grad_()
        out = model(inp)
        if rank < world - 1:
            dist.send(out.detach(), dst=rank + 1, tag=m)
        saved.append((inp, out))
    return saved


def backward_all(saved, rank, world, y, width):
    """Backward every microbatch in reverse; the last stage starts from the loss."""
    loss_sum = 0.0
    for m in reversed(range(len(saved))):
        inp, out = saved[m]
        if rank == world - 1:
            loss = nn.functional.mse_loss(out, y[m]) / len(saved)
            loss.backward()
            loss_sum += loss.item()
        else:
            grad = torch.empty_like(out)
            dist.recv(grad, src=rank + 1, tag=100 + m)
            out.backward(grad)
        if rank > 0:
            dist.send(inp.grad, dst=rank - 1, tag=100 + m)
    return loss_sum


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--micro", type=int, default=4, help="microbatches per step")
    parser.add_argument("--batch", type=int, default=16, help="rows per microbatch")
    parser.add_argument("--width", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = stage(rank, world, args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)
    x = [torch.randn(args.batch, args.width, generator=gen) for _ in range(args.micro)]
    y = [torch.randn(args.batch, 1, generator=gen) for _ in range(args.micro)]
    for _ in range(args.steps):
        opt.zero_grad()
        saved = forward_all(model, rank, world, args.micro, x, y, args.width)
        loss = backward_all(saved, rank, world, y, args.width)
        opt.step()
    if rank == world - 1:
        print(f"pipeline: {args.steps} steps x {args.micro} microbatches on {world} ranks, "
              f"loss {loss:.4f}")
    dist.barrier()  # all ranks done before teardown: gloo aborts now and then (torch 2.13,
    dist.destroy_process_group()  # 'terminate called') when a peer is still tearing down


if __name__ == "__main__":
    main()
