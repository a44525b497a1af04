"""Ranks whose captured windows cut a group's collective sequence at different points: the edge
collectives only some ranks hold are dropped, with a warning; anything else is left to refuse."""

from __future__ import annotations

from chakra_tools.convert.align import align_collectives
from chakra_tools.core.errors import Diagnostics
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import CommType, Node, NodeType, make_attrs
from chakra_tools.core.validate import validate_rankset


def coll(i, kind, size, deps=()):
    return Node(i, f"c{i}", NodeType.COMM_COLL_NODE, tuple(deps),
                attrs=make_attrs(comm_type=kind, comm_size=size, pg_name="1", is_cpu_op=False))


def host(i, deps=()):
    return Node(i, f"h{i}", NodeType.COMP_NODE, tuple(deps), duration_micros=5, attrs=make_attrs(is_cpu_op=True))


AR, AG = CommType.ALL_REDUCE, CommType.ALL_GATHER


def test_an_extra_collective_at_one_ranks_window_end_is_dropped_and_its_dependents_rewired():
    # rank 0's window still holds the logging all-reduce (112 B) that rank 1's closed before
    r0 = [host(1), coll(2, AG, 8, (1,)), coll(3, AR, 4096, (2,)), coll(4, AR, 112, (3,)), host(5, (4,))]
    r1 = [host(1), coll(2, AG, 8, (1,)), coll(3, AR, 4096, (2,)), host(4, (3,))]
    rs = RankSet({0: Graph(r0, rank=0), 1: Graph(r1, rank=1)}, {"1": (0, 1)})
    assert any(d.code == "collective-count" for d in validate_rankset(rs))
    diags = Diagnostics()
    align_collectives(rs, diags)
    (found,) = list(diags)
    assert found.code == "window-trimmed" and "%4 c4" in found.message
    assert 4 not in rs[0].nodes and rs[0][5].deps == (3,)  # h5 waits for what c4 waited for
    assert not [d for d in validate_rankset(rs) if d.severity == "error"]


def test_sequences_that_differ_inside_are_left_for_validation_to_refuse():
    r0 = [coll(1, AG, 8), coll(2, AR, 4096, (1,)), coll(3, AG, 8, (2,)), coll(4, AR, 4096, (3,))]
    r1 = [coll(1, AG, 8), coll(2, AR, 4096, (1,)), coll(3, AR, 112, (2,)), coll(4, AG, 8, (3,)),
          coll(5, AR, 4096, (4,))]
    rs = RankSet({0: Graph(r0, rank=0), 1: Graph(r1, rank=1)}, {"1": (0, 1)})
    diags = Diagnostics()
    align_collectives(rs, diags)
    assert not list(diags) and len(rs[1]) == 5


def test_matched_collectives_are_never_cut_to_hide_a_difference_inside():
    r0 = [coll(1, AG, 8), coll(2, AR, 4096, (1,)), coll(3, AG, 8, (2,))]
    r1 = [coll(1, AG, 8), coll(2, AR, 112, (1,)), coll(3, AR, 4096, (2,)), coll(4, AG, 8, (3,))]
    rs = RankSet({0: Graph(r0, rank=0), 1: Graph(r1, rank=1)}, {"1": (0, 1)})
    diags = Diagnostics()
    align_collectives(rs, diags)
    assert not list(diags) and (len(rs[0]), len(rs[1])) == (3, 4)


def numbered(i, kind, size, seq, deps=()):
    return Node(i, f"c{i}", NodeType.COMM_COLL_NODE, tuple(deps), duration_micros=7,
                attrs=make_attrs(comm_type=kind, comm_size=size, pg_name="1", is_cpu_op=False, seq=seq))


