"""A network of devices and links that messages cross one link at a time, queueing where they meet.

The congestion-aware model (`trace-replay --network-model congestion-aware`), as ASTRA-sim's
congestion_aware analytical backend defines it: a message is routed over the links of a graph of
devices (NPUs, switches); each link is a first-in-first-out queue that serves one message at a
time, holding it `size / bandwidth` ns (its serialization) and delivering it to the next device
`latency + size / bandwidth` ns after it began (store and forward: the next link starts only once
the whole message is there). Times are integer ns, truncated as ASTRA-sim truncates (the sum for
the arrival, the serialization alone for the link's release). Two messages on one link take twice
as long as one; a message alone takes its hops' sum.

Graphs come from ASTRA-sim's network files (`of_network`: Ring, FullyConnected and Switch
dimensions; several dimensions, which ASTRA-sim's backend refuses, are joined with
dimension-order routing) or from any list of links (`of_edges`: an InfraGraph, a fitted cluster).

>>> net = of_network(NetworkConfig((Dim("Switch", 4, 50.0, 500.0),)))
>>> [net.name(d) for d in net.route(0, 3)]
['npu 0', 'switch 0', 'npu 3']
>>> net.alone_ns(0, 3, 1 << 20)   # two hops of 500 + 1 MiB / (50 GiB/s) each
40062
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from math import prod
from typing import Callable, Iterable, Sequence

from chakra_tools.core import native
from chakra_tools.core.errors import InputError

from .config import Dim, NetworkConfig


@dataclass(frozen=True)
class Edge:
    """A full-duplex link between two named devices: one queue each way, `bytes_per_ns` and
    `latency_ns` each. `source` says where its bandwidth came from (the document, an annotation,
    the table of known link kinds), for the notes a replay prints."""

    a: str
    b: str
    bytes_per_ns: float
    latency_ns: float
    source: str = ""


@dataclass(slots=True)
class Link:
    """One direction of a link: its ends, rate and latency, and its place (`index`) in the
    network's `LinkState`, which holds when its queue is next free and how long it has been busy
    serializing messages."""

    src: int
    dst: int
    bytes_per_ns: float
    latency_ns: float
    #: why the link has no rate (a document that gives none): a message that crosses it is refused
    refused: str = ""
    index: int = -1

    def delivery_ns(self, size: int) -> int:
        return int(self.latency_ns + size / self.bytes_per_ns)


Scheduler = Callable[[int, Callable[[int], None]], None]


@dataclass
class LinkNetwork:
    """Devices 0..n-1 (the first `npus` are the NPUs, rank r on NPU r) and directed links, with
    the route of every NPU pair (`router(src, dst)` -> device path, cached)."""

    npus: int
    names: list[str]
    links: dict[tuple[int, int], Link]
    router: Callable[[int, int], list[int]]
    source: str = ""
    notes: list[str] = field(default_factory=list)
    #: False: every message takes its hops' sum as if its links were idle (congestion-unaware on
    #: the same graph and routes)
    queues: bool = True
    _routes: dict[tuple[int, int], tuple[Link, ...]] = field(default_factory=dict, repr=False)
    state: object = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for i, link in enumerate(self.links.values()):
            link.index = i
        self.reset()

    def name(self, device: int) -> str:
        return self.names[device]

    def route(self, src: int, dst: int) -> list[int]:
        return self.router(src, dst)

    def path(self, src: int, dst: int) -> tuple[Link, ...]:
        got = self._routes.get((src, dst))
        if got is None:
            devices = self.router(src, dst)
            got = tuple(self.links[(a, b)] for a, b in zip(devices, devices[1:]))
            for link in got:
                if link.refused:  # refused every time it is asked for: never cached
                    raise InputError(f"{link.refused} (rank {src} to rank {dst} crosses it: "
                                     f"{self.names[link.src]} -> {self.names[link.dst]})")
            self._routes[(src, dst)] = got
        return got

    def alone_ns(self, src: int, dst: int, size: int) -> int:
        """A message's time on idle links: the sum of its hops."""
        return sum(link.delivery_ns(size) for link in self.path(src, dst))

    def send(self, at: Scheduler, now: int, src: int, dst: int, size: int,
             arrived: Callable[[int], None]) -> None:
        """Put a `size`-byte message from NPU `src` to `dst` on the network at `now`; `arrived(t)`
        learns when its last byte reaches `dst`. Must be called in nondecreasing `now`, as a
        discrete-event loop does (each hop after the first is an event of `at(time, callback)`),
        so a link serves messages in the order they reach it. `arrived` is told as the message
        starts its last hop, before `t`: whatever it starts must be scheduled no earlier than `t`
        (one event fewer per message)."""
        hops = self._routes.get((src, dst)) or (self.path(src, dst) if src != dst else ())
        if not hops or size <= 0:
            at(now + sum(int(link.latency_ns) for link in hops), arrived)
            return
        if not self.queues:
            for link in hops:
                self.state.idle(link.index, size)
            arrived(now + sum(link.delivery_ns(size) for link in hops))
            return
        self._hop(at, hops, 0, size, now, arrived)

    def _hop(self, at: Scheduler, hops: tuple[Link, ...], i: int, size: int, t: int,
             arrived: Callable[[int], None]) -> None:
        """The message reaches hop i's link at `t`: it waits for the link, then takes it (each
        further hop an event at its arrival there; the last one tells `arrived` at once)."""
        end = self.state.hop(hops[i].index, t, size)
        if i + 1 == len(hops):
            arrived(end)
        else:
            at(end, lambda t2: self._hop(at, hops, i + 1, size, t2, arrived))

    def reset(self) -> None:
        """Every link idle and unused (a new replay)."""
        links = list(self.links.values())
        self.state = make_state([l.bytes_per_ns for l in links], [l.latency_ns for l in links])

    def busy(self) -> list[dict]:
        """Each link that carried something: its ends, messages and ns busy, busiest first."""
        rows = []
        for link in self.links.values():
            busy_ns, messages = self.state.usage(link.index)
            if messages:
                rows.append({"from": self.names[link.src], "to": self.names[link.dst], "messages": messages,
                             "busy_ns": busy_ns})
        return sorted(rows, key=lambda r: (-r["busy_ns"], r["from"], r["to"]))


