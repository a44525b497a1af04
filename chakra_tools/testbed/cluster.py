"""A cluster on one machine: network namespaces as nodes, joined through a switch, every uplink
shaped with `tc`.

Each node is a network namespace with its own address (10.77.0.<i+1>/24 on `eth0`) and its own
host name (a UTS namespace entered by `unshare --uts` for every process it runs), so a job sees
distinct hosts exactly as on a cluster: gloo connects over `eth0`, the capture's manifest records
each rank's host, and ranks of one node talk over that node's loopback. The switch is one more
namespace holding a Linux bridge; node i's veth pair joins its `eth0` to the bridge port `p<i>`.
A node's uplink is shaped in both directions with a token bucket (tbf): on `eth0` (what the node
sends) and on `p<i>` (what it receives), so each node has `rate` each way, full duplex, and the
flows that cross one node's boundary share it. tbf is what this kernel has (no netem): links have
a rate and a queue, not an added delay.

Everything the cluster makes is named after it (`<name>-n<i>`, `<name>-sw`) and its removal is
registered the moment it is made (an ExitStack), so a failed test or a Ctrl-C removes every
namespace, and with it every veth and qdisc, and ends every process started in it. Only traffic
between the namespaces crosses the shaped links; nothing reaches the host's own network.

Needs root, iproute2 (`ip`, `tc`) and util-linux (`unshare`): `unavailable()` says what is
missing, for tests to skip with the reason.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from chakra_tools.replay.fabric import Fabric, Level

SUBNET = "10.77.0"
#: interface names inside the namespaces (each namespace has its own, so they never collide)
NODE_IF, BRIDGE = "eth0", "br0"
_SEQ = itertools.count()


def unavailable() -> str | None:
    """Why a cluster cannot be made here (None where it can): not root, a tool missing, or
    network namespaces refused."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} not found (iproute2 and util-linux make the test bed)"
    probe = f"ctbprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass(frozen=True)
class Shaping:
    """A node uplink's token bucket: `rate_mbit` (Mbit/s, 10^6 bits) each way, a bucket of
    `burst_bytes` (what may leave at line rate after an idle spell) and a queue that holds
    `queue_ms` of traffic at the rate (TCP keeps it full; too short a queue drops and
    retransmits instead of shaping)."""

    rate_mbit: float
    burst_bytes: int | None = None
    queue_ms: float = 200.0

    @property
    def bytes_per_s(self) -> float:
        return self.rate_mbit * 1e6 / 8

    def tbf_args(self) -> list[str]:
        # a few full-size frames and what one timer tick (4 ms) releases: with a smaller bucket
        # the rate holds on an idle host (11.9 of 12.5 MB/s at 100 Mbit/s with 8 KiB) but falls
        # with the load as the qdisc's timer wakes late (a data-parallel job on 8 busy ranks ran
        # 55% slower at 500 Mbit/s with 8 KiB than with this)
        burst = self.burst_bytes or max(16 * 1514, int(self.bytes_per_s / 250))
        limit = max(int(self.bytes_per_s * self.queue_ms / 1000), 4 * burst)
        return ["tbf", "rate", f"{self.rate_mbit:g}mbit", "burst", str(burst), "limit", str(limit)]


