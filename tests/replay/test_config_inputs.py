"""Network, system and memory configs of the wrong type or out of range: one InputError naming
the file and the key, never a TypeError, an overflow or a replay that does not end (reproducers
minimized from the fuzz harness, tests/fuzz)."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from chakra_tools.core.errors import InputError
from chakra_tools.replay.config import load_memory, load_network, load_system

NET = {"topology": ["Ring"], "npus_count": [4], "bandwidth": [50.0], "latency": [500.0]}
SYSTEM = {"preferred-dataset-splits": 4, "all-reduce-implementation": ["ring"], "peak-perf": 900}


def _refused(loader, tmp_path, name, doc, *needles):
    p = tmp_path / name
    if name.endswith(".json"):
        p.write_text(json.dumps(doc))
    else:  # YAML: its own spellings of non-finite numbers (.inf, .nan) written bare
        p.write_text("\n".join(f"{k}: {json.dumps(v)}".replace('".inf"', ".inf").replace('".nan"', ".nan")
                               .replace('"5e-324"', "5e-324") for k, v in doc.items()))
    with pytest.raises(InputError) as e:
        loader(p)
    assert str(e.value).startswith(str(p)), e.value
    for n in needles:
        assert n in str(e.value), e.value


@pytest.mark.parametrize("key,value,needle", [
    ("preferred-dataset-splits", "four", "preferred-dataset-splits is 'four', not an integer"),
    ("preferred-dataset-splits", 2**31, "preferred-dataset-splits is 2147483648, outside 0..1024"),
    ("active-chunks-per-dimension", [2, 2], "active-chunks-per-dimension is [2, 2], not an integer"),
    ("endpoint-delay", {"x": 1}, "endpoint-delay is {'x': 1}, not an integer"),
    ("endpoint-delay", 2**63, "endpoint-delay is 9223372036854775808, outside"),
    ("peak-perf", "²", "peak-perf is '²', not a number"),
    ("local-mem-bw", math.inf, "local-mem-bw is inf"),
    ("local-mem-bw", 5e-324, "local-mem-bw is 4.94066e-324: give 0 (none) or at least 0.001"),
    ("peak-perf", 1e-9, "peak-perf is 1e-09: give 0 (none) or at least 0.001"),
    ("roofline-enabled", "yes", "roofline-enabled is 'yes'"),
    ("all-reduce-implementation", [2**64 + 1, "x"], "all-reduce-implementation[0] is 18446744073709551617"),
    ("all-gather-implementation", ["ring", "spiral"], "all-gather-implementation[1]: unknown collective implementation 'spiral'"),
    ("collective-optimization", [], "collective-optimization is []"),
])
def test_system_values_of_the_wrong_type_or_range(tmp_path, key, value, needle):
    _refused(load_system, tmp_path, "sys.json", {**SYSTEM, key: value}, needle)


@pytest.mark.parametrize("key,value,needle", [
    ("npus_count", ["four"], "npus_count[0] is 'four', not an integer"),
    ("npus_count", [".inf"], "npus_count[0] is inf, not an integer"),
    ("bandwidth", [".nan"], "bandwidth[0] is nan"),
    ("bandwidth", ["5e-324"], "bandwidth[0] is 5e-324, outside"),
    ("latency", [2**63], "latency[0] is 9223372036854775808, outside"),
    ("latency", [[1]], "latency[0] is [1], not a number"),
    ("topology", [["Ring"]], "topology[0]: unknown topology ['Ring']"),
    ("in_network_offload", ["x"], "in_network_offload[0] is 'x'"),
    ("topology", [], "one entry per dimension"),
])
def test_network_values_of_the_wrong_type_or_range(tmp_path, key, value, needle):
    _refused(load_network, tmp_path, "net.yml", {**NET, key: value}, needle)


@pytest.mark.parametrize("key,value,needle", [
    ("remote-mem-bw", "²", "remote-mem-bw is '²', not a number"),
    ("remote-mem-latency", [1], "remote-mem-latency is [1]"),
    ("num-nodes", 1.5, "num-nodes is 1.5, not an integer"),
    ("memory-type", ["MEMORY_POOL"], "unknown memory-type ['MEMORY_POOL']"),
])
def test_memory_values_of_the_wrong_type_or_range(tmp_path, key, value, needle):
    _refused(load_memory, tmp_path, "mem.json", {"memory-type": "MEMORY_POOL", "remote-mem-bw": 256, key: value},
             needle)


def test_integral_floats_and_astra_sim_spellings_still_read(tmp_path):
    p = tmp_path / "net.yml"
    p.write_text("topology: [ Ring, Switch ]\nnpus_count: [ 4.0, 2 ]\nbandwidth: [ 5e1, 25.5 ]\n"
                 "latency: [ 500, 0 ]\nin_network_offload: [ false, 1 ]\n")
    net = load_network(p)
    assert net.npus == 8 and net.dims[1].in_network_offload and net.dims[0].npus == 4
    assert net.dims[0].bandwidth_gbps == 50.0  # 5e1: a string to PyYAML, a number to ASTRA-sim
    s = tmp_path / "sys.json"
    s.write_text(json.dumps({"preferred-dataset-splits": 0, "all-reduce-implementation": ["oneRing", "direct8"],
                             "roofline-enabled": True, "boost-mode": 0}))
    sc = load_system(s)
    assert sc.splits == 1 and sc.algorithm("all-reduce", 1) == "direct" and sc.roofline


def test_trace_replay_names_the_system_file_and_key(shared_fixtures, tmp_path):
    from chakra_tools.cli import replay

    s = tmp_path / "Ring_4chunks.json"
    doc = json.loads((shared_fixtures / "astra-sim/configs/Ring_4chunks.json").read_text())
    s.write_text(json.dumps({**doc, "preferred-dataset-splits": "four"}))
    r = CliRunner().invoke(replay.app, [str(shared_fixtures / "astra-sim/all_reduce_4npus_1MB"),
                                        "--network", str(shared_fixtures / "astra-sim/configs/Ring_4npus.yml"),
                                        "--system", str(s)])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == f"error: {s}: preferred-dataset-splits is 'four', not an integer"
