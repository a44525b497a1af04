"""Data-parallel replicas for the model-parallel examples (pipeline.py, tensor_parallel.py): the
gradients a rank holds averaged with the ranks that hold the same part of the model, in one
all-reduce of a flat bucket, as DDP does."""

import torch
import torch.distributed as dist


def average_gradients(model, group, replicas: int) -> None:
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.flatten() for g in grads]) / replicas
    dist.all_reduce(flat, group=group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
