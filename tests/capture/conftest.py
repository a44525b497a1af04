"""Real captured runs shared by the capture tests: each is run once per session and read by many
small tests. Runs use the repository's examples, 1 thread per rank, 2 ranks at most."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from capture_helpers import EXAMPLES, LAUNCH_2, Run, run_capture  # noqa: E402


@pytest.fixture(scope="session")
def mlp_run(tmp_path_factory) -> Run:
    """The MLP example, single process, 6 steps, default schedule (captures steps 2 and 3)."""
    tmp = tmp_path_factory.mktemp("mlp")
    out = tmp / "run"
    return run_capture(["--out", str(out), str(EXAMPLES / "mlp.py"), "--steps", "6"], tmp, out)


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory) -> Run:
    """DDP over gloo on 2 ranks through torchrun, 5 steps."""
    tmp = tmp_path_factory.mktemp("ddp")
    out = tmp / "run"
    return run_capture(["--out", str(out), "--", *LAUNCH_2, str(EXAMPLES / "ddp.py"),
                        "--steps", "5"], tmp, out)


@pytest.fixture(scope="session")
def collectives_run(tmp_path_factory) -> Run:
    """Every communication kind on 2 ranks, steps marked with capture.step(); captures step 1."""
    tmp = tmp_path_factory.mktemp("coll")
    out = tmp / "run"
    return run_capture(["--out", str(out), "--wait", "0", "--active", "1", "--", *LAUNCH_2,
                        str(EXAMPLES / "collectives.py"), "--steps", "3"], tmp, out)
