"""Validation allocates nothing in proportion to a number read from the input: a GlobalMetadata
`world_size` of 10**12 or 2**64-1 used to make `trace-validate` and `trace-replay` build a list of
that many absent ranks (4.6 GB in 17 s, then killed). Each command here runs in a child process
under a 1 GiB address-space limit and a time limit, so a regression fails the test instead of
eating the machine."""

from __future__ import annotations

import doctest
import subprocess
import sys

import pytest

from chakra_tools.core import crosscheck
from chakra_tools.core.crosscheck import spans_text
from chakra_tools.core.graph import Graph
from chakra_tools.core.rankfiles import write_comm_groups
from chakra_tools.core.model import MAX_RANK, Attr, Metadata, Node, NodeType, make_attrs

LIMIT_BYTES = 1 << 30
LIMIT_S = 120

#: the CLI command `argv[1]` (validate|replay) on argv[2:], under the address-space limit
CHILD = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({LIMIT_BYTES}, {LIMIT_BYTES}))
command = sys.argv[1]
if command == "validate":
    from chakra_tools.cli.validate import app
else:
    from chakra_tools.cli.replay import app
app(sys.argv[2:], prog_name="trace-" + command)
"""


def run(command: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, command, *map(str, args)], capture_output=True,
                          text=True, timeout=LIMIT_S)


def comp(i=1):
    return Node(i, f"comp{i}", NodeType.COMP_NODE, (), duration_micros=1)


def write_set(folder, world: Attr | None, ranks=range(4), nodes=lambda r: [comp()]):
    """Rank files `t.<r>.et` whose GlobalMetadata carry `world` as `world_size` (as they are: no
    writer would record such a count)."""
    folder.mkdir()
    for r in ranks:
        meta = Metadata("0.0.4", {"world_size": world} if world is not None else {})
        Graph(nodes(r), rank=r, metadata=meta).write(folder / f"t.{r}.et")
    return folder


@pytest.mark.parametrize("world", [Attr("int64_val", 10**12), Attr("uint64_val", 2**64 - 1),
                                   Attr("int64_val", 0), Attr("int64_val", -4)], ids=str)
def test_a_world_size_no_rank_set_can_have_is_refused_naming_the_file(tmp_path, world):
    folder = write_set(tmp_path / "set", world)
    res = run("validate", folder)
    assert res.returncode == 1, res.stdout + res.stderr
    assert (f"{folder}/t.0.et: rank 0: GlobalMetadata world_size {world.value} is outside 1..{MAX_RANK + 1}"
            in res.stdout)
    assert res.stdout.count("[bad-world-size]") == 4 and "4 rank(s), 4 nodes: 4 error(s)" in res.stdout
    replay = run("replay", folder)
    assert replay.returncode == 1 and "not replayed" in replay.stdout + replay.stderr
    assert "makespan" not in replay.stdout


def test_the_largest_world_size_reports_its_absent_ranks_as_one_range(tmp_path):
    folder = write_set(tmp_path / "set", Attr("int64_val", MAX_RANK + 1))
    res = run("validate", folder, "--json")
    assert res.returncode == 1, res.stderr
    assert (f"the rank set was written with {MAX_RANK + 1} ranks; {MAX_RANK - 3} have no file "
            f"[4..{MAX_RANK}]") in res.stdout
    assert run("replay", folder).returncode == 1


def test_a_file_named_after_a_rank_beyond_max_rank(tmp_path):
    folder = write_set(tmp_path / "set", None, ranks=[0])
    (folder / "t.0.et").rename(folder / f"t.{10**15}.et")
    res = run("validate", folder)
    assert res.returncode == 1 and "[rank-out-of-range]" in res.stdout, res.stdout + res.stderr
    assert "ranks 0..999999999999999" not in res.stdout and "have no file [0..999999999999999]" in res.stdout
    assert run("replay", folder).returncode == 1


def test_peers_and_group_members_far_beyond_the_files(tmp_path):
    """A send to rank 2**63-1 (an int64 where the contract has int32, as a foreign writer may put
    it) and a group naming MAX_RANK: one finding each, no range walked."""
    def nodes(r):
        attrs = {**make_attrs(comm_size=8, comm_tag=0, is_cpu_op=False), "comm_dst": Attr("int64_val", 2**63 - 1)}
        return [Node(1, "send", NodeType.COMM_SEND_NODE, (), attrs=attrs)]
    folder = write_set(tmp_path / "set", None, ranks=[0, 1], nodes=nodes)
    write_comm_groups(folder / "comm_group.json", {"1": (0, 1, MAX_RANK)})
    res = run("validate", folder)
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"rank {2**63 - 1} (no rank: ranks are 0..{MAX_RANK}): no file, but rank 0 node 1" in res.stdout
    assert f"rank {MAX_RANK}: no file, but group 1 of the communicator-group file has it" in res.stdout
    assert res.stdout.count("[missing-rank]") == 2


def test_spans_text_shows_the_first_ranges_and_the_last():
    assert spans_text([(3, 3), (6, 6)]) == "[3, 6]"
    assert spans_text([(k, k) for k in range(0, 40, 2)], shown=4) == "[0, 2, 4, ..., 38]"
    assert spans_text([(4, 10**12 - 1)]) == "[4..999999999999]"


def test_crosscheck_doctests():
    result = doctest.testmod(crosscheck)
    assert result.failed == 0 and result.attempted > 0
