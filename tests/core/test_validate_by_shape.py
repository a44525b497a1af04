"""Validation one file per shape (`validate_path(by_shape=True)`, what `trace-replay` does on a
set of 256 files or more) against the full validation, file by file: the same report on
generated jobs, and the same findings where one replica of a clean set is spoiled, whether the
spoiling changes its shape (a node) or only the names that a shape leaves out (a group, a peer,
the metadata)."""

from __future__ import annotations

import shutil

import pytest

from chakra_tools.core.etio import TraceReader
from chakra_tools.core.etwrite import write_trace
from chakra_tools.core.graph import find_rank_files
from chakra_tools.core.model import Metadata, make_attrs
from chakra_tools.core.shapes import read_shape
from chakra_tools.core.validate import validate_path

# tp 2 x dp 4 x pp 2: 16 ranks, 8 per pipeline stage, the data-parallel replicas of one shape
JOB = dict(layers=2, hidden=256, heads=4, seq=128, batch=32, vocab=1024, tp=2, dp=4, pp=2, microbatches=2, zero=1)


@pytest.fixture(scope="module")
def job(generated_job):
    return generated_job(**JOB)


def report_of(path, **kw) -> tuple:
    r = validate_path(path, **kw)
    return (r.ranks, r.nodes, r.world_size, dict(r.diagnostics.counts),
            sorted(str(d) for d in r.diagnostics))


def both(path, **kw):
    full, by_shape = report_of(path, **kw), report_of(path, by_shape=True, **kw)
    assert by_shape == full
    return full


def test_a_clean_job_gives_the_same_report_reading_one_file_per_shape(job, monkeypatch):
    from chakra_tools.core import validate

    full = both(job)
    assert full[3] == {} and full[1] > 0
    read_whole = []
    scan_file = validate._scan_file
    monkeypatch.setattr(validate, "_scan_file", lambda rank, *a: read_whole.append(rank) or scan_file(rank, *a))
    report = validate_path(job, by_shape=True)
    files = find_rank_files(job)
    assert report.shapes == {r: read_shape(f) for r, f in files.items()}
    shapes = {(s.digest, s.pattern) for s in report.shapes.values()}
    assert len(read_whole) == len(shapes) < len(files)  # one file per shape read node by node


def spoiled(job, tmp_path, rank: int, change) -> object:
    """A copy of `job` whose rank file `rank` is rewritten as `change(nodes, metadata)` says."""
    out = tmp_path / "spoiled"
    shutil.copytree(job, out)
    f = find_rank_files(out)[rank]
    reader = TraceReader(f)
    nodes, meta = change(list(reader), reader.metadata)
    write_trace(f, nodes, meta)
    return out


def with_attr(node, **attrs):
    return node.replace(attrs={**node.attrs, **make_attrs(**attrs)})


def first_of(nodes, kind):
    return next(i for i, n in enumerate(nodes) if n.type.name == kind)


