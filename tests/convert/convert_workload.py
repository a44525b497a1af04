"""A 2-rank gloo workload traced with plain torch.profiler + ExecutionTraceObserver (no
chakra-tools capture, so no annotations): the converter must recognise the raw c10d::* / gloo:*
ops. Run as `python convert_workload.py OUT_DIR`; writes OUT_DIR/host-<r>.json and device-<r>.json.

The sizes below are what the tests assert (FACTS); each collective has a distinct size so that
it is recognisable in the output.
"""

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

FACTS = {
    "mlp": (16, 64, 32),           # batch, in, out of the Linear layer
    "all_reduce": 1000,            # float32 elements
    "all_gather": 10,              # elements contributed by each rank
    "broadcast": 300,
    "reduce": 200,
    "all_to_all": 8,               # elements each rank sends in all
    "send": 5,                     # rank 0 -> rank 1, tag 7
    "tag": 7,
}


def work(rank: int, world: int, out: str, port: int) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    et = ExecutionTraceObserver()
    et.register_callback(f"{out}/host-{rank}.json")
    b, i, o = FACTS["mlp"]
    model = torch.nn.Linear(i, o)
    x = torch.randn(b, i)
    with profile(activities=[ProfilerActivity.CPU], execution_trace_observer=et,
                 record_shapes=True) as prof:
        model(x).relu().sum().backward()
        t = torch.ones(FACTS["all_reduce"])
        dist.all_reduce(t)
        dist.all_gather([torch.zeros(FACTS["all_gather"]) for _ in range(world)],
                        torch.ones(FACTS["all_gather"]))
        dist.broadcast(torch.ones(FACTS["broadcast"]), 0)
        dist.reduce(torch.ones(FACTS["reduce"]), 0)
        dist.all_to_all_single(torch.empty(FACTS["all_to_all"]), torch.ones(FACTS["all_to_all"]))
        dist.barrier()
        if rank == 0:
            dist.send(torch.ones(FACTS["send"]), 1, tag=FACTS["tag"])
        else:
            dist.recv(torch.empty(FACTS["send"]), 0, tag=FACTS["tag"])
        (t * 2).sum().item()
    prof.export_chrome_trace(f"{out}/device-{rank}.json")
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    mp.spawn(work, args=(2, sys.argv[1], free_port()), nprocs=2)
