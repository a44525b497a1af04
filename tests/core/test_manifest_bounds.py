"""The capture manifest's typed decode bounds what it reads (issue 32): step times, wall-clock
starts and step numbers are non-negative int64 (10**400 parses as an exact int and made the
replay comparison's float division overflow), ranks lie in 0..world_size-1 (a rank of -2**63-1
got through), and a world or node count of 2**31 is counted off without listing its ranks."""

from __future__ import annotations

import json
import time

import pytest

from chakra_tools.convert.run import inputs_from_run
from chakra_tools.core.errors import InputError
from chakra_tools.core.manifest import FORMAT, manifest_from_dict, merge_nodes, read_manifest
from chakra_tools.core.model import MAX_RANK
from chakra_tools.replay.fidelity import compare_with_manifest
from chakra_tools.visualize.captured import capture_files

from test_manifest import manifest  # noqa: E402  (tests/core is on the path)

INT64 = 2**63 - 1
RESULT = {"makespan_ns": 110, "ranks": [{"rank": 0, "finish_ns": 110}, {"rank": 1, "finish_ns": 110}]}


def with_rank1(**fields) -> dict:
    doc = manifest()
    doc["ranks"][1].update(fields)
    return doc


@pytest.mark.parametrize("doc, place", [
    (with_rank1(step_times_ns=[10**400, 5]),
     r"ranks\[1\].step_times_ns\[0\] is an integer of 1329 bits, not 0..9223372036854775807"),
    (with_rank1(step_times_ns=[900, -1]), r"ranks\[1\].step_times_ns\[1\] is -1, not 0.."),
    (with_rank1(step_times_ns=[float("inf")]), r"ranks\[1\].step_times_ns is \[inf\], not a list of integers"),
    (with_rank1(step_starts_unix_ns=[0, 2**64]), r"ranks\[1\].step_starts_unix_ns\[1\] is 18446744073709551616"),
    (with_rank1(captured_steps=[-(10**400)]), r"ranks\[1\].captured_steps\[0\] is an integer of 1329 bits"),
    (with_rank1(rank=-2**63 - 1), r"ranks\[1\].rank is -9223372036854775809, not 0..1"),
    (with_rank1(rank=2), r"ranks\[1\].rank is 2, not 0..1"),  # world_size 2
    (with_rank1(rank=0), r"ranks: rank 0 is listed twice"),
    (manifest(captured_steps=[2**63]), r"captured_steps\[0\] is 9223372036854775808, not 0.."),
    (manifest(world_size=0), r"world_size is 0, not 1..2147483648"),
    (manifest(process_groups=[{"name": "0", "ranks": [0, -2**63 - 1]}]), r"process_groups\[0\].ranks\[1\] is -9223"),
    (manifest(process_groups=[{"name": "0", "ranks": [1, 1]}]), r"process_groups\[0\].ranks: rank 1 is listed twice"),
    (manifest(node={"count": 10**400, "rank": 0}), r"node.count is an integer of 1329 bits, not 1..2"),
    (manifest(node={"count": 1, "rank": 0, "ranks": [0, 2**31]}), r"node.ranks\[1\] is 2147483648, not 0..2147483647"),
    (manifest(node={"rank": 0}), r"node.count is missing"),
    (manifest(process_groups=[{"name": [0], "ranks": [0]}]), r"process_groups\[0\].name is \[0\], not a string"),
    (manifest(process_groups=[{"name": -1, "ranks": [0]}]), r"process_groups\[0\].name is -1, not 0.."),
])
def test_numbers_out_of_range_are_refused_by_every_reader_naming_the_place(tmp_path, doc, place):
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    readers = (read_manifest, inputs_from_run, capture_files,
               lambda run: compare_with_manifest(RESULT, run / "manifest.json"))
    for read in readers:
        with pytest.raises(InputError, match=place) as e:
            read(tmp_path)
        assert str(tmp_path / "manifest.json") in str(e.value)


def test_the_largest_values_still_read():
    doc = with_rank1(step_times_ns=[INT64], step_starts_unix_ns=[INT64], captured_steps=[0])
    doc["world_size"] = MAX_RANK + 1
    doc["ranks"][1]["rank"] = MAX_RANK
    doc["process_groups"] = [{"name": 3, "ranks": [0, MAX_RANK]}]  # an older capture's group number
    m = manifest_from_dict(doc, "m.json")
    assert m.ranks[1].rank == MAX_RANK and m.ranks[1].step_times_ns == (INT64,)
    assert m.process_groups[0].name == "3"


def _node_capture(node: int, count: int, ranks: list[int], world: int):
    doc = manifest(world_size=world, node={"count": count, "rank": node, "ranks": ranks}, job_id="j")
    doc["ranks"] = [dict(doc["ranks"][0], rank=r) for r in ranks]
    return manifest_from_dict(doc, f"node-{node}/manifest.json")


def test_a_job_of_two_billion_ranks_is_counted_off_not_listed():
    """merge_nodes listed range(world) to find the ranks no node captured: 2**31 of them took
    minutes and gigabytes. Now it names the first few and how many."""
    world = MAX_RANK + 1
    parts = [_node_capture(0, 2, [0, 1], world), _node_capture(1, 2, [2, 3], world)]
    start = time.monotonic()
    with pytest.raises(InputError) as e:
        merge_nodes(parts)
    assert time.monotonic() - start < 5
    assert f"the job has {world} ranks but no node captured rank(s) [4, 5, 6, 7, 8, 9, 10, 11, ...] " \
           f"({world - 4} in all)" in str(e.value), e.value


def test_a_launch_of_many_nodes_is_counted_off_not_listed():
    world = MAX_RANK + 1
    parts = [_node_capture(0, world, [0], world), _node_capture(3, world, [1], world)]
    start = time.monotonic()
    with pytest.raises(InputError) as e:
        merge_nodes(parts)
    assert time.monotonic() - start < 5
    assert f"the launch ran {world} nodes but node(s) [1, 2, 4, 5, 6, 7, 8, 9, ...] ({world - 2} in all)" \
           in str(e.value), e.value