class LinkStateTwin:
    """The links' queues in Python: the reference `_linkloop.LinkState` (compiled) is tested
    against, and what runs where it is not built (or CHAKRA_TOOLS_PURE_PYTHON is set)."""

    def __init__(self, bytes_per_ns: Sequence[float], latency_ns: Sequence[float]):
        self.bytes_per_ns, self.latency_ns = list(bytes_per_ns), list(latency_ns)
        n = len(self.bytes_per_ns)
        self.free_ns, self.busy_ns, self.messages = [0] * n, [0] * n, [0] * n

    def hop(self, k: int, t: int, size: int) -> int:
        """A message takes link k from t, or when its queue is free: when it reaches the far end."""
        free = self.free_ns[k]
        start = t if t > free else free
        per_ns = self.bytes_per_ns[k]
        ser = int(size / per_ns)
        self.free_ns[k] = start + ser
        self.busy_ns[k] += ser
        self.messages[k] += 1
        return start + int(self.latency_ns[k] + size / per_ns)

    def idle(self, k: int, size: int) -> None:
        """A message counted on link k as if it had the link to itself (congestion-unaware)."""
        self.busy_ns[k] += int(size / self.bytes_per_ns[k])
        self.messages[k] += 1

    def usage(self, k: int) -> tuple[int, int]:
        return self.busy_ns[k], self.messages[k]


#: the compiled loop (`_linkloop.c`: LinkState, and congestion's step phases), None where not built
COMPILED = native.load("chakra_tools.replay._linkloop")


def make_state(bytes_per_ns: Sequence[float], latency_ns: Sequence[float]):
    """The links' queues: compiled where built, else the Python twin."""
    return (COMPILED.LinkState if COMPILED is not None else LinkStateTwin)(bytes_per_ns, latency_ns)


