"""Building one rank's Chakra graph from its linked host and device traces.

Node mapping: every host op (roots excepted) becomes a CPU COMP node with its exclusive time;
every kernel, memcpy and memset a GPU COMP node (`is_cpu_op` false) right after the op that
launched it; every communication call (comms.py finds it, calls.py reads it) one COMM_COLL /
COMM_SEND / COMM_RECV node in place of the ops it is made of; `## process_group:init ##` a plain
CPU COMP node named `process_group:init` (as Chakra's converter writes it: ASTRA-sim aborts on a
METADATA node, see docs/reference/format.md), or a METADATA node where asked for
(`metadata_nodes`).

Dependencies (all in `data_deps`; `ctrl_deps` stay empty, so none can name an absent node):
  * host ops in call order per thread; a blocking call (gloo, sync) sits in that chain, an async
    one (NCCL, `async_op=True`) hangs off it;
  * across threads: where the timeline switches thread, the op that ran before the switch;
  * a kernel after its launching op and after the previous work on its stream; an NCCL
    collective also after the last work of every other stream (ProcessGroupNCCL makes its
    stream wait for the current one);
  * device work -> the host op that ran next after a runtime call that waited for it (a
    synchronisation, a blocking copy, a launch into a full queue); the time the call was blocked
    leaves the calling op's duration (`blocked_ns`), since the replay re-creates it;
  * a collective -> its `wait` (record_param_comms 'wait' by sequence number) and -> the first
    later op that reads a tensor it writes; for a collective on a device stream (NCCL) both go
    to the next kernel launched after that op instead (the host does not block: the current
    stream waits for the collective's);
  * an asynchronous call -> its thread's next host op, where the thread started no traced op
    from the call's return until the call completed (it waited in untraced `work.wait()`).
Any cycle the input implies is broken (graphcheck.py) with a warning naming the nodes. The
builder emits the nodes (communication calls: callnodes.py); the passes that add the edges
between threads, streams and waits live beside it (threads.py, devedges.py, waitedges.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from chakra_tools.core.errors import Diagnostic, Diagnostics, InputError
from chakra_tools.core.model import NodeType

from .calls import CommCall, WaitMark
from .devcomm import is_comm_kernel, says_comm
from .cost import REGISTRY as COST_REGISTRY, op_cost
from . import hotloops, threads
from .hostet import HostOp, HostTrace
from .kineto import DeviceTrace
from .link import Link
from .callnodes import CallNodes
from .devedges import DeviceEdges
from .waitedges import WaitEdges
from .spans import last_before

_COMP = NodeType.COMP_NODE
PG_INIT_NAME = "process_group:init"


class Rec:
    """A node under construction (mutable; turned into a frozen core Node at the end)."""

    __slots__ = ("id", "name", "type", "deps", "ts", "dur_us", "attrs", "tid", "stream", "call")

    def __init__(self, id: int, name: str, type: NodeType, ts: float = 0.0, dur_us: float = 0.0,
                 tid=None, stream=None):
        self.id, self.name, self.type = id, name, type
        self.deps: list[int] = []
        self.ts, self.dur_us = ts, dur_us
        self.attrs: dict = {}
        self.tid, self.stream = tid, stream
        self.call: CommCall | None = None


@dataclass
class BuildResult:
    recs: list[Rec]
    calls: list[CommCall]
    diagnostics: Diagnostics = field(default_factory=Diagnostics)
    has_durations: bool = True


class Builder(CallNodes, DeviceEdges, WaitEdges):
    """Turns (host trace, device trace, link) into node records; one method per step.

    `hotloops.emit_plain_ops` emits runs of plain host ops (no call's member, nothing
    launched) into `recs`, `chain` and `op_node`, as `_emit_host` would: the records it makes
    are `REC`s of type `COMP`."""

    REC, COMP = Rec, _COMP

    def __init__(self, host: HostTrace, dev: DeviceTrace | None, lk: Link | None, rank: int,
                 calls: list[CommCall], waits: list[WaitMark], consumers: dict[int, int], *,
                 metadata_nodes: bool = False):
        self.host, self.dev, self.lk, self.rank = host, dev, lk or Link(), rank
        self.metadata_nodes = metadata_nodes
        self.calls, self.waits, self.consumers = calls, waits, consumers
        self.diags = Diagnostics()
        self.recs: list[Rec] = []
        self.op_node: dict[int, int] = {}         # host op id -> its node (host or comm)
        self.kernel_nodes: dict[int, list[int]] = {}  # host op id -> GPU nodes it launched
        self.chain: dict[int, int] = {}           # thread -> last node in its call chain
        self.parents = {op.id: op.parent for op in host.ops}
        self.op_event, self.kernels = self.lk.op_event, self.lk.kernels  # hot-path shortcuts
        self._launched: list[tuple[int, object]] | None = None
        self._launch_ts: dict | None = None  # correlation -> its runtime call's start (`_call_ts`)
        self.launched_at: dict[int, float] = {}  # device node -> when its launch was called
        self.worker_ops: set[int] = set()  # host op ids of lone gloo backend ops (gloo's worker threads)
        self._warned: set[tuple[str, str]] = set()

    # -- driver -------------------------------------------------------------------------------
    def build(self) -> BuildResult:
        calls = self.calls
        self.member = {m: c for c in calls for m in c.members}
        self.costs = self._costs()
        self.special = special = self.member.keys() | {self.host.pg_init_id}
        emit_host, emit_plain = self._emit_host, hotloops.emit_plain_ops
        ops, i, end = self.host.ops, 0, len(self.host.ops)
        while i < end:
            i = emit_plain(self, i)  # the ops that launched nothing, up to the next other one
            if i == end:
                break
            op = ops[i]
            i += 1
            if op.id in special:  # a call's member, or process-group setup
                self._emit(op)
            else:
                emit_host(op)
        self._stream_order()
        self._cross_thread()
        self._blocking_edges()
        self._wait_edges(self.waits)
        self._untraced_wait_edges()
        self._consumer_edges()
        self._untraced_collective_waits()
        self._event_wait_edges()
        self._device_queueing()
        return BuildResult(self.recs, calls, self.diags, self.dev is not None)

    # -- emission -----------------------------------------------------------------------------
    def _new(self, name: str, type: NodeType, **kw) -> Rec:
        rec = Rec(len(self.recs) + 1, name, type, **kw)
        self.recs.append(rec)
        return rec

    def _emit(self, op: HostOp) -> None:
        if op.id == self.host.pg_init_id:
            self._emit_pg_init(op)
            return
        call = self.member.get(op.id)
        if call is not None:
            if op.id == call.root:
                self._emit_call(op, call)
            return
        self._emit_host(op)

    def _emit_pg_init(self, op: HostOp) -> None:
        """Process-group setup: a host COMP node like any other (its facts go to comm_group.json,
        `pg_name` and the GlobalMetadata), or the METADATA node older tools expect."""
        if self.metadata_nodes:
            self.op_node[op.id] = self._new(PG_INIT_NAME, NodeType.METADATA_NODE).id
            return
        self._emit_host(op)
        rec = self.recs[self.op_node[op.id] - 1]
        rec.name = PG_INIT_NAME
        if not rec.ts and self.op_event:  # set up before tracing began: at the window's start
            rec.ts = min(ev.ts for ev in self.op_event.values())

    def _emit_host(self, op: HostOp) -> None:
        """A host op's CPU node, then the GPU work it launched (the hot path: one per op)."""
        oid, tid, recs, chain = op.id, op.tid, self.recs, self.chain
        ev = self.op_event.get(oid)
        rid = len(recs) + 1
        rec = Rec(rid, op.name, _COMP, ev.ts, max(ev.dur - ev.child_us, 0.0), tid) \
            if ev is not None else Rec(rid, op.name, _COMP, 0.0, 0.0, tid)
        recs.append(rec)
        rec.attrs["is_cpu_op"] = True
        if type(tid) is int:  # the thread it ran on: --lanes stream gives each its own lane
            rec.attrs["tid"] = tid
        prev = chain.get(tid)
        if prev is not None:
            rec.deps.append(prev)
        chain[tid] = self.op_node[oid] = rid
        kernels = self.kernels.get(oid)
        gpu = ()
        if kernels:
            gpu = self._emit_kernels(kernels, rid)
            if gpu:
                self.kernel_nodes[oid] = gpu
            if len(gpu) < len(kernels):  # communication kernels outside any recognised call
                for g in kernels:
                    if is_comm_kernel(g.name):
                        self._emit_kernel_call(oid, g)
        cost = self.costs.get(oid)
        if cost is not None:
            target = max(gpu, key=lambda n: recs[n - 1].dur_us) if gpu else rid
            recs[target - 1].attrs.update(num_ops=cost[0], tensor_size=cost[1])

    def _chain(self, rec: Rec, tid, blocking: bool) -> None:
        prev = self.chain.get(tid)
        if prev is not None:
            rec.deps.append(prev)
        if blocking:
            self.chain[tid] = rec.id

    def _emit_kernels(self, kernels, launcher: int) -> list[int]:
        out = []
        for g in kernels:
            if is_comm_kernel(g.name):
                continue
            if says_comm(g.name):
                self._warn_once("unknown-comm-kernel", g.name,
                                f"kernel {g.name!r} looks like communication but is no collective kernel "
                                "this converter knows: written as compute")
            rec = self._new(g.name, NodeType.COMP_NODE, ts=g.ts, dur_us=g.dur,
                            stream=g.args.get("stream"))
            rec.attrs["is_cpu_op"] = False
            rec.deps.append(launcher)
            launch = self._call_ts(g.args.get("correlation"))
            if launch is not None:
                self.launched_at[rec.id] = launch
            if g.args.get("stream") is not None:
                rec.attrs["stream"] = int(g.args["stream"])
            if g.cat in ("gpu_memcpy", "Memcpy", "gpu_memset", "Memset") and g.args.get("bytes"):
                rec.attrs["tensor_size"] = int(g.args["bytes"])
            out.append(rec.id)
        return out

    def _call_ts(self, correlation) -> float | None:
        """When the runtime call with this `correlation` began (a launch, an event record)."""
        if self._launch_ts is None:
            self._launch_ts = {r.args["correlation"]: r.ts for r in self.dev.runtime
                               if r.args.get("correlation") is not None} if self.dev is not None else {}
        return self._launch_ts.get(correlation)

    def _warn_once(self, code: str, key: str, message: str) -> None:
        """One warning per (code, kernel name): a kernel repeats thousands of times."""
        if (code, key) not in self._warned:
            self._warned.add((code, key))
            self.diags.add(Diagnostic("warning", code, message, file=self.host.path, rank=self.rank))

    # -- dependencies ---------------------------------------------------------------------------
    def _gpu_by_stream(self) -> dict:
        streams: dict = defaultdict(list)
        for r in self.recs:
            if r.stream is not None:
                streams[r.stream].append((r.ts, r.id))
        for v in streams.values():
            v.sort()
        return streams

    def _stream_order(self) -> None:
        self.streams = self._gpu_by_stream()
        for stream, items in self.streams.items():
            for (_, prev), (_, cur) in zip(items, items[1:]):
                self.recs[cur - 1].deps.append(prev)
        for r in self.recs:
            if r.call is not None and r.stream is not None:
                for s, items in self.streams.items():
                    if s != r.stream:
                        last = last_before(items, r.ts)
                        if last is not None:
                            r.deps.append(last)

    def _cross_thread(self) -> None:
        """Where the timeline switches host thread, order the new op after the one that ran
        before, and take the time a thread waited for the other out of its op (threads.py).
        gloo's worker records (`worker_ops`) are no host thread: nothing hands over to them."""
        if self.dev is None:
            tops = [(op.tid, op.id, self.op_node[op.id]) for op in self.host.ops
                    if op.parent in self.host.roots and op.id in self.op_node]
            return threads.order_untimed_switches(self.recs, tops)
        timed = sorted((ev.ts, ev.end, op.tid, nid) for op in self.host.ops
                       if op.id not in self.worker_ops and (nid := self.op_node.get(op.id)) is not None
                       and (ev := self.op_event.get(op.id)) is not None)
        threads.order_switches(self.recs, timed)
        threads.take_out_thread_waits(self.recs, timed)

    @property
    def host_by_id(self) -> dict[int, HostOp]:
        return self.host.by_id_cache()

    # -- compute cost ----------------------------------------------------------------------------
    def _costs(self) -> dict[int, tuple[int, int]]:
        """Cost per host op, kept only on the innermost costed op of a call chain
        (aten::linear -> aten::addmm counts once, on addmm).

        The one walk up the host trace's caller links (elsewhere an op's caller is read one step
        at a time). Each walk stops at an op an earlier walk cleared, so all of them together
        visit each op once, and a loop of callers above a costed op is an InputError naming the
        file and the ops (`_parent_cycle`), not a hang."""
        costs = {}
        try:
            for op in self.host.ops:
                if op.name in COST_REGISTRY:
                    c = op_cost(op)
                    if c[0]:
                        costs[op.id] = c
        except InputError as e:
            raise e.add_context(self.host.path) from None
        cleared: set[int] = set()  # ops whose callers are already uncosted: a walk ends there
        for op_id in list(costs):
            path = {op_id: None}  # this walk's ops, in order: a caller met twice closes a loop
            p = self.parents.get(op_id)
            while p is not None and p in self.parents and p not in cleared:
                if p in path:
                    ids = list(path)
                    raise _parent_cycle(self.host.path, ids[ids.index(p):])
                costs.pop(p, None)
                cleared.add(p)
                path[p] = None
                p = self.parents.get(p)
        return costs


def _parent_cycle(path: str, ids: list[int]) -> InputError:
    """A host trace whose callers form a loop. Refused, not broken: PyTorch hands a node its id
    when the op starts, so a caller's id is below its callees' and no recorded trace has a loop;
    one means the file was damaged or edited, and which op of the loop is the innermost (the one
    that keeps the cost) would be a guess that changes the graph's compute silently."""
    shown = " -> ".join(str(i) for i in [*ids[:8], ids[0]]) if len(ids) <= 8 else \
        " -> ".join(str(i) for i in ids[:8]) + f" -> ... ({len(ids)} nodes)"
    return InputError(f"{path}: nodes {shown}: each names the next as its caller ('parent' or "
                      "'ctrl_deps'), a loop no recorded trace has (the file is damaged: capture it again)")
