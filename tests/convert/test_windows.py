"""Ranks whose captured windows cut a group's collective sequence at different points: the edge
collectives only some ranks hold are dropped, with a warning; anything else is left to refuse."""

from __future__ import annotations

from chakra_tools.convert.windows import align_windows
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
    align_windows(rs, diags)
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
    align_windows(rs, diags)
    assert not list(diags) and len(rs[1]) == 5


def test_matched_collectives_are_never_cut_to_hide_a_difference_inside():
    r0 = [coll(1, AG, 8), coll(2, AR, 4096, (1,)), coll(3, AG, 8, (2,))]
    r1 = [coll(1, AG, 8), coll(2, AR, 112, (1,)), coll(3, AR, 4096, (2,)), coll(4, AG, 8, (3,))]
    rs = RankSet({0: Graph(r0, rank=0), 1: Graph(r1, rank=1)}, {"1": (0, 1)})
    diags = Diagnostics()
    align_windows(rs, diags)
    assert not list(diags) and (len(rs[0]), len(rs[1])) == (3, 4)
