"""The collector pause around a conversion (core.collector.gc_paused) and the console scripts' exit."""

from __future__ import annotations

import gc
import subprocess
import sys

from chakra_tools.core.collector import gc_paused


def test_what_a_paused_block_made_goes_to_the_oldest_generation():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        kept = [[i] for i in range(50_000)]
    assert gc.isenabled()
    assert gc.get_count()[0] < 1000  # no first collection left to walk the 50,000 new lists
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert id(kept) in oldest and id(kept[-1]) in oldest
    assert gc.get_freeze_count() == 0


def test_objects_the_program_froze_stay_frozen():
    code = ("import gc; from chakra_tools.core.collector import gc_paused; x = [[1]]; gc.freeze();"
            "n = gc.get_freeze_count()\n"
            "with gc_paused(): y = [[2]]\n"
            "assert gc.get_freeze_count() == n > 0 and gc.isenabled(), gc.get_freeze_count()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def _frozen_at_exit(call: str) -> str:
    """What a probe registered before `call` sees at exit (atexit runs the last registered first,
    so a freeze registered by the command runs before the probe)."""
    code = ("import atexit, gc, sys; from chakra_tools.cli import main;"
            "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0));"
            f"sys.argv = ['trace-validate', '--help']; {call}")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "Usage" in proc.stdout, proc.stdout + proc.stderr
    return proc.stdout


def test_console_scripts_freeze_at_exit_so_the_last_collection_skips_the_graphs():
    assert "frozen True" in _frozen_at_exit("main.validate_main()")
    # the same command run in process (as the tests' CliRunner does) leaves the collector alone
    assert "frozen False" in _frozen_at_exit("main.validate.app(args=['--help'], standalone_mode=False)")
