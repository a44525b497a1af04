"""The network probe: run it under the job's own launcher, on the machines the job ran on, and it
measures what `trace-convert calibrate --probe` needs to tell latency from bandwidth within a
machine and between machines (core/probe.py describes the document it writes).

    torchrun --nnodes 2 --node-rank $NODE --nproc-per-node 2 --master-addr $MASTER \\
        -m chakra_tools.capture.probe --out traces/job/probe

Every rank takes part; rank 0 writes FOLDER/probe.json (on its own machine). It measures, over
sizes from `--min-size` to `--max-size` (x4 each time):

- one message there and back between two ranks of one machine, and between two machines (the
  first rank of each), half the round trip being one message's time;
- all-reduce, all-gather, reduce-scatter, all-to-all and broadcast on every rank, each started
  together after a barrier and timed to its slowest member's return; and all-reduce, all-gather
  and reduce-scatter on the ranks of the first machine alone (up to 1 MiB), whose rounds never
  leave it;
- one rank adding two buffers (the reduction a collective performs on what it receives);
- on the same pairs, a message after the link sat idle (`IDLE_SEND_S`) to a receiver already
  waiting: what a shaped link lets through at line rate after an idle spell (a token bucket);
  and a message whose receiver posts its receive late (`LATE_S`): how much of it the sender
  could send ahead (gloo's receiver takes a message only into its receive's buffer, so past
  what TCP buffers hold the sender waits: a pipeline stage that posts its receive late waits
  for most of a large gradient).

A size whose single repetition takes longer than `--budget-s` / 20 is the last of its kind, so a
slow network stays a short probe. Needs torch.distributed (any backend the job uses; gloo for
CPU jobs).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist

from chakra_tools.core.probe import FORMAT, PROBE_FILE, TIMED_ALONE_BYTES

FLOAT = 4
#: a repetition's length: short calls are repeated back to back until they fill it
REPETITION_NS = 20e6
MAX_ITERS = 50
#: sizes up to `TIMED_ALONE_BYTES` are timed alone, after an idle pause (latency-bound: they set
#: the floors of a round) ...
IDLE_S = 0.005
#: ... and `ALONE_REPEATS` times as often: between machines a round's floor is the mean of a
#: long-tailed wait (mostly well under a millisecond, now and then 3-4 ms: clusterfit.py); timed 3 x
#: 5 times a size, an all-to-all's came out 0.29-0.51 ms in four probes of one cluster (a job's
#: step at 500 Mbit/s 14% apart), 50 times 0.35-0.45 ms. The samples cost ~7 ms each
ALONE_REPEATS = 10
#: the late receiver's delay (long enough for any window to cross a 10 Mbit/s link), the idle
#: spell before a message to a waiting receiver (long enough to refill a shaper's bucket), sizes
LATE_S = 0.2
IDLE_SEND_S = 0.05
LATE_SIZES = (64 << 10, 256 << 10, 1 << 20)


def _sizes(lo: int, hi: int) -> list[int]:
    out, s = [], max(FLOAT, lo)
    while s <= hi:
        out.append(s)
        s *= 4
    return out


def _parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m chakra_tools.capture.probe",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for probe.json (created)")
    p.add_argument("--min-size", type=int, default=1024, help="smallest message, bytes (default 1 KiB)")
    p.add_argument("--max-size", type=int, default=4 << 20, help="largest message, bytes (default 4 MiB)")
    p.add_argument("--repeats", type=int, default=5, help="repetitions of each measurement")
    p.add_argument("--budget-s", type=float, default=120.0,
                   help="rough bound on the probe's time: sizes stop growing once one repetition takes a 20th of it")
    p.add_argument("--backend", default=None, help="torch.distributed backend (default: gloo, nccl with GPUs)")
    return p.parse_args(argv)


class Probe:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
        hosts: list = [None] * self.world
        dist.all_gather_object(hosts, socket.gethostname())
        self.hosts = hosts
        self.slow_ns = args.budget_s * 1e9 / 20

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def _buf(self, size: int) -> torch.Tensor:
        return torch.ones(max(1, size // FLOAT), device=self.device)

    def _agree(self, stop: bool) -> bool:
        """Every rank's `stop`, OR-ed (rank 0 decides for all)."""
        flag = torch.tensor([1.0 if stop else 0.0], device=self.device)
        dist.broadcast(flag, 0)
        return bool(flag.item())

    def _iterations(self, once_ns: float, src: int) -> int:
        """Calls per repetition, the same on every rank (rank `src` timed one): enough back to
        back to fill `REPETITION_NS`, as nccl-tests averages many calls, so that a short call is
        timed in the steady state a job's calls run in rather than from a barrier's ragged exit."""
        n = torch.tensor([max(1, min(MAX_ITERS, int(REPETITION_NS / max(once_ns, 1.0))))
                          if self.rank == src else 0], device=self.device)
        dist.broadcast(n, src)
        return int(n.item())

    # -- point to point ----------------------------------------------------------------------
    def pairs(self) -> list[tuple[int, int]]:
        """Two ranks of one machine and two of different machines, where the job has them."""
        out = []
        by_host = self._by_host()
        local = next((ranks for ranks in by_host.values() if len(ranks) > 1), None)
        if local:
            out.append((local[0], local[1]))
        other = next((ranks[0] for h, ranks in by_host.items() if h != self.hosts[0]), None)
        if other is not None:
            out.append((0, other))
        return out

    def p2p(self) -> list[dict]:
        samples = []
        for a, b in self.pairs():
            for size in _sizes(self.args.min_size, self.args.max_size):
                buf = self._buf(size)
                times = []
                iters = 1
                for i in range(self.args.repeats + 1):  # the first round sets the connection up
                    dist.barrier()
                    if self.rank == a:
                        t = time.perf_counter_ns()
                        for _ in range(iters):
                            dist.send(buf, b)
                            dist.recv(buf, b)
                        self._sync()
                        times.append((time.perf_counter_ns() - t) / 2 / iters)
                    elif self.rank == b:
                        for _ in range(iters):
                            dist.recv(buf, a)
                            dist.send(buf, a)
                    if i == 0:
                        iters = self._iterations(times[0] * 2 if times else 0.0, src=a)
                if self.rank == a:
                    samples.append({"src": a, "dst": b, "size": buf.numel() * FLOAT, "one_way_ns": times[1:]})
                if self._agree(self.rank == a and min(times[1:]) * 2 > self.slow_ns):
                    break
        return samples

    def paced(self) -> tuple[list[dict], list[dict]]:
        """Per pair and size: a message after an idle spell to a waiting receiver, timed by the
        sender to the receiver's one-float reply (`idle_send`); and the receive's time when posted
        `LATE_S` after the send (`late_recv`, kept on the receiver). `main` gathers both."""
        idle, late = [], []
        ack = self._buf(FLOAT)
        for a, b in self.pairs():
            for size in [s for s in LATE_SIZES if s <= self.args.max_size]:
                buf, after_idle, late_ns = self._buf(size), [], []
                for _ in range(self.args.repeats):
                    dist.barrier()
                    if self.rank == a:
                        time.sleep(IDLE_SEND_S)
                        t = time.perf_counter_ns()
                        dist.send(buf, b)
                        dist.recv(ack, b)
                        self._sync()
                        after_idle.append(time.perf_counter_ns() - t)
                    elif self.rank == b:
                        dist.recv(buf, a)
                        dist.send(ack, a)
                    dist.barrier()
                    if self.rank == a:
                        dist.isend(buf, b).wait()
                    elif self.rank == b:
                        time.sleep(LATE_S)
                        t = time.perf_counter_ns()
                        dist.recv(buf, a)
                        self._sync()
                        late_ns.append(time.perf_counter_ns() - t)
                if self.rank == a:
                    idle.append({"src": a, "dst": b, "size": buf.numel() * FLOAT, "idle_ns": IDLE_SEND_S * 1e9,
                                 "ns": after_idle})
                if self.rank == b:
                    late.append({"src": a, "dst": b, "size": buf.numel() * FLOAT, "delay_ns": LATE_S * 1e9,
                                 "ns": late_ns})
        return idle, late

    # -- collectives -------------------------------------------------------------------------
    def _collective(self, kind: str, size: int, n: int, group=None):
        """(comm_size in the converter's convention, a function that runs it once on `group`
        of `n` ranks)."""
        dev = self.device
        elems = max(1, size // FLOAT)
        if kind == "ALL_REDUCE":
            t = torch.ones(elems, device=dev)
            return elems * FLOAT, lambda: dist.all_reduce(t, group=group)
        if kind == "ALL_GATHER":
            share = max(1, elems // n)
            inp, out = torch.ones(share, device=dev), torch.empty(share * n, device=dev)
            return share * FLOAT, lambda: dist.all_gather_into_tensor(out, inp, group=group)
        if kind == "REDUCE_SCATTER":
            share = max(1, elems // n)
            inp, out = torch.ones(share * n, device=dev), torch.empty(share, device=dev)
            return share * n * FLOAT, lambda: dist.reduce_scatter_tensor(out, inp, group=group)
        if kind == "ALL_TO_ALL":
            share = max(1, elems // n)
            inp, out = torch.ones(share * n, device=dev), torch.empty(share * n, device=dev)
            return share * n * FLOAT, lambda: dist.all_to_all_single(out, inp, group=group)
        t = torch.ones(elems, device=dev)
        return elems * FLOAT, lambda: dist.broadcast(t, 0, group=group)

    def collectives(self) -> list[dict]:
        """Every kind on the whole job; and the ring kinds on the first machine's ranks alone
        (where it has two or more, and the job spans machines), whose rounds stay within it:
        what a round costs there is not what one between machines does."""
        world = list(range(self.world))
        samples = self._sweep(("ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL", "BROADCAST"), world)
        local = next((ranks for ranks in self._by_host().values() if len(ranks) > 1), None)
        if local and len(local) < self.world:
            group = dist.new_group(local)  # every rank makes it, as torch.distributed requires
            samples += self._sweep(("ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER"), local, group,
                                   max_size=min(self.args.max_size, 1 << 20))
        return samples

    def _by_host(self) -> dict[str, list[int]]:
        by_host: dict[str, list[int]] = {}
        for r, h in enumerate(self.hosts):
            by_host.setdefault(h, []).append(r)
        return by_host

    def _sweep(self, kinds, ranks: list[int], group=None, max_size: int | None = None) -> list[dict]:
        samples = []
        member = self.rank in ranks
        for kind in kinds:
            for size in _sizes(self.args.min_size, max_size or self.args.max_size):
                comm_size, run = self._collective(kind, size, len(ranks), group)
                dist.barrier()
                t = time.perf_counter_ns()
                if member:
                    run()  # warm: buffers and connections; and how many calls make one repetition
                    self._sync()
                iters = self._iterations(time.perf_counter_ns() - t, src=ranks[0])
                slowest = (self._alone(run, member) if size <= TIMED_ALONE_BYTES else
                           self._back_to_back(run, member, iters))
                samples.append({"kind": kind, "ranks": list(ranks), "size": comm_size, "ns": slowest})
                if min(slowest) > self.slow_ns:
                    break
        return samples

    def _back_to_back(self, run, member: bool, iters: int) -> list[float]:
        """Each repetition: `iters` calls back to back, per call, timed to the slowest member."""
        mine = []
        for _ in range(self.args.repeats):
            dist.barrier()
            t = time.perf_counter_ns()
            if member:
                for _ in range(iters):
                    run()
                self._sync()
            mine.append((time.perf_counter_ns() - t) / iters if member else 0.0)
        return self._across(mine, dist.ReduceOp.MAX)

    def _alone(self, run, member: bool) -> list[float]:
        """A small call as a job makes it: after a pause in which every rank is idle (its
        compute), timed from each member's own call to its return; the shortest over members,
        the last to arrive, is the call's own time once everyone was there. Back to back, with
        every rank busy, the same calls took 20-30% longer per round on a 2-core host than in a
        job whose ranks mostly wait. `ALONE_REPEATS` times the repetitions: they vary most, and
        cost little."""
        mine = []
        for _ in range(ALONE_REPEATS * self.args.repeats):
            dist.barrier()
            time.sleep(IDLE_S)
            t = time.perf_counter_ns()
            if member:
                run()
                self._sync()
            mine.append(time.perf_counter_ns() - t if member else float("inf"))
        return self._across(mine, dist.ReduceOp.MIN)

    def _across(self, mine: list[float], op) -> list[float]:
        t = torch.tensor(mine, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=op)
        return t.cpu().tolist()

    # -- the reduction -----------------------------------------------------------------------
    def reduce(self) -> list[dict]:
        samples = []
        for size in _sizes(self.args.min_size, self.args.max_size):
            a, b = self._buf(size), self._buf(size)
            times = []
            for _ in range(self.args.repeats + 1):
                t = time.perf_counter_ns()
                a.add_(b)
                self._sync()
                times.append(time.perf_counter_ns() - t)
            samples.append({"size": a.numel() * FLOAT, "ns": times[1:]})
        return samples


def main(argv=None) -> None:
    args = _parse(argv)
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.set_num_threads(1)
    dist.init_process_group(backend)
    probe = Probe(args)
    started = time.monotonic()
    p2p = probe.p2p()
    gathered: list = [None] * probe.world
    dist.all_gather_object(gathered, p2p)
    paced: list = [None] * probe.world
    dist.all_gather_object(paced, probe.paced())
    colls = probe.collectives()
    reduce = probe.reduce() if probe.rank == 0 else []
    if probe.rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        doc = {"format": FORMAT, "backend": backend, "world_size": probe.world, "hosts": probe.hosts,
               "p2p": [s for part in gathered for s in part], "collectives": colls, "reduce": reduce,
               "idle_send": [s for idle, _ in paced for s in idle],
               "late_recv": [s for _, late in paced for s in late]}
        tmp = args.out / f".{PROBE_FILE}.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, args.out / PROBE_FILE)
        nodes = len(set(probe.hosts))
        print(f"probe: {probe.world} ranks on {nodes} machine(s), {len(doc['p2p'])} message and "
              f"{len(colls)} collective measurements in {time.monotonic() - started:.0f} s -> {args.out / PROBE_FILE}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