CHANGES = {
    # the names a shape leaves out
    "a group the comm-group file lacks": lambda nodes, meta: (
        [with_attr(n, pg_name="999") if i == first_of(nodes, "COMM_COLL_NODE") else n for i, n in enumerate(nodes)], meta),
    "the world's name for a group": lambda nodes, meta: (
        [with_attr(n, pg_name="0") if i == first_of(nodes, "COMM_COLL_NODE") else n for i, n in enumerate(nodes)], meta),
    "a group name that is no integer": lambda nodes, meta: (
        [with_attr(n, pg_name="dp") if i == first_of(nodes, "COMM_COLL_NODE") else n for i, n in enumerate(nodes)], meta),
    "a send to itself": lambda nodes, meta: (
        [with_attr(n, comm_dst=3) if i == first_of(nodes, "COMM_SEND_NODE") else n for i, n in enumerate(nodes)], meta),
    "a send to a rank without a file": lambda nodes, meta: (
        [with_attr(n, comm_dst=40) if i == first_of(nodes, "COMM_SEND_NODE") else n for i, n in enumerate(nodes)], meta),
    # a peer that is in the set, but not the one the other side names: found across ranks only
    "a send to another rank of the set": lambda nodes, meta: (
        [with_attr(n, comm_dst=n.comm_dst ^ 2) if i == first_of(nodes, "COMM_SEND_NODE") else n
         for i, n in enumerate(nodes)], meta),
    "a receive from another rank of the set": lambda nodes, meta: (
        [with_attr(n, comm_src=n.comm_src ^ 2) if i == first_of(nodes, "COMM_RECV_NODE") else n
         for i, n in enumerate(nodes)], meta),
    "the metadata of another rank": lambda nodes, meta: (
        nodes, Metadata(meta.version, {**meta.attrs, **make_attrs(rank=5)}, True)),
    "another world size": lambda nodes, meta: (
        nodes, Metadata(meta.version, {**meta.attrs, **make_attrs(world_size=32)}, True)),
    # the shape itself
    "a dependency on a node that is not there": lambda nodes, meta: (
        [n.replace(data_deps=(*n.data_deps, 10**6)) if i == 5 else n for i, n in enumerate(nodes)], meta),
    "a collective of another size": lambda nodes, meta: (
        [with_attr(n, comm_size=n.comm_size + 8) if i == first_of(nodes, "COMM_COLL_NODE") else n
         for i, n in enumerate(nodes)], meta),
}


@pytest.mark.parametrize("name", CHANGES)
def test_one_spoiled_replica_is_found_either_way(job, tmp_path, name):
    """Rank 3 (a data-parallel replica of ranks 1, 5, 7 in stage 0) spoiled: the same findings,
    and at least one that names it."""
    path = spoiled(job, tmp_path, 3, CHANGES[name])
    full = both(path)
    assert full[3], f"{name}: the full validation found nothing: the test spoils nothing"


def test_a_replica_from_another_conversion(job, tmp_path):
    """Every file written by one conversion but rank 3's (the generator records none: set here)."""
    out = tmp_path / "mixed"
    shutil.copytree(job, out)
    for rank, f in find_rank_files(out).items():
        reader = TraceReader(f)
        nodes, meta = list(reader), reader.metadata
        conversion = "another run" if rank == 3 else "this run"
        write_trace(f, nodes, Metadata(meta.version, {**meta.attrs, **make_attrs(conversion=conversion)}, True))
    assert "mixed-conversions" in both(out)[3]


def test_a_replica_without_its_file(job, tmp_path):
    """Rank 3's file removed: a rank below the set's count without a file, and one its group and
    pipeline peers name."""
    out = tmp_path / "gone"
    shutil.copytree(job, out)
    find_rank_files(out)[3].unlink()
    full = both(out)
    assert "missing-rank" in full[3] or "missing-ranks" in full[3]


def test_a_replica_without_metadata(job, tmp_path):
    """Its GlobalMetadata frame cut off: read in full, where the reader says so."""
    from chakra_tools.core.framing import decode_varint

    out = tmp_path / "cut"
    shutil.copytree(job, out)
    f = find_rank_files(out)[3]
    buf = f.read_bytes()
    size, pos = decode_varint(buf, 0)
    f.write_bytes(buf[pos + size:])
    full = both(out)
    assert "no-metadata" in full[3]


def test_a_finding_in_every_file_is_reported_for_every_file(job, tmp_path):
    """Where the first file of a shape has a finding, every file of that shape is read in full:
    the finding of each is its own (here a warning on every rank: a group not decimal)."""
    out = tmp_path / "all"
    shutil.copytree(job, out)
    for f in find_rank_files(out).values():
        reader = TraceReader(f)
        nodes, meta = list(reader), reader.metadata
        write_trace(f, [with_attr(n, is_cpu_op=True) if n.type.name == "COMM_COLL_NODE" else n for n in nodes], meta)
    full = both(out)
    assert full[3]


