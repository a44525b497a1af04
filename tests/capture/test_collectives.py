"""Every communication kind, captured on 2 ranks: each call annotated with the right kind, group,
sizes, dtype, root and peer, in both traces of both ranks (examples/collectives.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from chakra_tools.core.annotations import parse_annotation
from capture_helpers import device_annotations, host_annotations

W = 2


@pytest.fixture(scope="module")
def calls(collectives_run):
    """rank -> list of annotation fields in host-trace order."""
    assert collectives_run.code == 0, collectives_run.stderr[-3000:]
    assert collectives_run.manifest["captured_steps"] == [1]
    out = {}
    for rank in (0, 1):
        host = host_annotations(collectives_run.host(rank))
        assert Counter(host) == Counter(device_annotations(collectives_run.device(rank)))
        out[rank] = [f for f in map(parse_annotation, host) if f]  # calls (not their waits)
    return out


def by_api(calls, rank, api):
    found = [c for c in calls[rank] if c["api"] == api]
    assert found, f"rank {rank}: no {api} annotation"
    return found


EXPECTED = {  # api: (op, in_nelems, out_nelems) on rank 0 of 2
    "all_reduce": ("all_reduce", 16, 16),
    "reduce": ("reduce", 24, 24),
    "broadcast": ("broadcast", 32, 32),
    "all_gather": ("all_gather", 8, 8 * W),
    "all_gather_into_tensor": ("all_gather", 10, 10 * W),
    "gather": ("gather", 12, 12 * W),
    "scatter": ("scatter", 14 * W, 14),
    "reduce_scatter": ("reduce_scatter", 6 * W, 6),
    "reduce_scatter_tensor": ("reduce_scatter", 5 * W, 5),
    "all_to_all": ("all_to_all", 3 * W, 3 * W),
    "funcol.all_reduce": ("all_reduce", 50, 50),
    "funcol.all_gather_tensor": ("all_gather", 52, 52 * W),
    "funcol.reduce_scatter_tensor": ("reduce_scatter", 54 * W, 54),
    "funcol.all_to_all_single": ("all_to_all", 56 * W, 56 * W),
    "funcol.broadcast": ("broadcast", 58, 58),
}


@pytest.mark.parametrize("api", sorted(EXPECTED))
def test_collective_fields(calls, api):
    op, n_in, n_out = EXPECTED[api]
    f = by_api(calls, 0, api)[0]
    assert (f["op"], f["in_nelems"], f["out_nelems"]) == (op, n_in, n_out)
    assert f["dtype"] == "float32" and f["in_bytes"] == 4 * n_in and f["out_bytes"] == 4 * n_out
    assert f["pg"] == "0" and f["pg_ranks"] == [0, 1] and f["rank"] == 0
    assert f["async"] is api.startswith("funcol.")


def test_roots_are_global_ranks(calls):
    assert by_api(calls, 0, "reduce")[0]["root"] == 0
    assert by_api(calls, 1, "broadcast")[0]["root"] == 1
    assert by_api(calls, 1, "gather")[0]["root"] == 0
    assert by_api(calls, 1, "gather")[0]["out_nelems"] == 0  # no list off the root


def test_alltoallv_splits(calls):
    for rank in (0, 1):
        f = [c for c in by_api(calls, rank, "all_to_all_single")][0]
        rows_out = [rank + 1 + p for p in range(W)]
        rows_in = [p + 1 + rank for p in range(W)]
        assert f["in_split"] == [4 * r for r in rows_out]
        assert f["out_split"] == [4 * r for r in rows_in]
        assert f["in_nelems"] == sum(f["in_split"])


def test_subgroup_and_dtype(calls):
    f = [c for c in calls[0] if c["pg"] == "1"]
    assert len(f) == 1
    assert f[0]["pg_desc"] == "example_subgroup" and f[0]["dtype"] == "float64"
    assert f[0]["elem_bytes"] == 8 and f[0]["async"] is True


def test_barrier(calls):
    f = by_api(calls, 0, "barrier")[0]
    assert f["op"] == "barrier" and f["in_nelems"] == 0


@pytest.mark.parametrize("api,n,tag,dtype", [("send", 40, 0, "float32"),
                                             ("isend", 44, 7, "float32")])
def test_point_to_point_pairs(calls, api, n, tag, dtype):
    recv_api = api.replace("send", "recv")
    for rank in (0, 1):
        s = by_api(calls, rank, api)[0]
        r = by_api(calls, 1 - rank, recv_api)[0]
        assert (s["op"], r["op"]) == ("send", "recv")
        assert s["peer"] == 1 - rank and r["peer"] == rank
        assert s["tag"] == r["tag"] == tag
        assert s["in_nelems"] == r["out_nelems"] == n and s["dtype"] == r["dtype"] == dtype


def test_batch_isend_irecv(calls):
    for rank in (0, 1):
        sends = [c for c in by_api(calls, rank, "isend") if c["tag"] == 3]
        recvs = [c for c in by_api(calls, rank, "irecv") if c["tag"] == 3]
        assert len(sends) == len(recvs) == 1
        assert sends[0]["dtype"] == "bfloat16" and sends[0]["elem_bytes"] == 2
        assert sends[0]["in_bytes"] == 96 and recvs[0]["peer"] == 1 - rank


def test_same_collective_sequence_on_both_ranks(calls):
    def coll(rank):
        return [(c["pg"], c["seq"], c["op"], c["in_nelems"] if c["op"] == "all_reduce" else None)
                for c in calls[rank] if c["op"] not in ("send", "recv")]
    assert coll(0) == coll(1)


def test_no_annotation_failures(collectives_run):
    for r in collectives_run.manifest["ranks"]:
        assert r["annotation_failures"] == []
        names = host_annotations(collectives_run.host(r["rank"]))
        assert r["annotated_calls"] == sum(parse_annotation(n) is not None for n in names)  # waits apart