def _run(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


class Cluster:
    """`nodes` namespaces behind one switch, each uplink shaped to `uplink` (None: unshaped).

    >>> # with Cluster(2, Shaping(100)) as c:               # doctest: +SKIP
    >>> #     c.run(0, ["ping", "-c1", c.address(1)])
    """

    def __init__(self, nodes: int, uplink: Shaping | None, *, name: str | None = None):
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, got {nodes}")
        self.nodes, self.uplink = nodes, uplink
        self.name = name or f"ctb{os.getpid() % 100000}x{next(_SEQ)}"
        self._stack = contextlib.ExitStack()
        self._procs: list[subprocess.Popen] = []

    # -- names -----------------------------------------------------------------------------------
    def namespace(self, node: int) -> str:
        return f"{self.name}-n{node}"

    @property
    def switch(self) -> str:
        return f"{self.name}-sw"

    def address(self, node: int) -> str:
        return f"{SUBNET}.{node + 1}"

    def hostname(self, node: int) -> str:
        return f"{self.name}-node{node}"

    def fabric(self, ranks_per_node: int, within: Level) -> Fabric:
        """This cluster as the replay's fabric: `within` for a node's ranks (its loopback, which
        no shaping sets: what a probe measured) and, across nodes, each node's shaped uplink,
        shared by its ranks, at the tbf rate with its bucket (as time at that rate) and no added
        latency (tbf adds none). Written as an InfraGraph with
        `replay.infrawrite.fabric_infragraph(cluster.fabric(...))`."""
        if self.uplink is None:
            raise ValueError("an unshaped cluster's uplinks have no rate to describe: give it a Shaping")
        burst = float(self.uplink.tbf_args()[4]) / self.uplink.bytes_per_s * 1e9
        across = Level("inter-node", self.nodes, 0.0, 1e9 / self.uplink.bytes_per_s, shared=True, burst_ns=burst)
        return Fabric((replace(within, npus=ranks_per_node), across))

    # -- making and removing ---------------------------------------------------------------------
    def __enter__(self) -> "Cluster":
        try:
            self._netns(self.switch)
            _run(["ip", "-n", self.switch, "link", "add", BRIDGE, "type", "bridge"])
            _run(["ip", "-n", self.switch, "link", "set", BRIDGE, "up"])
            for i in range(self.nodes):
                self._node(i)
        except BaseException:
            self._stack.close()
            raise
        self._stack.callback(self._stop_processes)
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def _netns(self, ns: str) -> None:
        _run(["ip", "netns", "add", ns])
        self._stack.callback(subprocess.run, ["ip", "netns", "del", ns], capture_output=True)
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def _node(self, i: int) -> None:
        ns, port = self.namespace(i), f"p{i}"
        self._netns(ns)
        _run(["ip", "link", "add", NODE_IF, "netns", ns, "type", "veth", "peer", "name", port,
              "netns", self.switch])
        _run(["ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", NODE_IF])
        _run(["ip", "-n", ns, "link", "set", NODE_IF, "up"])
        _run(["ip", "-n", self.switch, "link", "set", port, "master", BRIDGE])
        _run(["ip", "-n", self.switch, "link", "set", port, "up"])
        if self.uplink is not None:
            self.shape(i, self.uplink)

    def shape(self, node: int, uplink: Shaping) -> None:
        """Shape (or reshape) node `node`'s uplink, both ways."""
        for ns, dev in ((self.namespace(node), NODE_IF), (self.switch, f"p{node}")):
            _run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", *uplink.tbf_args()])

    # -- processes -------------------------------------------------------------------------------
    def command(self, node: int, argv: Sequence[str]) -> list[str]:
        """`argv` as run on node `node`: in its network namespace, under its own host name."""
        host = self.hostname(node)
        return ["ip", "netns", "exec", self.namespace(node), "unshare", "--uts", "--",
                "sh", "-c", f'hostname {host} && exec "$@"', "sh", *argv]

    def popen(self, node: int, argv: Sequence[str], *, env: dict | None = None,
              **kw) -> subprocess.Popen:
        """Start `argv` on node `node` (its own process group, ended when the cluster is)."""
        proc = subprocess.Popen(self.command(node, argv), env=env, start_new_session=True, **kw)
        self._procs.append(proc)
        return proc

    def run(self, node: int, argv: Sequence[str], *, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        proc = self.popen(node, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def _stop_processes(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                _kill_group(proc)


def _kill_group(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """SIGTERM the process's group, SIGKILL what is left after `grace_s`."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_all(procs: Sequence[subprocess.Popen], timeout_s: float) -> list[int]:
    """Every process's exit code; the ones still running after `timeout_s` are killed (their
    groups) and reported as None."""
    deadline = time.monotonic() + timeout_s
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    _kill_group(q)
            codes.append(None)
    return codes


def free_port(base: int = 29500) -> int:
    """A master port for a job: unique per process and cluster (namespaces have their own port
    spaces, so only clusters of this process could collide)."""
    return base + (os.getpid() * 7 + next(_SEQ)) % 2000


REPO_ROOT = Path(__file__).resolve().parents[2]
