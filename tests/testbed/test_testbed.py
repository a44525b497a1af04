"""The test bed end to end: a 2-node cluster on this machine (network namespaces, tbf-shaped
100 Mbit/s uplinks), a data-parallel surrogate job captured the way a cluster user captures it
(one `trace-capture -- torchrun --nnodes 2 --node-rank i` per node, into one shared run folder),
converted as one job, the links measured by the probe under the same launcher, calibrated, and
predicted on the probed network against the capture's own measured steps.

Needs root (network namespaces, tc) and torch: skipped with the reason where either is missing.
The what-if check against real runs at other rates and scales is the slow test below and
`bench/whatif_check.py` (make bench), which measures every job and case.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from chakra_tools.convert.run import convert, inputs_from_run  # noqa: E402
from chakra_tools.core.graph import RankSet  # noqa: E402
from chakra_tools.core.manifest import read_manifest  # noqa: E402
from chakra_tools.core.placement import placement_of  # noqa: E402
from chakra_tools.replay import CaptureModes, replay  # noqa: E402
from chakra_tools.replay.clusterfit import INTER  # noqa: E402
from chakra_tools.replay.fidelity import compare_with_manifest  # noqa: E402
from chakra_tools.replay.links import parse_changes  # noqa: E402
from chakra_tools.replay.calfile import write_calibration  # noqa: E402
from chakra_tools.replay.netfit import calibrate  # noqa: E402
from chakra_tools.replay.sharefit import fit_sharing  # noqa: E402
from chakra_tools.replay.spec import SystemSpec  # noqa: E402
from chakra_tools.testbed.cluster import Cluster, Shaping, unavailable  # noqa: E402
from chakra_tools.testbed.jobs import PROBE, failed, host_load, measured_step_ns, run_job  # noqa: E402

WHY = unavailable()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"test bed: {WHY}")

JOB = ["--layers", "4", "--bucket-kib", "256"]
RATE = 100.0  # Mbit/s
SHAPED_NS_PER_BYTE = 8e3 / RATE  # 80 ns per byte at 100 Mbit/s


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """(capture folder, converted rank set, calibration folder) of the job on 2 nodes x 2 ranks."""
    work = tmp_path_factory.mktemp("testbed")
    cap, et, net, probe = work / "cap", work / "et", work / "net", work / "probe"
    with Cluster(2, Shaping(RATE)) as cl:
        runs = run_job(cl, 2, [*JOB, "--steps", "5"], logs=work / "logs-cap", capture=cap,
                       capture_options=["--wait", "1", "--warmup", "1", "--active", "2"], timeout_s=300)
        assert not failed(runs), failed(runs)
        runs = run_job(cl, 2, ["--out", str(probe), "--max-size", str(1 << 20), "--repeats", "3"],
                       logs=work / "logs-probe", module=PROBE, timeout_s=300)
        assert not failed(runs), failed(runs)
    convert(inputs_from_run(cap), et)
    net.mkdir()
    write_calibration(fit_sharing(et, calibrate(et, probe=probe))[0], net)  # as trace-convert calibrate does
    return cap, et, net


def test_one_capture_per_node_converts_as_one_job(captured):
    cap, et, _ = captured
    assert sorted(p.name for p in cap.iterdir() if p.is_dir()) == ["node-0", "node-1"]
    man = read_manifest(cap)
    assert [r.rank for r in man.ranks] == [0, 1, 2, 3] and len(man.nodes) == 2
    hosts = [r.host for r in man.ranks]
    assert hosts[0] == hosts[1] != hosts[2] == hosts[3]
    place = placement_of(RankSet.load(et))
    assert place is not None and place.ranks_per_node == 2 and place.contiguous


def test_the_probe_measures_the_shaped_links(captured):
    _, _, net = captured
    doc = json.loads((net / "fit.json").read_text())["cluster"]
    intra, inter = doc["levels"]
    assert inter["name"] == INTER and inter["shared"] and inter["npus"] == 2
    # tbf at 100 Mbit/s: 80 ns per byte of payload, a few percent more with TCP/IP headers
    assert SHAPED_NS_PER_BYTE * 0.95 < inter["ns_per_byte"] < SHAPED_NS_PER_BYTE * 1.2
    assert intra["ns_per_byte"] < inter["ns_per_byte"] / 10  # loopback within a machine
    assert "FullyConnected, Switch" in (net / "network.yml").read_text()
    # tbf's bucket: what its 4 ms timer tick releases at the rate passes at once after idle
    assert 2e6 < inter["burst_ns"] < 8e6 and intra["burst_ns"] == 0
    # gloo's sends get no further ahead of a late receive than that burst carries
    assert doc["p2p_window_bytes"] < 16 << 10


def test_the_probed_network_predicts_the_captured_step(captured):
    cap, et, net = captured
    doc = replay(et, SystemSpec(kind_fit=net).backend(4), modes=CaptureModes(),
                 record_events=False).to_dict(events=False)
    error = compare_with_manifest(doc, cap)["job"]["error"]
    # the benchmark measures +1..3% on an idle machine (bench/whatif_check.py). Here the capture
    # runs beside the other tests on two cores, which lengthens its measured steps: -21% seen so
    # under `make test`; the bound catches a model off by more than the host's load can explain
    assert abs(error) < 0.3, error


@pytest.mark.slow
def test_what_if_five_times_faster_uplinks_against_a_real_run(captured, tmp_path):
    _, et, net = captured
    result = tmp_path / "real.json"
    with Cluster(2, Shaping(RATE * 5)) as cl:
        runs = run_job(cl, 2, [*JOB, "--steps", "8", "--warmup", "3", "--result", str(result)],
                       logs=tmp_path / "logs", timeout_s=300)
        assert not failed(runs), failed(runs)
    real = measured_step_ns(result)
    assert 0 < host_load(result) <= 1  # 4 ranks' threads, on however many cores this host has
    steps = json.loads(result.read_text())["steps_ns"]
    assert len(steps) == 4 and all(len(r) == 5 and min(r) > 0 for r in steps)  # every rank's timed steps
    spec = SystemSpec(kind_fit=net, links=parse_changes(["inter-node=x5"]))
    doc = replay(et, spec.backend(4), record_events=False).to_dict(events=False)
    predicted = max(r["finish_ns"] for r in doc["ranks"]) / 2
    assert abs(predicted - real) / real < 0.15, (predicted, real)


@pytest.mark.slow
def test_the_probes_fit_prices_collectives_on_three_machines(captured, tmp_path):
    # bench/collectives_check.py's check, one target: the network fitted on 2 machines at 100
    # Mbit/s prices what the probe measures on 3 at 200 Mbit/s
    from statistics import fmean, median

    from chakra_tools.core.probe import read_probe
    from chakra_tools.replay.calfile import read_calibration

    _, _, net = captured
    probe = tmp_path / "probe"
    with Cluster(3, Shaping(RATE * 2)) as cl:
        runs = run_job(cl, 2, ["--out", str(probe), "--max-size", str(1 << 20), "--repeats", "3"],
                       logs=tmp_path / "logs", module=PROBE, timeout_s=300)
        assert not failed(runs), failed(runs)
    rows = [r for r in read_calibration(net).cluster.priced(read_probe(probe), parse_changes(["inter-node=x2"]))
            if r["ranks"] == 6]
    assert {r["kind"] for r in rows} >= {"ALL_REDUCE", "ALL_GATHER", "ALL_TO_ALL", "BROADCAST"}
    # calls whose bytes dominate: 3.4% on average in bench/collectives_check.py's run, and noise on 2 cores
    assert fmean(abs(r["error"]) for r in rows if r["size"] >= 256 << 10) < 0.15
    # small all-to-alls against what a job pays for them (their mean wait), priced from a floor per
    # peer: 16-39% off there over the runs so far, each two probes' draws of a long-tailed wait
    # (38-54% as a floor per round at the median)
    small = [r for r in rows if r["kind"] == "ALL_TO_ALL" and r["size"] < 64 << 10]
    assert small and median(abs(r["mean_error"]) for r in small) < 0.45
