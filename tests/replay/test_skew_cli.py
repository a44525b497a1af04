"""trace-replay's --collective-start and --exact-memory, against hand-computed ns.

The stagger: two ranks on a Ring of 2 (50 GB/s = 53.687 B/ns, 500 ns), ASTRA-sim's default
system (one chunk, endpoint delay 10, reduction 30 ns without local-mem-bw), a 64 KiB all-reduce:
2 messages of 32 KiB, each int(500 + 32768 / 53.687) = 1110 ns. Rank 0 arrives at 0, rank 1 after
computing 10 µs. Rank 1's sends leave at 10,010 and (after its first receive, which rank 0's send
at 10 made arrive long before, + 10 + 30) 10,050; rank 0's first receive completes at
10,010 + 1110 = 11,120, its second send leaves at 11,160, and its second receive (rank 1's second
send, 10,050 + 1110 = 11,160) at 11,160: rank 0 ends at 11,170. Rank 1's second receive is rank
0's second send, 11,160 + 1110 = 12,270: it ends at 12,280, the symmetric time from 10,000
(3 * 10 + 2 * 1110 + 30 = 2,280). With --collective-start last both end at 12,280.
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from chakra_tools.cli.replay import app
from chakra_tools.core.model import Node, NodeType, make_attrs

from _util import coll, comp, write_rankset

runner = CliRunner()
NETWORK = "topology: [ Ring ]\nnpus_count: [ 2 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n"


def finishes(*args) -> dict[int, int]:
    res = runner.invoke(app, [*map(str, args), "--json"])
    assert res.exit_code == 0, res.output
    return {r["rank"]: r["finish_ns"] for r in json.loads(res.output)["ranks"]}


def test_collective_start_arrival_by_default_and_last_on_request(tmp_path):
    net = tmp_path / "ring2.yml"
    net.write_text(NETWORK)
    prefix = write_rankset(tmp_path, {0: [coll(2, 65536)], 1: [comp(1, us=10), coll(2, 65536, deps=(1,))]})
    assert finishes(prefix, "--network", net) == {0: 11_170, 1: 12_280}
    assert finishes(prefix, "--network", net, "--collective-start", "last") == {0: 12_280, 1: 12_280}
    bad = runner.invoke(app, [str(prefix), "--network", str(net), "--collective-start", "first"])
    assert bad.exit_code == 2 and "--collective-start 'first'" in bad.output


def test_exact_memory_takes_the_fractional_bandwidth(tmp_path):
    """One 1 MiB load from a pool of 12.5 GB/s, 800.7 ns: 800 + int(1048576 / 12) = 88,181 ns as
    ASTRA-sim reads the file; int(800.7 + 1048576 / 12.5) = int(84,686.78) = 84,686 with --exact-memory."""
    mem = tmp_path / "pool.json"
    mem.write_text(json.dumps({"memory-type": "MEMORY_POOL", "remote-mem-latency": 800.7, "remote-mem-bw": 12.5}))
    load = Node(1, "load", NodeType.MEM_LOAD_NODE, attrs=make_attrs(tensor_size=1 << 20))
    prefix = write_rankset(tmp_path, {0: [load]})
    assert finishes(prefix, "--memory", mem) == {0: 88_181}
    assert finishes(prefix, "--memory", mem, "--exact-memory") == {0: 84_686}