def test_a_replica_on_a_group_of_another_size_is_found_either_way(job, tmp_path):
    """Collectives that record their group's size (`group_size`, as captures' do): rank 3's
    two-rank group renamed, everywhere in its file, to a four-rank one. Its shape is its
    replicas' (names are left out of it), yet the node check of the recorded size must still
    speak, as it does file by file."""
    import json

    out = tmp_path / "sized"
    shutil.copytree(job, out)
    groups = {k: len(v) for k, v in json.loads((out / "comm_group.json").read_text()).items()}
    for rank, f in find_rank_files(out).items():
        reader = TraceReader(f)
        nodes, meta = list(reader), reader.metadata
        sized = [with_attr(n, group_size=groups[n.pg_name]) if n.type.name == "COMM_COLL_NODE" else n for n in nodes]
        if rank == 3:
            sized = [with_attr(n, pg_name="3") if n.pg_name == "5" else n for n in sized]
        write_trace(f, sized, meta)
    full = both(out)
    assert "group-size-mismatch" in full[3]


@pytest.mark.parametrize("spoil", [None, "the metadata of another rank", "another world size"])
def test_large_metadata_is_read_for_what_the_checks_take(job, tmp_path, spoil):
    """Each rank's GlobalMetadata as a scaled set writes it: its own rank, and a process_groups
    record past SMALL_METADATA (87 KB a rank at 16,384 ranks). By shape, only the attributes the
    cross-rank checks take are decoded from it; the report is the full validation's, and a replica
    whose metadata names another rank or world size is still found."""
    import json

    from chakra_tools.core.shapes import SMALL_METADATA

    out = tmp_path / "big"
    shutil.copytree(job, out)
    record = json.dumps({str(g): {"ranks": list(range(g, g + 64))} for g in range(128)})
    assert len(record) > SMALL_METADATA
    for rank, f in find_rank_files(out).items():
        reader = TraceReader(f)
        nodes, meta = list(reader), reader.metadata
        meta = Metadata(meta.version, {**meta.attrs, **make_attrs(process_groups=record, rank=rank)}, True)
        write_trace(f, *(CHANGES[spoil](nodes, meta) if spoil and rank == 3 else (nodes, meta)))
    full = both(out)
    assert bool(full[3]) == bool(spoil)
    # what was decoded: the three attributes, not the record, and as the whole message gives them
    from chakra_tools.core.etio import metadata_from_pb
    from chakra_tools.core.rankscan import RankScan
    from chakra_tools.core.schema import et_def_pb2 as pb
    from chakra_tools.core.shapes import metadata_fields, _picked, read_shape_and_metadata

    for f in find_rank_files(out).values():
        _, metadata = read_shape_and_metadata(f)
        assert len(_picked(metadata)) < 100 < SMALL_METADATA < len(metadata)
        whole = RankScan(None, None)
        whole.read_metadata(metadata_from_pb(pb.GlobalMetadata.FromString(metadata)))
        assert metadata_fields(metadata) == (whole.world_size, whole.recorded_rank, whole.conversion)
        assert _picked(metadata[:-7]) == metadata[:-7]  # cut short: left whole, for protobuf to refuse


def test_a_clean_set_is_checked_across_ranks_by_class(job, monkeypatch):
    """The clean job's replicas stay rows of their representative's template: no scan is made for
    them, and crosscheck.py (which needs a scan per rank) is not run; a spoiled set is."""
    from chakra_tools.core import validate

    ran = []
    check = validate.check_across_ranks
    monkeypatch.setattr(validate, "check_across_ranks", lambda scans, *a, **kw: ran.append(len(scans)) or check(scans, *a, **kw))
    assert not validate_path(job, by_shape=True).diagnostics
    assert ran == []
    validate_path(job)  # by file: every rank's scan
    assert ran == [len(find_rank_files(job))]