def test_collectives_are_matched_by_the_sequence_numbers_the_traces_carry():
    """Rank 1's trace lacks collective 2 (a sampled or filtered trace): by position its third
    collective (AG, number 3) would meet rank 0's third (AR, number 2); by number, rank 0's
    collective 2 matches nothing and stays as device work of its time, the rest pair."""
    r0 = [numbered(1, AR, 4096, 1), numbered(2, AR, 64, 2, (1,)), numbered(3, AG, 8, 3, (2,)), host(4, (3,))]
    r1 = [numbered(1, AR, 4096, 1), numbered(2, AG, 8, 3, (1,)), host(3, (2,))]
    rs = RankSet({0: Graph(r0, rank=0), 1: Graph(r1, rank=1)}, {"1": (0, 1)})
    assert any(d.code in ("collective-count", "collective-mismatch") for d in validate_rankset(rs))
    diags = Diagnostics()
    align_collectives(rs, diags)
    (found,) = list(diags)
    assert found.code == "collective-unmatched" and found.rank == 0 and "%2 c2" in found.message
    assert "sequence numbers" in found.message
    kept = rs[0][2]
    assert kept.type is NodeType.COMP_NODE and kept.duration_micros == 7 and kept.deps == (1,)
    assert "comm_type" not in kept.attrs and "pg_name" not in kept.attrs
    assert not [d for d in validate_rankset(rs) if d.severity == "error"]


def test_a_sampled_set_without_numbers_is_aligned_by_kind_and_size():
    """Part of a larger job, each trace holding a different subset: rank 0 lacks the 112-byte
    all-reduce rank 1 has inside its sequence, rank 1 the 512-byte one; the rest match in order."""
    r0 = [coll(1, AG, 8), coll(2, AR, 4096, (1,)), coll(3, AR, 512, (2,)), coll(4, AG, 8, (3,)),
          coll(5, AR, 4096, (4,))]
    r1 = [coll(1, AG, 8), coll(2, AR, 4096, (1,)), coll(3, AR, 112, (2,)), coll(4, AG, 8, (3,)),
          coll(5, AR, 4096, (4,))]
    rs = RankSet({0: Graph(r0, rank=0), 1: Graph(r1, rank=1)}, {"1": (0, 1)})
    diags = Diagnostics()
    align_collectives(rs, diags)
    assert not list(diags)  # a whole set: left for validation to refuse
    align_collectives(rs, diags, sampled=True)
    assert sorted((d.code, d.rank) for d in diags) == [("collective-unmatched", 0), ("collective-unmatched", 1)]
    assert rs[0][3].type is NodeType.COMP_NODE and rs[1][3].type is NodeType.COMP_NODE
    assert not [d for d in validate_rankset(rs) if d.severity == "error"]


def test_a_sampled_set_that_shares_too_little_is_left_to_refuse():
    r0 = [coll(1, AR, 1), coll(2, AR, 2, (1,)), coll(3, AR, 3, (2,)), coll(4, AR, 4, (3,))]
    r1 = [coll(1, AR, 5), coll(2, AR, 6, (1,)), coll(3, AR, 3, (2,)), coll(4, AR, 7, (3,))]
    rs = RankSet({0: Graph(r0, rank=0), 1: Graph(r1, rank=1)}, {"1": (0, 1)})
    diags = Diagnostics()
    align_collectives(rs, diags, sampled=True)
    assert not list(diags) and all(n.type is NodeType.COMM_COLL_NODE for n in rs[0])


def test_hta_sampled_ranks_of_a_128_rank_job_convert_together(shared_fixtures, tmp_path):
    """Two ranks of a 128-rank job, each trace a different subset of its collectives (refused as
    collective-mismatch before): converted as one set, what matched nothing named."""
    from chakra_tools.convert.run import convert, inputs_from_files

    devices = [str(shared_fixtures / "hta" / f"sampled_rank{r}_kineto.json.gz") for r in (0, 1)]
    report = convert(inputs_from_files([], devices, [0, 1]), tmp_path / "out")
    lone = [d for d in report.diagnostics if d.code == "collective-unmatched"]
    assert sorted(d.rank for d in lone) == [0, 1] and all("2 of this rank's 10" in d.message for d in lone)
    rs = RankSet.load(tmp_path / "out")
    assert [sum(n.type is NodeType.COMM_COLL_NODE for n in rs[r]) for r in (0, 1)] == [8, 8]
    assert not [d for d in validate_rankset(rs) if d.severity == "error"]
