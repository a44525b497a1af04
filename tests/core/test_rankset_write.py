"""Writing a rank set: all or nothing, and nothing stale left beside it."""

from __future__ import annotations

import pytest

from chakra_tools.core.errors import TraceWriteError
from chakra_tools.core.graph import Graph, RankSet, find_rank_files, read_comm_groups
from chakra_tools.core.model import Node, NodeType, make_attrs


def rankset(n: int, groups=None, bad_rank=None) -> RankSet:
    graphs = {}
    for r in range(n):
        node = Node(0, "", NodeType.INVALID_NODE) if r == bad_rank else \
            Node(1, f"k{r}", NodeType.COMP_NODE, duration_micros=r + 1, attrs=make_attrs(is_cpu_op=False))
        graphs[r] = Graph([node], rank=r)
    return RankSet(graphs, groups or {})


def test_a_smaller_set_written_over_a_larger_one_leaves_none_of_the_old_ranks(tmp_path):
    rankset(8, {"1": list(range(8))}).write(tmp_path, "trace")
    rankset(2).write(tmp_path, "trace")
    assert sorted(find_rank_files(tmp_path / "trace")) == [0, 1]
    assert not (tmp_path / "comm_group.json").exists()  # the old set's groups would be read as ours


def test_another_rank_set_in_the_folder_keeps_its_files(tmp_path):
    rankset(2, {"1": [0, 1]}).write(tmp_path, "a")
    rankset(1).write(tmp_path, "b")
    assert sorted(find_rank_files(tmp_path / "a")) == [0, 1]
    assert read_comm_groups(tmp_path / "comm_group.json") == {"1": (0, 1)}


def test_a_failed_write_leaves_the_previous_set_untouched_and_no_new_folder(tmp_path):
    rankset(3, {"1": [0, 1, 2]}).write(tmp_path / "out", "trace")
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    with pytest.raises(TraceWriteError, match=rf"{tmp_path / 'out'}/trace.1.et: node 0"):
        rankset(3, bad_rank=1).write(tmp_path / "out", "trace")
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    with pytest.raises(TraceWriteError):
        rankset(3, bad_rank=2).write(tmp_path / "new" / "deeper", "trace")
    assert not (tmp_path / "new").exists()


def test_a_rank_that_went_missing_from_a_written_set_is_an_error(tmp_path):
    from chakra_tools.core.validate import validate_path

    rankset(8).write(tmp_path, "trace", record_world=True)
    assert not validate_path(tmp_path).errors
    (tmp_path / "trace.6.et").unlink()
    (tmp_path / "trace.3.et").unlink()
    errors = validate_path(tmp_path).errors
    assert [e.code for e in errors] == ["missing-ranks"]
    assert "written with 8 ranks; 2 have no file [3, 6]" in str(errors[0])
