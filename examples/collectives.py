"""Every torch.distributed communication kind, once per step, on gloo (CPU): collectives,
all_to_all with uneven splits, point-to-point (blocking, non-blocking, batched), barrier, a
subgroup, and the functional collectives. Steps are marked with the explicit API, since no
optimizer steps here.

    torchrun --nproc-per-node 2 examples/collectives.py --steps 5
    trace-capture -- torchrun --nproc-per-node 2 examples/collectives.py --steps 5
"""

import argparse

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

try:
    from chakra_tools import capture
except ImportError:  # runs without chakra-tools too
    capture = None


def collectives(rank: int, world: int, sub) -> None:
    """One call of each collective kind; sizes differ per kind so each is recognisable."""
    dist.all_reduce(torch.ones(16))
    dist.reduce(torch.ones(24), dst=0)
    dist.broadcast(torch.ones(32), src=world - 1)
    dist.all_gather([torch.zeros(8) for _ in range(world)], torch.ones(8))
    dist.all_gather_into_tensor(torch.zeros(10 * world), torch.ones(10))
    dist.gather(torch.ones(12), [torch.zeros(12) for _ in range(world)] if rank == 0 else None,
                dst=0)
    dist.scatter(torch.zeros(14), [torch.ones(14) for _ in range(world)] if rank == 0 else None,
                 src=0)
    dist.reduce_scatter(torch.zeros(6), [torch.ones(6) for _ in range(world)])
    dist.reduce_scatter_tensor(torch.zeros(5), torch.ones(5 * world))
    dist.all_to_all([torch.zeros(3) for _ in range(world)], [torch.ones(3) for _ in range(world)])
    # alltoallv: rank r sends r+1+p rows of 4 elements to peer p
    send_rows = [rank + 1 + p for p in range(world)]
    recv_rows = [p + 1 + rank for p in range(world)]
    dist.all_to_all_single(torch.zeros(sum(recv_rows), 4), torch.ones(sum(send_rows), 4),
                           output_split_sizes=recv_rows, input_split_sizes=send_rows)
    dist.all_reduce(torch.ones(20, dtype=torch.float64), group=sub, async_op=True).wait()
    dist.barrier()


def point_to_point(rank: int, world: int) -> None:
    """A ring: blocking send/recv, isend/irecv with a tag, and a batch."""
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    out, inp = torch.ones(40), torch.zeros(40)
    if rank % 2 == 0:
        dist.send(out, dst=nxt)
        dist.recv(inp, src=prv)
    else:
        dist.recv(inp, src=prv)
        dist.send(out, dst=nxt)
    reqs = [dist.isend(torch.ones(44), dst=nxt, tag=7), dist.irecv(torch.zeros(44), src=prv, tag=7)]
    for r in reqs:
        r.wait()
    ops = [dist.P2POp(dist.isend, torch.ones(48, dtype=torch.bfloat16), nxt, tag=3),
           dist.P2POp(dist.irecv, torch.zeros(48, dtype=torch.bfloat16), prv, tag=3)]
    for r in dist.batch_isend_irecv(ops):
        r.wait()


def functional(world: int) -> None:
    g = dist.group.WORLD
    funcol.all_reduce(torch.ones(50), "sum", g).wait()
    funcol.all_gather_tensor(torch.ones(52), 0, g).wait()
    funcol.reduce_scatter_tensor(torch.ones(54 * world), "sum", 0, g).wait()
    funcol.all_to_all_single(torch.ones(56 * world), None, None, g).wait()
    funcol.broadcast(torch.ones(58), 0, g).wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sub = dist.new_group(list(range(world)), group_desc="example_subgroup")
    for _ in range(args.steps):
        collectives(rank, world, sub)
        point_to_point(rank, world)
        functional(world)
        if capture:
            capture.step()
    if rank == 0:
        print(f"collectives: {args.steps} steps on {world} ranks")
    dist.barrier()  # all ranks done before teardown: gloo aborts now and then (torch 2.13,
    dist.destroy_process_group()  # 'terminate called') when a peer is still tearing down


if __name__ == "__main__":
    main()
