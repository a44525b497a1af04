"""What every console script does before its command: `--version`, and a closed pipe ending it
quietly, as `cat file | head` ends `cat` (no "Broken pipe" error, no traceback)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chakra_tools.cli.main import version

BIN = Path(sys.executable).parent
SCRIPTS = ("chakra-tools", "trace-capture", "trace-convert", "trace-replay", "trace-validate", "trace-visualize")


@pytest.mark.parametrize("script", SCRIPTS)
def test_version(script):
    exe = shutil.which(script, path=str(BIN))
    if exe is None:
        pytest.skip(f"{script} is not installed beside {sys.executable} (pip install -e .)")
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == f"{script} {version()}", proc
    assert version()[0].isdigit()


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    exe = shutil.which("trace-convert", path=str(BIN))
    if exe is None:
        pytest.skip("trace-convert is not installed (pip install -e .)")
    out = tmp_path / "gpt"
    subprocess.run([exe, "generate", "--config", str(Path(__file__).parents[1] / "examples/workloads/gpt_8rank.yml"),
                    "-o", str(out)], check=True, capture_output=True, timeout=300)
    dump = subprocess.Popen([str(BIN / "trace-replay"), str(out), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dump.stdout.readline()  # `| head -1`: one line read, then the pipe is closed
    dump.stdout.close()
    assert dump.wait(timeout=120) == -13  # ended by SIGPIPE, as Unix tools are
    assert dump.stderr.read() == b""
