"""bench/fidelity_fuzz.py: its generator (every seed a valid script, the same one every time, and
every feature it promises drawn somewhere) and a smoke run of a handful of seeds end to end.

No error thresholds here (the machine is noisy): the smoke run asserts that every script was
captured, converted and replayed both ways, and the shape of the report. The distribution is
measured by `make bench` and reported in docs/validation.md.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "fidelity_fuzz.py"
#: FSDP2 + send/recv + functional collectives; DDP + async all_gather + broadcast on even steps;
#: a pipeline by send + isend/irecv; batch_isend_irecv alone (steps by capture.step())
SMOKE_SEEDS = (0, 5, 8, 12)


def _module():
    spec = importlib.util.spec_from_file_location("fidelity_fuzz", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_every_seed_is_a_valid_script_and_the_same_every_time():
    fuzz = _module()
    for seed in range(200):
        script = fuzz.generate(seed)
        compile(script.source, f"seed{seed}.py", "exec")
        assert script.ranks in (1, 2) and script.steps == 2 + script.active + 1
        assert f"fidelity_fuzz seed {seed}:" in script.source
    assert fuzz.generate(17).source == fuzz.generate(17).source
    assert fuzz.generate(17).source != fuzz.generate(18).source


def test_the_generator_draws_every_feature():
    fuzz = _module()
    text = "\n".join(f for seed in range(200) for f in fuzz.generate(seed).features)
    sources = "\n".join(fuzz.generate(seed).source for seed in range(200))
    for feature in ("DDP 1 bucket", "DDP 3 bucket", "FSDP2 fully_shard", "manual sync", "local sync",
                    "grad accumulation x4", "pipeline 2 stages", "by isend", "by send",
                    "send/recv", "isend/irecv", "batch_isend_irecv", "async", "compute",
                    "a step without communication", "no model", "1 rank(s)", "2 rank(s)",
                    "between backward and opt.step()", "after opt.step()", "even steps"):
        assert feature in text, feature
    for kind in fuzz.COLLECTIVES + tuple(f"funcol.{k}" for k in fuzz.FUNCOL):
        assert f"{kind} " in text, kind
    assert "model.no_sync()" in sources and "set_requires_gradient_sync" in sources


def test_p95_by_nearest_rank():
    fuzz = _module()
    assert fuzz.p95([0.01] * 19 + [0.5]) == 0.01  # one outlier in 20 is above the 95th percentile
    assert fuzz.p95([0.01] * 18 + [0.5, 0.6]) == 0.5


def test_a_handful_of_seeds_capture_convert_and_replay(tmp_path):
    pytest.importorskip("torch")
    bin_dir = Path(sys.executable).parent
    for tool in ("trace-capture", "trace-convert", "trace-replay", "torchrun"):
        if not (bin_dir / tool).exists():
            pytest.skip(f"{tool} not installed in {bin_dir}")
    report, keep = tmp_path / "report.json", tmp_path / "kept"
    seeds = ",".join(map(str, SMOKE_SEEDS))
    proc = subprocess.run([sys.executable, str(BENCH), "--seeds", seeds, "--keep", str(keep),
                           "--worst", "2", "--report", str(report)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(report.read_text())
    assert doc["format"] == "chakra-tools-fidelity-fuzz/1" and doc["seeds"] == list(SMOKE_SEEDS)
    assert doc["failures"] == [], doc["failures"]
    assert [s["seed"] for s in doc["scripts"]] == list(SMOKE_SEEDS)
    for s in doc["scripts"]:
        assert s["status"] == "ok" and s["ranks"] == 2, s
        for key in ("default", "as_captured"):
            assert isinstance(s[key], float) and math.isfinite(s[key]), (key, s)
        assert s["measured_us"] > 0 and s["predicted_us"] > 0
    for key in ("as_captured", "default"):
        summary = doc[key]
        assert summary["count"] == len(SMOKE_SEEDS)
        errors = [abs(s[key]) for s in doc["scripts"]]
        assert summary["mean_abs"] == pytest.approx(sum(errors) / len(errors))
        assert summary["p95_abs"] == max(errors)  # 4 values: the 95th percentile is the largest
        assert abs(summary["worst"]) == max(errors)
    kept = sorted(p.name for p in keep.iterdir())
    assert len(kept) == 2  # --worst 2, no failures
    for name in kept:
        folder = keep / name
        assert (folder / "script.py").is_file() and (folder / "run" / "manifest.json").is_file()
        assert "trace-replay" in (folder / "commands.sh").read_text()
    assert "|job error| as captured" in proc.stdout and "failures: 0" in proc.stdout