# -- ASTRA-sim's topologies ---------------------------------------------------------------------------
def of_network(net: NetworkConfig) -> LinkNetwork:
    """The links of an ASTRA-sim network file. Per dimension, each line of NPUs that differ only
    there is one building block: a Ring (links both ways between neighbours; a message goes the
    shorter way, clockwise on a tie), a FullyConnected (a link between every ordered pair) or a
    Switch (each NPU linked both ways to the line's own switch device). A message between NPUs
    that differ on several dimensions crosses them innermost first (dimension-order routing), as
    one chunk, stored and forwarded at every device on the way."""
    dims = net.dims
    n = prod(d.npus for d in dims)
    names = [f"npu {r}" for r in range(n)]
    links: dict[tuple[int, int], Link] = {}
    switch_of: dict[tuple[int, tuple[int, ...]], int] = {}  # (dim, the line's other coordinates) -> device

    def connect(a: int, b: int, dim: Dim) -> None:
        links[(a, b)] = Link(a, b, dim.bytes_per_ns, dim.latency_ns)

    strides = [prod(d.npus for d in dims[:i]) for i in range(len(dims))]
    for i, dim in enumerate(dims):
        for base in range(n):
            if (base // strides[i]) % dim.npus:
                continue  # one line per base NPU whose coordinate along i is 0
            line = [base + k * strides[i] for k in range(dim.npus)]
            if dim.npus == 1:
                continue
            if dim.topology == "Ring":
                for k in range(dim.npus):
                    a, b = line[k], line[(k + 1) % dim.npus]
                    if a != b:
                        connect(a, b, dim)
                        connect(b, a, dim)
            elif dim.topology == "FullyConnected":
                for a in line:
                    for b in line:
                        if a != b:
                            connect(a, b, dim)
            elif dim.topology == "Switch":
                sw = len(names)
                names.append(f"switch {len(switch_of)}" if len(dims) == 1 else f"switch {i}.{len(switch_of)}")
                switch_of[(i, _rest(net.address(base), i))] = sw
                for a in line:
                    connect(a, sw, dim)
                    connect(sw, a, dim)
            else:
                raise InputError(f"{net.source or 'network'}: dimension {i}: topology {dim.topology!r} "
                                 "has no congestion-aware model (Ring, FullyConnected, Switch)")

    def within(i: int, a: int, b: int) -> list[int]:
        """The route from a to b, which differ only along dimension i (a's device first)."""
        dim = dims[i]
        if dim.topology == "FullyConnected":
            return [a, b]
        if dim.topology == "Switch":
            return [a, switch_of[(i, _rest(net.address(a), i))], b]
        ca, cb = net.address(a)[i], net.address(b)[i]
        clockwise = (cb - ca) % dim.npus
        step = -1 if dim.npus - clockwise < clockwise else 1
        path, c = [a], ca
        while c != cb:
            c = (c + step) % dim.npus
            path.append(a + (c - ca) * strides[i])
        return path

    def router(src: int, dst: int) -> list[int]:
        path, here = [src], src
        target = net.address(dst)
        for i in range(len(dims)):
            coord = net.address(here)[i]
            if coord != target[i]:
                nxt = here + (target[i] - coord) * strides[i]
                path.extend(within(i, here, nxt)[1:])
                here = nxt
        return path

    return LinkNetwork(n, names, links, router, source=net.source or "")


def _rest(address: tuple[int, ...], i: int) -> tuple[int, ...]:
    return address[:i] + address[i + 1:]


# -- any graph ----------------------------------------------------------------------------------------
def of_edges(npus: Sequence[str], edges: Iterable[Edge], source: str = "", notes: Sequence[str] = ()) -> LinkNetwork:
    """A network of named devices: `npus` in rank order, then every other device the edges name.
    A message takes a path of fewest links; where k next hops lead on equally, it takes the
    (dst mod k)-th of them in their order of appearance: destination-mod-k routing, the fat
    tree's classic deterministic choice, which gives every destination of a rack its own uplink
    (and the same pair always the same path)."""
    names = list(npus)
    index = {name: i for i, name in enumerate(names)}
    if len(index) != len(names):
        raise InputError(f"{source}: an NPU is named twice")
    links: dict[tuple[int, int], Link] = {}
    for e in edges:
        for name in (e.a, e.b):
            if name not in index:
                index[name] = len(names)
                names.append(name)
        a, b = index[e.a], index[e.b]
        if a == b:
            continue
        for x, y in ((a, b), (b, a)):
            if (x, y) not in links:  # parallel links of one pair: the first is taken, as one
                links[(x, y)] = Link(x, y, e.bytes_per_ns if e.bytes_per_ns > 0 else 1.0, e.latency_ns,
                                     refused="" if e.bytes_per_ns > 0 else e.source or "a link without a bandwidth")
    adjacent: list[list[int]] = [[] for _ in names]
    for a, b in links:
        adjacent[a].append(b)
    distance_to: dict[int, list[int]] = {}

    def distances(dst: int) -> list[int]:
        got = distance_to.get(dst)
        if got is None:
            got = [-1] * len(names)
            got[dst] = 0
            queue = deque([dst])
            while queue:
                d = queue.popleft()
                for p in adjacent[d]:  # links are both ways: a neighbour of d reaches d
                    if got[p] < 0:
                        got[p] = got[d] + 1
                        queue.append(p)
            distance_to[dst] = got
        return got

    def router(src: int, dst: int) -> list[int]:
        dist = distances(dst)
        if dist[src] < 0:
            raise InputError(f"{source}: no path from {names[src]} to {names[dst]}")
        path, here = [src], src
        while here != dst:
            nearer = [b for b in adjacent[here] if dist[b] == dist[here] - 1]
            here = nearer[dst % len(nearer)]
            path.append(here)
        return path

    n = len(npus)
    return LinkNetwork(n, names, links, router, source=source, notes=list(notes))


def run_alone(net: LinkNetwork, messages: Sequence[tuple[int, int, int, int]]) -> list[int]:
    """Arrival times of (start ns, src, dst, bytes) messages on `net`, with a loop of its own
    (for tests and one-off questions; a replay runs them in the engine's loop)."""
    heap: list = []
    seq = [0]

    def at(t: int, fn: Callable[[int], None]) -> None:
        seq[0] += 1
        heapq.heappush(heap, (t, seq[0], fn))

    ends = [0] * len(messages)
    order = sorted(range(len(messages)), key=lambda i: messages[i][0])
    for i in order:
        t, s, d, b = messages[i]
        at(t, lambda now, s=s, d=d, b=b, i=i: net.send(at, now, s, d, b, lambda end, i=i: ends.__setitem__(i, end)))
    while heap:
        t, _, fn = heapq.heappop(heap)
        fn(t)
    return ends
