"""Calls and sends in flight at once share the uplinks they cross: the timing policy of a probed
cluster (library.LibraryBackend), with each re-timed as others start and end on its links.

Measured on the test bed (2 nodes x 2 ranks, 100 Mbit/s uplinks, gloo): a 512 KiB reduce-scatter
takes 63 ms alone and a 128 KiB all-gather 31 ms; started together, the all-gather ends at 64 ms
and the reduce-scatter at 95 ms, and the two take 101 ms in all, as one after the other would. The
uplink is shared and nothing is lost (TCP's flows split it): processor sharing, not first in first
out, where the reduce-scatter would have ended at 63 ms and the all-gather at 94. FSDP overlaps a
layer's reduce-scatter with the next layer's all-gather all through its backward pass; first in
first out put its all-gathers late and its reduce-scatters early and came out 10-13% short.

The model, per call: its time alone `alone` (the library's rounds on the fabric, each at least its
floor: `LibraryBackend._call`), of which `load[link] / alone` is the share it keeps each shared
link busy (a call whose rounds are floor-bound keeps it little busy; one whose kind reaches 0.87 of
the rate alone keeps it 0.87 busy: what calls get together is the capture's, below). A call
progresses through its time alone at the rate `1 / max(1, the largest sum of those shares over its
links)`: two bandwidth-bound calls on one uplink go at half speed each, two latency-bound ones do
not slow each other. Flows that overlap on a shaped uplink also lose some of its rate to each other
(`Level.shared_efficiency`, read off the capture by sharefit.py: FSDP's reduce-scatters and
all-gathers on the test bed got 85-90% of it together, where the model had given them all of it and
the job came out 11% short on its own cluster). Whenever a call starts or ends on a link, every
call on that link is re-timed. What a shaped link's bucket lets through at once after an idle spell
(`Level.burst_ns`) is held by the link: a call starting after an idle spell takes what it can use
of it alone (its bytes, not its floors), and calls that together ask more of the link than its rate
get the excess from what is left while it lasts, as a token bucket passes traffic at line rate.

Sends are flows too (`LibraryBackend.p2p_call`): two pipeline replicas' sends leaving one machine
at once split its uplink, as TCP's flows do. First in, first out, as the library backend queues
them, let one replica's send take the uplink alone in 19 ms while the other's waited, where on the
test bed each of the two 256 KiB sends took ~40 ms side by side: a 4-stage pipeline on 4 machines
came out 13% short of its real runs, 7% as flows. A send is one stream with no rounds to fall out
of step, so what flows lose to each other is the calls' loss among themselves: sends charged it
too let the fit read a pipeline capture's own shortfall as loss (a tp 2 x pp 2 job on 4 machines
+25%). Sends from one rank to another go in order, each after the one before (gloo's pair of
ranks is one TCP connection). A send larger than the library's window
(`LibraryBackend.p2p_window_bytes`) sends the window at once and the rest when its receive is
posted (`release`): gloo's receiver reads only into the buffer its receive gives.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

from chakra_tools.feed.info import NodeInfo

from .linknet import Scheduler
from .timing import Staggered

Done = Callable[[int], None]


@dataclass
class _Flow:
    """A call or a send on the shared links: its remaining time alone, the share of each link it
    keeps busy, its rate now, and when that rate was set."""

    remaining: float
    shares: dict[tuple, float]
    rate: float = 1.0
    since: float = 0.0
    version: int = 0
    finish: Callable[[int], None] | None = None
    stream: bool = False  # a send: one stream of bytes, no rounds


@dataclass
class _Send:
    """A send on its connection: the bytes that go at once (all of it, or the library's window),
    the rest that waits for its receive (0: none), whether the receive is posted, and when what
    went at once was through (None: not yet)."""

    src: int
    dst: int
    size: int
    rest: int
    arrived: Done
    posted: bool = False
    through: int | None = None


@dataclass
class _Links:
    """The flows on each shared link, when each link last carried nothing, and the links whose
    bucket is carrying what their calls ask beyond the rate: (draining since, ns of bucket per ns)."""

    flows: dict[tuple, set[int]] = field(default_factory=dict)
    idle_since: dict[tuple, float] = field(default_factory=dict)
    draining: dict[tuple, tuple[float, float]] = field(default_factory=dict)


class SharedUplinks(Staggered):
    """A LibraryBackend's calls and sends, re-timed as they share links (the engine sees
    `asynchronous`, calls `bind`, `join_collective`, `start_send` and `release`)."""

    asynchronous = True

    def __init__(self, backend):
        super().__init__(backend)
        self._at: Scheduler | None = None
        self._joining: dict[tuple, tuple[NodeInfo, dict[int, Done]]] = {}
        self._flows: dict[int, _Flow] = {}
        self._links = _Links()
        self._ids = 0
        self._tokens: dict[tuple, float] = {}
        self._connections: dict[tuple[int, int], deque[_Send]] = {}  # (src, dst) -> its sends in order

    def bind(self, at: Scheduler) -> None:
        self._at = at

    # -- collectives ---------------------------------------------------------------------------
    def join_collective(self, key: tuple, group: Sequence[int], rank: int, info: NodeInfo, now: int,
                        done: Done) -> None:
        """gloo's rings advance in lock step: the call starts when its last member arrives."""
        first, dones = self._joining.setdefault(key, (info, {}))
        dones[rank] = done
        if len(dones) < len(group):
            return
        del self._joining[key]
        members = tuple(group)
        if len(members) <= 1:
            for d in dones.values():
                d(now)
            return

        def finished(t: int) -> None:
            for d in dones.values():
                d(t)

        self._start(self.backend._call(first.comm_type or 0, first.comm_size, members), now, finished)

    # -- sends ------------------------------------------------------------------------------------
    def start_send(self, src: int, dst: int, size: int, now: int, arrived: Done) -> _Send | None:
        """A send issued at `now`; `arrived(t)` when its data is through. Sends from one rank to
        another go in order, one after the other (gloo's pair of ranks is one TCP connection).
        Past the library's window the rest waits for its receive: the send returned is released
        (`release`) when it is posted; None where nothing waits."""
        if src == dst:
            arrived(now)
            return None
        rest = size - self.window if self.window is not None and size > self.window else 0
        send = _Send(src, dst, size - rest, rest, arrived)
        queue = self._connections.setdefault((src, dst), deque())
        queue.append(send)
        if len(queue) == 1:
            self._go(send, now)
        return send if rest else None

    def release(self, send: _Send, now: int) -> None:
        """`send`'s receive is posted at `now`: what the window did not carry may follow it."""
        send.posted = True
        if send.through is not None:
            self._rest(send, now, waited=True)

    def _go(self, send: _Send, now: int) -> None:
        """`send` is first on its connection: what goes at once goes."""
        done = self._window_through if send.rest else self._through
        self._start(self.backend.p2p_call(send.src, send.dst, send.size), now, lambda t: done(send, t), stream=True)

    def _window_through(self, send: _Send, t: int) -> None:
        send.through = t
        if send.posted:
            self._rest(send, t, waited=False)

    def _rest(self, send: _Send, now: int, waited: bool) -> None:
        """What the window did not carry: a message of its own (its floor again) where it waited for
        its receive, or where the receive was there in time the same stream going on (its bytes)."""
        alone, loads, waking = self.backend.p2p_call(send.src, send.dst, send.rest)
        if not waited:
            alone, waking = max(0, alone - waking), 0
        self._start((alone, loads, waking), now, lambda t: self._through(send, t), stream=True)

    def _through(self, send: _Send, t: int) -> None:
        """`send` arrived: the next send on its connection goes."""
        queue = self._connections[(send.src, send.dst)]
        queue.popleft()
        send.arrived(t)
        if queue:
            self._go(queue[0], t)

    # -- the shared links -------------------------------------------------------------------------
    def _start(self, call: tuple[int, dict[tuple, int], int], now: int, finished: Done, *,
               stream: bool = False) -> None:
        """A call or a send from `now` (`call`: its ns alone, ns it keeps each shared link busy,
        the ns of its floors), at first on what a shaped link's bucket lets through at once."""
        alone, loads, waking = call
        if alone <= 0:
            finished(now)
            return
        usable = max(0, alone - waking)  # a call's floors are its own: the bucket cannot shorten them
        saved = min((self._spend(link, now, min(busy, usable)) for link, busy in loads.items()), default=0)
        shares = {link: min(1.0, busy / alone) for link, busy in loads.items()}
        self._add(_Flow(float(alone - saved), shares, finish=finished, stream=stream), now)

    def _spend(self, link: tuple, now: int, busy: int) -> int:
        """What the link's bucket lets through at once: it refills while nothing is on the link."""
        burst = self.backend.fabric.levels[link[1]].burst_ns
        if burst <= 0:
            return 0
        idle = 0.0 if self._links.flows.get(link) else now - self._links.idle_since.get(link, 0.0)
        tokens = min(burst, self._tokens.get(link, burst) + max(0.0, idle))
        spent = min(tokens, busy)
        self._tokens[link] = tokens - spent
        return int(spent)

    def _add(self, flow: _Flow, now: int) -> None:
        self._ids += 1
        fid = self._ids
        self._flows[fid] = flow
        flow.since = now
        for link in flow.shares:
            self._links.flows.setdefault(link, set()).add(fid)
        if not flow.shares:  # crosses no shared link: its time alone
            self._at(now + int(round(flow.remaining)), lambda t, fid=fid: self._end(fid, t))
        self._retime(set(flow.shares), now)

    def _end(self, fid: int, t: int) -> None:
        flow = self._flows.pop(fid)
        for link in flow.shares:
            on = self._links.flows[link]
            on.discard(fid)
            if not on:
                self._links.idle_since[link] = t  # the bucket refills from now
        self._retime(set(flow.shares), t)
        if flow.finish is not None:
            flow.finish(t)

    def _retime(self, links: set[tuple], now: int) -> None:
        """Every call on these links at its new rate, its end rescheduled."""
        touched = {f for link in links for f in self._links.flows.get(link, ())}
        for link in links:
            self._settle(link, now)
        load: dict[tuple, float] = {}
        rounds: dict[tuple, float] = {}  # the part of `load` that calls' rounds keep
        for fid in sorted(touched):
            flow = self._flows[fid]
            flow.remaining -= (now - flow.since) * flow.rate
            flow.since = now
            for link in flow.shares:
                if link not in load:
                    self._settle(link, now)
                    on = [self._flows[f] for f in self._links.flows[link]]
                    load[link] = sum(f.shares[link] for f in on)
                    rounds[link] = sum(f.shares[link] for f in on if not f.stream)
                    self._drain(link, load[link], now)
            flow.rate = min(1.0 if link in self._links.draining else self._capacity(link, load[link], rounds[link])
                            for link in flow.shares)
            flow.version += 1
            end = now + max(0.0, flow.remaining) / flow.rate
            version = flow.version
            self._at(int(round(end)), lambda t, fid=fid, version=version: self._due(fid, version, t))

    def _settle(self, link: tuple, now: int) -> None:
        """Take what the bucket carried since the link was last re-timed out of it."""
        got = self._links.draining.pop(link, None)
        if got is not None:
            since, per_ns = got
            self._tokens[link] = max(0.0, self._tokens.get(link, 0.0) - (now - since) * per_ns)

    def _drain(self, link: tuple, load: float, now: int) -> None:
        """Calls that ask more of a link than its rate (`load` above 1) get it from its bucket while
        the bucket lasts, as a token bucket passes traffic at line rate: at their own pace, the
        excess drawn from the bucket; the link is re-timed as it runs dry."""
        tokens = self._tokens.get(link, 0.0)
        if load <= 1.0 or tokens <= 0.0 or self.backend.fabric.levels[link[1]].burst_ns <= 0:
            return
        per_ns = load - 1.0
        self._links.draining[link] = (float(now), per_ns)
        dry = now + int(tokens / per_ns) + 1
        self._at(dry, lambda t, link=link: self._retime({link}, t))

    def _capacity(self, link: tuple, load: float, rounds: float) -> float:
        """The rate a flow on `link` gets when its flows keep it `load` times busy (1: one flow
        keeping it full), `rounds` of that by calls: an even split, less what calls lose to each
        other as their rounds overlap (`Level.shared_efficiency`, reached where two calls each keep
        it full)."""
        if load <= 1.0:
            return 1.0
        efficiency = self.backend.fabric.levels[link[1]].shared_efficiency
        return (1.0 - (1.0 - efficiency) * min(1.0, max(0.0, rounds - 1.0))) / load

    def _due(self, fid: int, version: int, t: int) -> None:
        flow = self._flows.get(fid)
        if flow is not None and flow.version == version:
            self._end(fid, t)

    def describe(self) -> dict:
        return {**super().describe(), "link_sharing": "processor sharing of shared uplinks among calls and sends in flight"}
