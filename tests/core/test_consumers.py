"""`trace-validate --for astra-sim`: what ASTRA-sim 2.0 rejects or mis-runs, one rule per test-made
file (docs/reference/trace-validate.md, "Checking for ASTRA-sim"), and a converted trace that passes them all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chakra_tools.convert.run import convert, inputs_from_files
from chakra_tools.core.etwrite import write_trace
from chakra_tools.core.graph import RankSet
from chakra_tools.core.rankfiles import write_comm_groups
from chakra_tools.core.model import Attr, CommType, Node, NodeType, make_attrs
from chakra_tools.core.validate import validate_path

COMP, COLL, META = NodeType.COMP_NODE, NodeType.COMM_COLL_NODE, NodeType.METADATA_NODE
CPU = make_attrs(is_cpu_op=True)


def coll(nid, kind=CommType.ALL_REDUCE, size=1024, pg="1", deps=(), **extra):
    return Node(nid, f"c{nid}", COLL, tuple(deps),
                attrs=make_attrs(comm_type=kind, comm_size=size, pg_name=pg, is_cpu_op=False, **extra))


def write_set(folder: Path, per_rank: dict[int, list[Node]], groups=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r, nodes in per_rank.items():
        write_trace(folder / f"trace.{r}.et", nodes)
    if groups is not None:
        write_comm_groups(folder / "comm_group.json", groups)
    return folder


def found(folder, severity=None, target="astra-sim") -> set[str]:
    report = validate_path(folder, target=target)
    return {d.code for d in report.diagnostics if severity is None or d.severity == severity}


def both_ranks(nodes):
    return {0: nodes, 1: nodes}


def test_a_clean_rank_set_passes(tmp_path):
    nodes = [Node(1, "mm", COMP, attrs=CPU), coll(2, deps=[1]), coll(3, CommType.ALL_GATHER, deps=[2])]
    assert found(write_set(tmp_path, both_ranks(nodes), {"1": [0, 1]})) == set()


def test_metadata_node_is_an_error_for_astra_sim_only(tmp_path):
    nodes = [Node(1, "process_group:init", META), coll(2, deps=[1])]
    folder = write_set(tmp_path, both_ranks(nodes), {"1": [0, 1]})
    assert found(folder, "error") == {"astra-metadata-node"}
    assert found(folder, target=None) == set()  # valid Chakra: only ASTRA-sim aborts on it


@pytest.mark.parametrize("kind,code,severity", [
    (CommType.BARRIER, "astra-unsupported-collective", "error"),
    (CommType.REDUCE, "astra-unsupported-collective", "error"),
    (CommType.GATHER, "astra-unsupported-collective", "error"),
    (CommType.BROADCAST, "astra-broadcast", "warning"),
])
def test_collective_kinds_astra_sim_cannot_simulate(tmp_path, kind, code, severity):
    folder = write_set(tmp_path, both_ranks([coll(1, kind)]), {"1": [0, 1]})
    assert found(folder, severity) == {code}


def test_comm_size_missing_or_of_another_integer_kind(tmp_path):
    no_size = Node(1, "ar", COLL, attrs=make_attrs(comm_type=CommType.ALL_REDUCE, pg_name="1", is_cpu_op=False))
    int32 = coll(2).replace(attrs={**coll(2).attrs, "comm_size": Attr("int32_val", 1024)})
    folder = write_set(tmp_path, both_ranks([no_size, int32]), {"1": [0, 1]})
    assert found(folder, "error") == {"missing-comm-size", "attr-kind"}


def test_pg_name_absent_from_comm_group_or_without_the_file(tmp_path):
    unknown = write_set(tmp_path / "a", both_ranks([coll(1, pg="7")]), {"1": [0, 1]})
    assert found(unknown, "error") == {"unknown-pg"}
    no_file = write_set(tmp_path / "b", both_ranks([coll(1, pg="2")]))
    assert found(no_file, "error") == {"astra-no-comm-groups"}
    assert "astra-no-comm-groups" not in found(no_file, target=None)


def test_dangling_and_forward_dependencies(tmp_path):
    nodes = [Node(1, "a", COMP, (3,), attrs=CPU), Node(2, "b", COMP, (9,), attrs=CPU),
             Node(3, "c", COMP, attrs=CPU)]
    folder = write_set(tmp_path, {0: nodes})
    assert found(folder, "error") == {"dangling-data-dep"}
    assert found(folder, "warning") == {"forward-dep"}
    assert "forward-dep" not in found(folder, target=None)


def test_node_kinds_and_cpu_flags(tmp_path):
    nodes = [Node(1, "gone", NodeType.INVALID_NODE), Node(2, "kernel", COMP),
             coll(3).replace(attrs={**coll(3).attrs, **make_attrs(is_cpu_op=True)})]
    folder = write_set(tmp_path, both_ranks(nodes), {"1": [0, 1]})
    # a COMP node without is_cpu_op is GPU work there, as intended by ASTRA-sim's own files
    assert found(folder, "warning") == {"astra-invalid-node", "comm-is-cpu-op"}
    assert "astra-comm-on-cpu" in found(folder, "error")


def test_cli_for_astra_sim_exit_codes(tmp_path):
    folder = write_set(tmp_path, both_ranks([Node(1, "process_group:init", META)]))
    exe = [sys.executable, "-c", "from chakra_tools.cli.main import validate_main; validate_main()"]
    plain = subprocess.run(exe + [str(folder)], capture_output=True, text=True)
    astra = subprocess.run(exe + [str(folder), "--for", "astra-sim"], capture_output=True, text=True)
    bad = subprocess.run(exe + [str(folder), "--for", "ns-3"], capture_output=True, text=True)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert astra.returncode == 1 and "[astra-metadata-node]" in astra.stdout
    assert bad.returncode == 2 and "astra-sim" in bad.stderr


def test_a_converted_trace_has_nothing_astra_sim_flags(shared_fixtures, tmp_path):
    """Chakra's own 1.0.2 host trace (process_group:init, all_gather), given as both ranks of
    its 2-rank job: process-group setup is a COMP node, the groups are in comm_group.json."""
    host = _unpacked_102(shared_fixtures, tmp_path)
    convert(inputs_from_files([str(host), str(host)], [], []), tmp_path / "out", executor="serial")
    report = validate_path(tmp_path / "out", target="astra-sim")
    assert report.nodes > 0 and not [d for d in report.diagnostics if d.code != "durations-missing"]
    # the process groups the METADATA node held: comm_group.json and each rank's GlobalMetadata
    rs = RankSet.load(tmp_path / "out")
    in_metadata = json.loads(rs[1].metadata.attrs["process_groups"].value)
    assert {k: tuple(v["ranks"]) for k, v in in_metadata.items()} == rs.comm_groups == {"1": (0, 1)}
    assert in_metadata["1"]["torch_name"] == "0"  # the trace's own name (its pg list has no pg_desc)
    metadata_run = convert(inputs_from_files([str(host), str(host)], [], []), tmp_path / "meta",
                           executor="serial", metadata_nodes=True)
    assert metadata_run.files
    assert "astra-metadata-node" in found(tmp_path / "meta", "error")


def _unpacked_102(shared_fixtures, tmp_path) -> Path:
    import tarfile

    with tarfile.open(shared_fixtures / "chakra/host_et_1.0.2_allgather_2rank.tgz") as tf:
        tf.extractall(tmp_path / "src", filter="data")
    return next(p for p in (tmp_path / "src").rglob("1.0.2-chakra.0.0.4.json") if not p.name.startswith("._"))
