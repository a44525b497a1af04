"""Fixtures of the visualize tests: a tiny timed rank set, a replay result in trace-replay's
format, and headless Chromium (installed by ensure_chromium.sh when `make test` runs it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import CommType, Node, NodeType as T, make_attrs

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "visualize"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars"]


def tiny_rankset() -> RankSet:
    """Two ranks, times in µs, every lane kind and every dependency kind.

    rank r: %1 host op (tid 7) 0..10; %2 gemm 10..40 (data dep %1); %3 all_reduce pg 1 40..60
    (data %2); %4 send to the other rank (rank 0) / recv from it (rank 1) 60..65 (ctrl %3);
    %5 gemm 65..80 (data %4, ctrl %2).
    """
    graphs = {}
    for r in (0, 1):
        peer = 1 - r
        p2p = (T.COMM_SEND_NODE, make_attrs(comm_dst=peer, comm_tag=5, comm_size=1024)) if r == 0 else \
              (T.COMM_RECV_NODE, make_attrs(comm_src=peer, comm_tag=5, comm_size=1024))
        nodes = [
            Node(1, "aten::linear", T.COMP_NODE, start_time_micros=100, duration_micros=10,
                 attrs=make_attrs(is_cpu_op=True, tid=7)),
            Node(2, "sm80_gemm", T.COMP_NODE, (1,), start_time_micros=110, duration_micros=30 + r,
                 attrs=make_attrs(is_cpu_op=False)),
            Node(3, "nccl:all_reduce", T.COMM_COLL_NODE, (2,), start_time_micros=141, duration_micros=20,
                 attrs=make_attrs(comm_type=CommType.ALL_REDUCE, comm_size=4 << 20, pg_name="1", is_cpu_op=False)),
            Node(4, "nccl:send" if r == 0 else "nccl:recv", p2p[0], (), (3,), start_time_micros=161,
                 duration_micros=5, attrs={**p2p[1], **make_attrs(is_cpu_op=False)}),
            Node(5, "sm80_gemm", T.COMP_NODE, (4,), (2,), start_time_micros=166, duration_micros=15,
                 attrs=make_attrs(is_cpu_op=False)),
        ]
        graphs[r] = Graph(nodes, rank=r)
    return RankSet(graphs, {"1": (0, 1)}, prefix="tiny")


@pytest.fixture
def tiny(tmp_path) -> Path:
    """The tiny rank set written to disk; returns its prefix."""
    tiny_rankset().write(tmp_path / "et", "tiny")
    return tmp_path / "et" / "tiny"


def replay_result() -> dict:
    """A replay result as `trace-replay --out` writes it (issue 5's documented keys)."""
    events, deps = [], []
    for r in (0, 1):
        events += [
            {"rank": r, "node_id": 2, "name": "sm80_gemm", "type": "COMP_NODE", "lane": "compute",
             "start_ns": 0, "end_ns": 30_000 + r},
            {"rank": r, "node_id": 3, "name": "nccl:all_reduce", "type": "COMM_COLL_NODE", "lane": "comm",
             "start_ns": 30_001, "end_ns": 73_001},
            {"rank": r, "node_id": 5, "name": "sm80_gemm", "type": "COMP_NODE", "lane": "compute",
             "start_ns": 73_001, "end_ns": 88_001},
        ]
        deps += [[r, 2, r, 3], [r, 3, r, 5]]
    deps.append([0, 3, 1, 3])
    return {
        "ranks": [{"rank": r, "finish_ns": 88_001, "compute_ns": 45_000 + r, "exposed_comm_ns": 43_000,
                   "overlap_ns": 0, "idle_ns": 1 - r} for r in (0, 1)],
        "collectives": [{"node_id": 3, "name": "nccl:all_reduce", "comm_type": "ALL_REDUCE", "bytes": 4 << 20,
                         "pg": "1", "start_ns": 30_001, "end_ns": 73_001, "ranks": [0, 1]}],
        "events": events, "deps": deps, "critical_path": [[0, 2], [0, 3], [1, 5]],
        "makespan_ns": 88_001, "config": {"network": "inline"},
    }


@pytest.fixture
def replay_json(tmp_path) -> Path:
    p = tmp_path / "result.json"
    p.write_text(json.dumps(replay_result()))
    return p


@pytest.fixture(scope="session")
def dlrm_kineto(unpack) -> Path:
    """Kineto traces of 8 DLRM ranks (param fixture): a captured run without a manifest."""
    return unpack("param/dlrm_8rank_kineto.tar.gz") / "dlrm_kineto"


# --------------------------------------------------------------------------------------------
# headless Chromium
# --------------------------------------------------------------------------------------------

def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def chromium():
    """Run headless Chromium on a file: returns a function (path, screenshot=None) -> rendered DOM."""
    exe = chromium_path()
    if exe is None:
        pytest.skip("chromium not installed: run tests/visualize/ensure_chromium.sh (make test does)")

    def render(page: Path, screenshot: Path | None = None, size: str = "1400,2600") -> str:
        with tempfile.TemporaryDirectory() as profile:
            base = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={size}"]
            url = page.resolve().as_uri()
            dom = subprocess.run([*base, "--virtual-time-budget=2000", "--dump-dom", url],
                                 capture_output=True, timeout=120, check=True).stdout.decode()
            if screenshot is not None:
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                subprocess.run([*base, f"--screenshot={screenshot}", url], capture_output=True,
                               timeout=120, check=True)
        return dom

    return render
