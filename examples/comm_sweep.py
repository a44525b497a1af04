"""Collectives and send/receive of several sizes, on gloo (CPU): what `trace-convert calibrate`
fits a network to (latency from the small messages, bandwidth from the large ones).

    torchrun --nproc-per-node 2 examples/comm_sweep.py --steps 4
    trace-capture --active 3 -- torchrun --nproc-per-node 2 examples/comm_sweep.py
"""

import argparse

import torch
import torch.distributed as dist

try:
    from chakra_tools import capture
except ImportError:  # runs without chakra-tools too
    capture = None

#: float32 elements per message: 1 KiB to 1 MiB
SIZES = (256, 4096, 32768, 262144)


def sweep(rank: int, world: int) -> None:
    """Each kind at each size; the peers of the send/receive ring alternate who sends first."""
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for n in SIZES:
        dist.all_reduce(torch.ones(n))
        dist.all_gather_into_tensor(torch.zeros(n * world), torch.ones(n))
        dist.reduce_scatter_tensor(torch.zeros(n), torch.ones(n * world))
        if world > 1:
            out, inp = torch.ones(n), torch.zeros(n)
            if rank % 2 == 0:
                dist.send(out, dst=nxt)
                dist.recv(inp, src=prv)
            else:
                dist.recv(inp, src=prv)
                dist.send(out, dst=nxt)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for _ in range(args.steps):
        sweep(rank, world)
        if capture:
            capture.step()
    if rank == 0:
        print(f"comm_sweep: {args.steps} steps on {world} ranks")
    dist.barrier()  # all ranks done before teardown (see examples/ddp.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
