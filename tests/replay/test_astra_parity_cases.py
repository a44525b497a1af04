"""bench/astra_parity.py's random cases are well-formed rank sets our replayer runs, so the
comparison with ASTRA-sim (which needs its binary: not in CI) cannot rot on our side."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.validate import validate_path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import astra_parity as ap  # noqa: E402


@pytest.mark.parametrize("seed", range(8))
def test_a_random_case_validates_and_replays_every_rank(tmp_path, seed):
    name, groups, ranks, dims, sysc, memc = ap.random_case(random.Random(seed))
    RankSet({r: Graph(nodes, rank=r) for r, nodes in ranks.items()}, groups).write(tmp_path, "w")
    if not groups:
        (tmp_path / "comm_group.json").unlink(missing_ok=True)
    else:  # written in the partition's own order, as ASTRA-sim reads it
        assert json.loads((tmp_path / "comm_group.json").read_text()) == {k: list(v) for k, v in groups.items()}
    (tmp_path / "system.json").write_text(json.dumps(ap.per_dimension(sysc, len(dims))))
    (tmp_path / "memory.json").write_text(json.dumps(memc))
    (tmp_path / "network.yml").write_text(ap.network(dims))
    assert not validate_path(tmp_path / "w").errors, name
    ends = ap.run_ours(tmp_path)
    assert sorted(ends) == sorted(ranks) and all(t > 0 for t in ends.values()), name


def test_random_cases_are_the_same_for_a_seed_and_differ_between_seeds():
    assert ap.random_case(random.Random(3))[0] == ap.random_case(random.Random(3))[0]
    assert len({ap.random_case(random.Random(s))[0] for s in range(8)}) > 4
