"""DDP on gloo, started the way many tutorials start it: `torch.multiprocessing.spawn` from one
process, each worker joining the group with the rank it was handed (no torchrun, no RANK in the
environment); with --fork, `multiprocessing.Process` workers of the default (fork) start method.
`trace-capture examples/spawn_ddp.py` captures every worker as its own rank.

    python examples/spawn_ddp.py [--world 2] [--steps 6] [--fork]
"""

from __future__ import annotations

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank: int, world: int, steps: int) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        loss = model(torch.randn(32, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--fork", action="store_true", help="multiprocessing.Process workers, forked")
    args = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    torch.set_num_threads(1)
    if args.fork:
        workers = [mp.get_context("fork").Process(target=worker, args=(r, args.world, args.steps))
                   for r in range(args.world)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if any(w.exitcode for w in workers):
            raise SystemExit(f"a worker failed: exit codes {[w.exitcode for w in workers]}")
    else:
        mp.spawn(worker, args=(args.world, args.steps), nprocs=args.world)
