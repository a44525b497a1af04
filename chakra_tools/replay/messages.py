"""Sends and receives in a replay: each pairs with its other half on (src, dst, tag), in the
order each side issued them, and finishes when its timing policy says.

- Eager (the model): the data leaves at issue and arrives `eager_send_ns` later, when the send
  finishes; the receive finishes at the later of its posting and the arrival.
- Rendezvous (a capture's gloo or NCCL send, `eager_send_ns` None): both halves wait for each
  other, then each takes its `rendezvous_ns`.
- Asynchronous (a policy that runs its own events: congestion-aware, shared uplinks): the message
  reports its own arrival through the policy. A policy may hold part of a send until its receive
  is posted (`start_send` returns a handle; `release(handle, now)` when the receive is there).

An absent peer (`Replayer(absent_peers=True)`) posted its half when this one was issued.
"""

from __future__ import annotations

from typing import NamedTuple

from chakra_tools.core.errors import InputError
from chakra_tools.feed.info import NodeInfo

from .resources import RankState

IN_FLIGHT = -1  # Posted.arrival_ns of an asynchronous send whose data has not arrived yet


class Posted(NamedTuple):
    """A send or a receive issued and waiting for its other half (a timing policy's member)."""

    rank: int
    nid: int
    info: NodeInfo
    issued_ns: int
    ev: int
    arrival_ns: int | None = None  # an eager send: when its data reaches the receiver


