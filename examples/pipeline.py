"""Pipeline parallelism (gloo, CPU): each rank holds one stage of an MLP; activations go forward
and gradients backward with send/recv, several microbatches per step (GPipe order: all forwards,
then all backwards). With `--stages S`, world/S pipelines run side by side as data-parallel
replicas (each on its own batch), and each stage all-reduces its gradients over its replicas
(one flat bucket, as DDP; over a group of one where S is the world size, as DDP at one rank).
Ranks follow Megatron-LM's order: the data-parallel index varies fastest, so stage s holds ranks
s*dp .. s*dp+dp-1 and rank r's next stage is r + dp. Without `--stages` every rank is a stage and
there is no gradient all-reduce.

    torchrun --nproc-per-node 2 examples/pipeline.py --steps 6
    trace-capture -- torchrun --nproc-per-node 4 examples/pipeline.py --stages 2   # pp 2 x dp 2
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn

from replicas import average_gradients


def stage(rank: int, world: int, width: int) -> nn.Module:
    """Stage `rank` of `world`: the last one ends in the 1-wide output layer."""
    torch.manual_seed(rank)
    layers = [nn.Linear(width, width), nn.ReLU()]
    if rank == world - 1:
        layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def forward_all(model, rank, stage_of, stages, dp, micro, x, width):
    """Forward every microbatch; returns what backward needs (inputs, outputs)."""
    saved = []
    for m in range(micro):
        if stage_of == 0:
            inp = x[m]
        else:
            inp = torch.empty(x[m].shape[0], width)
            dist.recv(inp, src=rank - dp, tag=m)
            inp.requires_grad_()
        out = model(inp)
        if stage_of < stages - 1:
            dist.send(out.detach(), dst=rank + dp, tag=m)
        saved.append((inp, out))
    return saved


def backward_all(saved, rank, stage_of, stages, dp, y):
    """Backward every microbatch in reverse; the last stage starts from the loss."""
    loss_sum = 0.0
    for m in reversed(range(len(saved))):
        inp, out = saved[m]
        if stage_of == stages - 1:
            loss = nn.functional.mse_loss(out, y[m]) / len(saved)
            loss.backward()
            loss_sum += loss.item()
        else:
            grad = torch.empty_like(out)
            dist.recv(grad, src=rank + dp, tag=100 + m)
            out.backward(grad)
        if stage_of > 0:
            dist.send(inp.grad, dst=rank - dp, tag=100 + m)
    return loss_sum


def replica_groups(world: int, dp: int):
    """Each stage's data-parallel group (every rank creates every group, as torch requires):
    this rank's (None: the world)."""
    mine = None
    for s in range(world // dp):
        group = dist.new_group(list(range(s * dp, s * dp + dp))) if dp < world else None
        if dist.get_rank() // dp == s:
            mine = group
    return mine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--micro", type=int, default=4, help="microbatches per step")
    parser.add_argument("--batch", type=int, default=16, help="rows per microbatch")
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--stages", type=int, default=0,
                        help="pipeline stages, the rest data-parallel replicas with a gradient all-reduce "
                             "(default: every rank a stage, no replicas); the world must be a multiple")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    stages = args.stages or world
    if world % stages:
        raise SystemExit(f"--stages {stages} does not divide the world size {world}")
    dp = world // stages
    stage_of = rank // dp
    group = replica_groups(world, dp) if args.stages else None
    model = stage(stage_of, stages, args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank % dp)  # each replica its own batch
    x = [torch.randn(args.batch, args.width, generator=gen) for _ in range(args.micro)]
    y = [torch.randn(args.batch, 1, generator=gen) for _ in range(args.micro)]
    for _ in range(args.steps):
        opt.zero_grad()
        saved = forward_all(model, rank, stage_of, stages, dp, args.micro, x, args.width)
        loss = backward_all(saved, rank, stage_of, stages, dp, y)
        if args.stages:
            average_gradients(model, group, dp)
        opt.step()
    if rank == world - 1:
        print(f"pipeline: {args.steps} steps x {args.micro} microbatches on {stages} stages x {dp} "
              f"replicas, loss {loss:.4f}")
    dist.barrier()  # all ranks done before teardown: gloo aborts now and then (torch 2.13,
    dist.destroy_process_group()  # 'terminate called') when a peer is still tearing down


if __name__ == "__main__":
    main()