class Messages:
    """The sends and receives of one replay. `e` is its engine.Replayer (not imported: the engine
    holds this), whose clock (`_now`), scheduler (`_at`), result, timing policy and ranks they
    use; `asynchronous`: the policy's messages report their own arrival."""

    def __init__(self, e, asynchronous: bool):
        self.e = e
        self.asynchronous = asynchronous
        self.sends: dict[tuple, list[Posted]] = {}  # (src, dst, tag) -> unmatched sends
        self.recvs: dict[tuple, list[Posted]] = {}  # (src, dst, tag) -> unmatched receives
        self.landed: dict[tuple[int, int], int] = {}  # (rank, send id) -> its data's arrival (async)
        # (rank, send id) -> the send and the receive posted before its data arrived (async)
        self.waiting: dict[tuple[int, int], tuple[Posted, Posted]] = {}
        self.held: dict[tuple[int, int], object] = {}  # (rank, send id) -> the policy's handle (async)

    def on_send(self, r: RankState, nid: int, info: NodeInfo, ev: int) -> None:
        dst = self.peer(r, nid, info, info.comm_dst, "comm_dst")
        if self.asynchronous:  # the message reports its arrival; until then the send is in flight
            held = self.e.timing.start_send(r.rank, dst, info.comm_size, self.e._now,
                                            lambda t, rank=r.rank, nid=nid: self.landed_at(rank, nid, t))
            if held is not None:
                self.held[(r.rank, nid)] = held
            arrival = IN_FLIGHT
        else:
            ns = self.e.timing.eager_send_ns(r.rank, nid, info, dst, self.e._now)
            arrival = None if ns is None else self.e._now + ns  # None: a rendezvous, finished in `meet`
            if arrival is not None:
                self.e._at(arrival, r.rank, nid)
        send = Posted(r.rank, nid, info, self.e._now, ev, arrival)
        if dst not in self.e.ranks:  # an absent peer (absent_peers): its receive was posted now
            self.release(r.rank, nid)
            if arrival is None:
                self.e._at(self.e._now + self.e.timing.rendezvous_ns(send, Posted(dst, nid, info, self.e._now, ev))[0],
                         r.rank, nid)
            return
        key = (r.rank, dst, info.comm_tag)
        posted = self.recvs.get(key)
        if posted:
            self.meet(send, posted.pop(0))
        else:
            self.sends.setdefault(key, []).append(send)

    def on_recv(self, r: RankState, nid: int, info: NodeInfo, ev: int) -> None:
        src = self.peer(r, nid, info, info.comm_src, "comm_src")
        key = (src, r.rank, info.comm_tag)
        sent = self.sends.get(key)
        recv = Posted(r.rank, nid, info, self.e._now, ev)
        if src not in self.e.ranks:  # an absent peer (absent_peers): it sent when this was posted
            self.e._at(self.e._now + self.e.timing.rendezvous_ns(Posted(src, nid, info, self.e._now, ev), recv)[1],
                     r.rank, nid)
            return
        if sent:
            self.meet(sent.pop(0), recv)
        else:
            self.recvs.setdefault(key, []).append(recv)

    def meet(self, send: Posted, recv: Posted) -> None:
        """A send and its receive are both issued: finish the receive (and a rendezvous send)."""
        self.e.result.pair(send.ev, recv.ev)
        self.release(send.rank, send.nid)
        if send.arrival_ns is None:
            self.meet_rendezvous(send, recv)
            return
        arrival = send.arrival_ns
        if arrival == IN_FLIGHT:
            arrival = self.landed.pop((send.rank, send.nid), None)
            if arrival is None:
                self.waiting[(send.rank, send.nid)] = (send, recv)
                return
        self.deliver(send, recv, arrival)

    def release(self, rank: int, nid: int) -> None:
        """The receive of `rank`'s send `nid` is posted: what the policy held of it may go."""
        held = self.held.pop((rank, nid), None)
        if held is not None:
            self.e.timing.release(held, self.e._now)

    def deliver(self, send: Posted, recv: Posted, arrival: int) -> None:
        """The receive completes at the later of its posting and the data's arrival."""
        if arrival > recv.issued_ns:
            self.e._set_pred(recv.ev, send.ev, cross=False)
        self.e._at(max(arrival, recv.issued_ns, self.e._now), recv.rank, recv.nid)

    def landed_at(self, rank: int, nid: int, t: int) -> None:
        """An asynchronous send's data arrived at `t`: the send is done, and so is the receive
        that was waiting for it (or the arrival is kept until its receive is posted)."""
        self.e._at(t, rank, nid)
        pair = self.waiting.pop((rank, nid), None)
        if pair is None:
            self.landed[(rank, nid)] = t
        else:
            self.deliver(*pair, t)

    def meet_rendezvous(self, send: Posted, recv: Posted) -> None:
        """A rendezvous send/receive: the later half arrives now, then each takes its time."""
        send_ns, recv_ns = self.e.timing.rendezvous_ns(send, recv)
        early, late = (send, recv) if send.issued_ns <= recv.issued_ns else (recv, send)
        if early.issued_ns < late.issued_ns:
            self.e._set_pred(early.ev, late.ev, cross=False)
        self.e._at(self.e._now + send_ns, send.rank, send.nid)
        self.e._at(self.e._now + recv_ns, recv.rank, recv.nid)

    def peer(self, r: RankState, nid: int, info: NodeInfo, peer: int | None, attr: str) -> int:
        if peer is None:
            raise InputError(f"{r.feeder.path}: rank {r.rank}: node {nid} ({info.name!r}): point-to-point node "
                             f"without {attr}; the replayer cannot pair it")
        if peer not in self.e.ranks and not self.e.absent_peers:
            raise InputError(f"{r.feeder.path}: rank {r.rank}: node {nid} ({info.name!r}): {attr}={peer} is not a "
                             f"rank of this set ({min(self.e.ranks)}..{max(self.e.ranks)}); --absent-peers assume "
                             "replays it as if that peer had been there")
        return peer

    def peers(self) -> set[int]:
        """Every rank an unmatched send or receive names."""
        return {p for key in (*self.recvs, *self.sends) for p in key[:2]}

    def waits_of(self, rank: int) -> list[str]:
        """What `rank` waits for, for a deadlock's message."""
        waits = []
        for (src, dst, tag), posts in sorted(self.recvs.items(), key=str):
            waits += [f"%{p.nid} recv waits for a send from rank {src} tag {tag}" for p in posts if p.rank == rank]
        for (src, dst, tag), posts in sorted(self.sends.items(), key=str):
            waits += [f"%{p.nid} send waits for a recv on rank {dst} tag {tag}" for p in posts
                      if p.rank == rank and (p.arrival_ns is None or (p.rank, p.nid) in self.held)]
        return waits
