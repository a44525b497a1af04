"""The fuzz harness: mutated inputs of every kind through the public commands, each case in a
forked child with a time limit, each outcome classified.

A case is (input kind, index): its random generator is seeded with "SEED-INDEX", so any case is
re-run alone with `python bench/fuzz.py --seed SEED --case INDEX`. The parent loads every seed
input and imports every command once, then forks one child per case (at most `jobs` at a time);
the child writes the mutated input under a fresh folder, runs one command there through typer's
CliRunner, and reports what happened. Outcomes:

- ``clean``: exit 0, or exit 1 from a validating command with its findings (a rejected input);
- ``error``: a documented error: exit 1-3, the last line on stderr ``error: ...`` naming the
  input (a path inside the case's folder, or an input file's name), no traceback, nothing half
  written;
- ``FAILURE``: an exception that is not a ChakraToolsError (signature: its type and the
  innermost place in chakra_tools that raised it), a traceback, an error naming no file, a hang
  (past the time limit), a crash (killed by a signal), a partial or stale output left behind.

The commands' own error handling is kept: the child only wraps the undecorated command
function (inside `handle_errors`) to record an unexpected exception's type and place before the
CLI handles it.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import mutators as mu

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT.parent / "shared" / "fixtures" / "external"
EXAMPLES = ROOT / "examples"

#: input kinds, in the order cases are dealt to them
KINDS = ("et", "comm_group", "host_et", "kineto", "manifest", "network", "system", "memory", "text", "onnx")

#: kinds whose failures are all fixed: the short run in `make test` asserts none fail. A kind
#: joins this list once `bench/fuzz.py --kinds KIND --count 2000` reports no failure for it.
FIXED_KINDS = ("network", "system", "memory", "text", "onnx")


# --------------------------------------------------------------------------------------------
# seeds
# --------------------------------------------------------------------------------------------

@dataclass
class RankSetSeed:
    name: str
    prefix: str
    files: dict[str, bytes]  # file name -> bytes (rank files and comm_group.json)


@dataclass
class Seeds:
    ranksets: list[RankSetSeed] = field(default_factory=list)
    pairs: list[tuple[str, bytes, bytes]] = field(default_factory=list)  # name, host json, kineto json
    run: dict[str, bytes] = field(default_factory=dict)  # run folder: file name -> bytes
    run_rankset: RankSetSeed | None = None  # the run folder, converted
    networks: list[tuple[str, str]] = field(default_factory=list)
    systems: list[tuple[str, str]] = field(default_factory=list)
    memories: list[tuple[str, str]] = field(default_factory=list)
    texts: list[tuple[str, str]] = field(default_factory=list)
    onnx: list[tuple[str, bytes]] = field(default_factory=list)
    replay_base: RankSetSeed | None = None  # what the config kinds replay
    decoded: dict = field(default_factory=dict)  # name -> parsed JSON (host/kineto), parsed once


def _read_set(folder: Path, name: str, prefix: str) -> RankSetSeed:
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())
             if p.name.endswith(".et") or p.name == "comm_group.json"}
    return RankSetSeed(name, prefix, files)


def _gz_bytes(path: Path) -> bytes:
    import gzip

    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def load_seeds(work: Path, *, quick: bool) -> Seeds:
    """Every seed input: real files from the shared fixtures, and rank sets and a run folder
    the harness makes from them with the commands themselves."""
    s = Seeds()
    ext = FIXTURES
    s.ranksets.append(_read_set(ext / "astra-sim/all_reduce_4npus_1MB", "astra-sim all_reduce 4npus", "all_reduce"))
    s.ranksets.append(_read_set(ext / "astra-sim/custom_ring_allreduce_8npus_1MB", "astra-sim custom ring 8npus",
                                "custom_allreduce"))
    s.replay_base = s.ranksets[0]
    texts = sorted((ext / "astra-sim/text_workloads").glob("*.txt"))
    s.texts = [(p.name, p.read_text()) for p in texts]
    s.onnx = [(p.name, p.read_bytes()) for p in sorted((ext / "onnx").glob("*.onnx"))]
    s.networks = [(p.name, p.read_text()) for p in
                  [ext / "astra-sim/configs/Ring_4npus.yml", EXAMPLES / "configs/ring_4npus.yml"]]
    s.systems = [(p.name, p.read_text()) for p in
                 [ext / "astra-sim/configs/Ring_4chunks.json", EXAMPLES / "configs/hierarchical_roofline.json"]]
    s.memories = [(p.name, p.read_text()) for p in
                  [ext / "astra-sim/configs/no_memory_expansion.json", EXAMPLES / "configs/memory_pool.json",
                   EXAMPLES / "configs/memory_per_node.json"]]
    pairs = [("hta simple_add", ext / "hta/simple_add_host_et.json.gz", ext / "hta/simple_add_kineto.json.gz")]
    if not quick:
        pairs.append(("param linear 1gpu", ext / "param/linear_1gpu_host_et.json.gz",
                      ext / "param/linear_1gpu_kineto.json.gz"))
    s.pairs = [(n, _gz_bytes(h), _gz_bytes(k)) for n, h, k in pairs]
    for n, h, k in s.pairs:
        s.decoded[n] = (json.loads(h), json.loads(k))
    # rank sets the commands make: a text workload, the run folder converted
    made = work / "seeds"
    made.mkdir(parents=True, exist_ok=True)
    _cli("convert", ["text", str(ext / "astra-sim/text_workloads/MLP_HybridParallel_Data_Model.txt"),
                     "--npus", "4", "-o", str(made / "text"), "--prefix", "mlp"])
    s.ranksets.append(_read_set(made / "text", "text MLP hybrid 4npus", "mlp"))
    run = made / "run"
    run.mkdir(exist_ok=True)
    name, host, kineto = s.pairs[0]
    (run / "rank0.host.json").write_bytes(host)
    (run / "rank0.kineto.json").write_bytes(kineto)
    (run / "manifest.json").write_text(json.dumps(_manifest(kineto), indent=1))
    s.run = {p.name: p.read_bytes() for p in run.iterdir()}
    _cli("convert", ["pytorch", str(run), "-o", str(made / "run-et"), "--executor", "serial", "-q"])
    s.run_rankset = _read_set(made / "run-et", "hta simple_add converted", "trace")
    s.ranksets.append(s.run_rankset)
    return s


def _manifest(kineto: bytes) -> dict:
    """A capture manifest for one rank, its step the span of the device trace's events."""
    from chakra_tools.core.manifest import FORMAT

    ev = [e for e in json.loads(kineto).get("traceEvents", []) if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in ev)
    t1 = max(e["ts"] + e.get("dur", 0) for e in ev)
    return {"format": FORMAT, "status": "ok", "world_size": 1, "backend": "gloo", "captured_steps": [1],
            "ranks": [{"rank": 0, "status": "ok", "error": None, "host_trace": "rank0.host.json",
                       "device_trace": "rank0.kineto.json", "captured_steps": [1],
                       "step_times_ns": [int((t1 - t0) * 1000)], "step_starts_unix_ns": [int(t0 * 1000)]}],
            "process_groups": [{"name": "0", "ranks": [0], "desc": "default_pg"}]}


# --------------------------------------------------------------------------------------------
# running a command in this process
# --------------------------------------------------------------------------------------------

#: unexpected exceptions recorded by the wrapped commands of this process
UNEXPECTED: list[tuple[str, str]] = []
_PATCHED = False


def _signature(e: BaseException) -> tuple[str, str]:
    """(exception type, innermost place in chakra_tools: path:line in function)."""
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if "chakra_tools" in f.filename and "/cli/" not in f.filename] or \
        [f for f in frames if "chakra_tools" in f.filename] or frames
    f = ours[-1]
    path = f.filename.split("chakra_tools/", 1)[-1]
    where = f"chakra_tools/{path}:{f.lineno} ({f.name})" if "chakra_tools" in f.filename else \
        f"{Path(f.filename).name}:{f.lineno} ({f.name})"
    inner = frames[-1]
    if inner is not f:
        where += f" <- {Path(inner.filename).name}:{inner.lineno}"
    return type(e).__name__, where


def _patch_commands() -> None:
    """Wrap each command's own function (inside the CLI's error handler) so that an exception the
    CLI would not expect is recorded with its place; the CLI still handles it as it does."""
    global _PATCHED
    if _PATCHED:
        return
    import click
    import typer

    from chakra_tools.cli import common, main
    from chakra_tools.core.errors import ChakraToolsError

    expected = (ChakraToolsError, typer.Exit, click.exceptions.ClickException, click.exceptions.Abort,
                click.exceptions.Exit, KeyboardInterrupt, SystemExit)

    def recording(fn):
        @functools.wraps(fn)
        def wrapper(*a, **kw):
            try:
                return fn(*a, **kw)
            except expected:
                raise
            except BaseException as e:
                UNEXPECTED.append(_signature(e))
                raise
        return wrapper

    for sub in main.SUBAPPS.values():
        for info in sub.registered_commands:
            cb = info.callback
            inner = getattr(cb, "__wrapped__", None)
            if inner is not None:
                info.callback = common.handle_errors(recording(inner))
    _PATCHED = True


def _cli(command: str, argv: list[str]):
    """Run `trace-<command> ARGV` in this process as the console script does; the click Result."""
    from typer.testing import CliRunner

    from chakra_tools.cli import main

    sub = main.SUBAPPS[command]
    prepare = getattr(sys.modules[f"chakra_tools.cli.{command}"], "prepare_argv", None)
    argv = prepare(argv) if prepare else argv
    return CliRunner().invoke(sub, argv, prog_name=f"trace-{command}")


# --------------------------------------------------------------------------------------------
# cases: a mutated input and the command that reads it
# --------------------------------------------------------------------------------------------

@dataclass
class Case:
    kind: str
    what: str  # the mutation
    command: str  # "validate", "convert", ...
    argv: list[str]
    outputs: list[Path]  # what the command writes (must not be left behind on error)
    names: list[str]  # input file names an error message may name
    stale: Path | None = None  # a stale file put in the output folder before the command
    validating: bool = False  # exit 1 means "findings", a clean result


def _write_set(rs: RankSetSeed, folder: Path, files: dict[str, bytes] | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in (files or rs.files).items():
        (folder / name).write_bytes(data)


RANKSET_COMMANDS = ("validate", "replay", "replay-no-validate", "summary", "timeline", "report", "graph")


def _rankset_command(rng: random.Random, rs_dir: Path, out: Path) -> tuple[str, list[str], list[Path], bool]:
    cmd = rng.choice(RANKSET_COMMANDS)
    d = str(rs_dir)
    if cmd == "validate":
        return "validate", [d] + rng.choice(([], ["--stats"], ["--json"], ["--for", "astra-sim"])), [], True
    if cmd == "replay":
        return "replay", [d, "--json"], [], True
    if cmd == "replay-no-validate":
        return "replay", [d, "--no-validate", "--out", str(out / "r.json")], [out / "r.json"], False
    if cmd == "summary":
        return "visualize", ["summary", d] + rng.choice(([], ["--json"])), [], False
    if cmd == "timeline":
        return "visualize", ["timeline", d, "-o", str(out / "t.json"), "--no-progress"], [out / "t.json"], False
    if cmd == "report":
        return "visualize", ["report", d, "-o", str(out / "r.html")], [out / "r.html"], False
    return "visualize", ["graph", d, "-o", str(out / "g.dot")], [out / "g.dot"], False


def make_case(kind: str, rng: random.Random, seeds: Seeds, d: Path) -> Case:
    """Write the mutated input under `d/in`; the command to run on it."""
    inp, out = d / "in", d / "out"
    inp.mkdir(parents=True)
    out.mkdir()
    return CASE_MAKERS[kind](rng, seeds, inp, out)


def _case_et(rng, seeds, inp, out) -> Case:
    rs = rng.choice(seeds.ranksets)
    files = dict(rs.files)
    ets = sorted(n for n in files if n.endswith(".et"))
    victim = rng.choice(ets)
    if rng.random() < 0.05 and len(ets) > 1:
        del files[victim]
        what = f"{rs.name}: {victim} removed"
    else:
        files[victim], what = mu.mutate_et(rng, files[victim])
        what = f"{rs.name}: {victim}: {what}"
    _write_set(rs, inp, files)
    cmd, argv, outputs, validating = _rankset_command(rng, inp, out)
    return Case("et", what, cmd, argv, outputs, [victim, "comm_group.json"], validating=validating)


def _case_comm_group(rng, seeds, inp, out) -> Case:
    rs = rng.choice([r for r in seeds.ranksets if "comm_group.json" in r.files])
    files = dict(rs.files)
    doc = json.loads(files["comm_group.json"])
    r = rng.random()
    if r < 0.35 and doc:
        key = rng.choice(list(doc))
        members = doc[key] if isinstance(doc[key], list) else [0]
        members = list(members) + [rng.choice(("x", 2**64, -1, 1.5, None, [0], 10**12, True))]
        rng.shuffle(members)
        doc[key] = members
        data, what = json.dumps(doc).encode(), f"group {key} gets an odd member"
    else:
        data, what = mu.mutate_json_bytes(rng, doc)
    files["comm_group.json"] = data
    _write_set(rs, inp, files)
    cmd, argv, outputs, validating = _rankset_command(rng, inp, out)
    return Case("comm_group", f"{rs.name}: {what}", cmd, argv, outputs, ["comm_group.json"], validating=validating)


def _convert_case(kind, rng, seeds, inp, out) -> Case:
    name, host, kineto = rng.choice(seeds.pairs)
    hdoc, kdoc = seeds.decoded[name]
    gz = rng.random() < 0.3
    target = hdoc if kind == "host_et" else kdoc
    data, what = mu.mutate_json_bytes(rng, target, gz=gz)
    h_name = "rank0.host.json" + (".gz" if gz and kind == "host_et" else "")
    k_name = "rank0.kineto.json" + (".gz" if gz and kind == "kineto" else "")
    (inp / h_name).write_bytes(data if kind == "host_et" else host)
    (inp / k_name).write_bytes(data if kind == "kineto" else kineto)
    stale = None
    if rng.random() < 0.1:
        out.joinpath("trace.7.et").write_bytes(seeds.ranksets[0].files["all_reduce.0.et"])
        stale = out / "trace.7.et"
    argv = ["pytorch", "--host", str(inp / h_name), "--device", str(inp / k_name), "-o", str(out),
            "--executor", "serial", "-q"]
    return Case(kind, f"{name}: {what}", "convert", argv, [out], [h_name if kind == "host_et" else k_name],
                stale=stale)


def _case_host_et(rng, seeds, inp, out) -> Case:
    return _convert_case("host_et", rng, seeds, inp, out)


def _case_kineto(rng, seeds, inp, out) -> Case:
    return _convert_case("kineto", rng, seeds, inp, out)


def _case_manifest(rng, seeds, inp, out) -> Case:
    files = dict(seeds.run)
    doc = json.loads(files["manifest.json"])
    r = rng.random()
    if r < 0.15:
        doc["world_size"] = rng.choice((10**12, 2**63, -1, 0, 2))
        data, what = json.dumps(doc).encode(), f"world_size {doc['world_size']}"
    elif r < 0.3:
        rec = doc["ranks"][0]
        key = rng.choice(("host_trace", "device_trace"))
        rec[key] = rng.choice(("missing.json", "../../etc/passwd", "", "manifest.json", "."))
        data, what = json.dumps(doc).encode(), f"ranks[0].{key} -> {rec[key]!r}"
    else:
        data, what = mu.mutate_json_bytes(rng, doc)
    files["manifest.json"] = data
    run = inp / "run"
    run.mkdir()
    for n, b in files.items():
        (run / n).write_bytes(b)
    cmd = rng.choice(("convert", "convert", "timeline", "replay"))
    if cmd == "convert":
        return Case("manifest", what, "convert", [str(run), "-o", str(out), "--executor", "serial", "-q"], [out],
                    ["manifest.json"])
    if cmd == "timeline":
        return Case("manifest", what, "visualize", ["timeline", str(run), "-o", str(out / "t.json"),
                                                    "--no-progress"], [out / "t.json"], ["manifest.json"])
    _write_set(seeds.run_rankset, inp / "et")
    return Case("manifest", what, "replay", [str(inp / "et"), "--as-captured", "--manifest",
                                             str(run / "manifest.json")], [], ["manifest.json"], validating=True)


def _config_case(kind, rng, seeds, inp, out) -> Case:
    pool = {"network": seeds.networks, "system": seeds.systems, "memory": seeds.memories}[kind]
    name, text = rng.choice(pool)
    if name.endswith((".yml", ".yaml")):
        data, what = mu.mutate_yaml(rng, text)
    else:
        data, what = mu.mutate_json_bytes(rng, json.loads(text))
    (inp / name).write_bytes(data)
    _write_set(seeds.replay_base, inp / "et")
    argv = [str(inp / "et"), f"--{kind}", str(inp / name), "--no-validate"]
    if kind != "network":
        argv += ["--network", str(EXAMPLES / "configs/ring_4npus.yml")]
    if rng.random() < 0.5:
        argv += ["--out", str(out / "r.json")]
    return Case(kind, f"{name}: {what}", "replay", argv, [out / "r.json"], [name])


def _case_network(rng, seeds, inp, out) -> Case:
    return _config_case("network", rng, seeds, inp, out)


def _case_system(rng, seeds, inp, out) -> Case:
    return _config_case("system", rng, seeds, inp, out)


def _case_memory(rng, seeds, inp, out) -> Case:
    return _config_case("memory", rng, seeds, inp, out)


def _case_text(rng, seeds, inp, out) -> Case:
    name, text = rng.choice(seeds.texts)
    data, what = mu.mutate_text_workload(rng, text)
    (inp / name).write_bytes(data)
    npus = rng.choice(("1", "4", "8", "16"))
    stale = None
    if rng.random() < 0.1:
        (out / "wl.99.et").write_bytes(seeds.ranksets[0].files["all_reduce.0.et"])
        stale = out / "wl.99.et"
    argv = ["text", str(inp / name), "--npus", npus, "-o", str(out), "--prefix", "wl"]
    return Case("text", f"{name}: {what}", "convert", argv, [out], [name], stale=stale)


def _case_onnx(rng, seeds, inp, out) -> Case:
    name, data = rng.choice(seeds.onnx)
    data, what = mu.mutate_onnx(rng, data)
    (inp / name).write_bytes(data)
    emit = rng.choice(("table", "table-json", "text", "et"))
    argv = ["onnx", str(inp / name)]
    outputs: list[Path] = []
    if emit == "table-json":
        argv += ["--json"]
    elif emit == "text":
        argv += ["--emit", "text", "-o", str(out / "w.txt")]
        outputs = [out / "w.txt"]
    elif emit == "et":
        argv += ["--emit", "et", "--npus", "4", "-o", str(out)]
        outputs = [out]
    return Case("onnx", f"{name}: {what}", "convert", argv, outputs, [name])


CASE_MAKERS: dict[str, Callable] = {
    "et": _case_et, "comm_group": _case_comm_group, "host_et": _case_host_et, "kineto": _case_kineto,
    "manifest": _case_manifest, "network": _case_network, "system": _case_system, "memory": _case_memory,
    "text": _case_text, "onnx": _case_onnx,
}


# --------------------------------------------------------------------------------------------
# classifying an outcome
# --------------------------------------------------------------------------------------------

def classify(case: Case, d: Path, result) -> tuple[str, str | None, str]:
    """(outcome, failure signature or None, the message seen)."""
    stderr = result.stderr if result.stderr_bytes is not None else ""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    rc = result.exit_code
    if UNEXPECTED:
        etype, where = UNEXPECTED[0]
        return "FAILURE", f"{etype} at {where}", last
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        etype, where = _signature(exc)
        return "FAILURE", f"{etype} at {where}", last
    if "internal error" in last:
        return "FAILURE", "internal error: " + _pattern(last), last
    if "Traceback (most recent call last)" in stderr + result.stdout:
        return "FAILURE", "traceback printed", last
    temps = [p for p in d.rglob("*") if re.match(r"\..*\.tmp-\d+$", p.name)]
    if temps:
        return "FAILURE", "temporary file left behind", str(temps[0].relative_to(d))
    if rc == 0:
        if case.stale is not None and case.stale.exists():
            return "FAILURE", f"stale output kept beside the new one ({case.stale.name})", ""
        return "clean", None, ""
    left = _left_behind(case)
    if left:
        return "FAILURE", f"partial output after exit {rc} ({left})", last
    if rc == 1 and case.validating:
        return "clean", None, last
    if not last.startswith("error:") and not re.search(r"(Invalid value|Error):", stderr):
        return "FAILURE", f"exit {rc} without an error: line", last
    if not (str(d) in stderr or any(n and n in stderr for n in case.names)):
        return "FAILURE", "error naming no input: " + _pattern(last), last
    return "error", None, last


def _left_behind(case: Case) -> str:
    for p in case.outputs:
        if p.is_file():
            return f"{p.name} written"
        if p.is_dir():
            inside = [q for q in p.iterdir() if q != case.stale]
            if inside:
                return f"{len(inside)} file(s) in {p.name}/"
    return ""


def _pattern(message: str) -> str:
    """A message with its paths and numbers blanked, to group alike messages."""
    m = re.sub(r"/\S+", "PATH", message)
    return re.sub(r"\d+", "N", m)[:100]


# --------------------------------------------------------------------------------------------
# the child
# --------------------------------------------------------------------------------------------

MEMORY_LIMIT = 4 << 30


def run_case(kind: str, index: int, seed: int, seeds: Seeds, d: Path) -> dict:
    """Make and run one case here (in the child); the report as a dict."""
    rng = random.Random(f"{seed}-{index}")
    UNEXPECTED.clear()
    try:
        case = make_case(kind, rng, seeds, d)
    except Exception as e:  # a mutator's own bug: report it as such, not as the tool's
        return {"kind": kind, "index": index, "outcome": "harness-error", "signature": repr(e)[:200],
                "what": "", "command": "", "message": traceback.format_exc()[-800:]}
    described = {"what": case.what, "command": f"trace-{case.command} " + " ".join(case.argv)}
    (d.parent / f"{d.name}.pre.json").write_text(json.dumps(described))  # for a hang or a crash
    t0 = time.perf_counter()
    result = _cli(case.command, case.argv)
    outcome, sig, message = classify(case, d, result)
    return {"kind": kind, "index": index, "outcome": outcome, "signature": sig, "what": case.what,
            "command": f"trace-{case.command} " + " ".join(case.argv), "message": message[:300],
            "seconds": round(time.perf_counter() - t0, 3)}


def _child(kind, index, seed, seeds, d: Path) -> None:
    try:
        fd = os.open(d.parent / f"{d.name}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        os.chdir(d.parent)
        d.mkdir()
        rep = run_case(kind, index, seed, seeds, d)
        (d.parent / f"{d.name}.json").write_text(json.dumps(rep))
    finally:
        os._exit(0)


# --------------------------------------------------------------------------------------------
# the parent
# --------------------------------------------------------------------------------------------

@dataclass
class Report:
    seed: int
    count: int
    seconds: float = 0.0
    by_kind: dict = field(default_factory=lambda: defaultdict(Counter))
    failures: dict = field(default_factory=dict)  # signature -> {"count", "kinds", "example"}

    def add(self, rep: dict) -> None:
        self.by_kind[rep["kind"]][rep["outcome"]] += 1
        sig = rep.get("signature")
        if rep["outcome"] in ("FAILURE", "harness-error"):
            f = self.failures.setdefault(sig, {"count": 0, "kinds": Counter(), "example": rep})
            f["count"] += 1
            f["kinds"][rep["kind"]] += 1

    def failing_kinds(self) -> set[str]:
        return {k for k, c in self.by_kind.items() if c["FAILURE"] or c["harness-error"]}

    def to_dict(self) -> dict:
        return {"seed": self.seed, "count": self.count, "seconds": round(self.seconds, 1),
                "by_kind": {k: dict(v) for k, v in sorted(self.by_kind.items())},
                "failures": [{"signature": s, "count": f["count"], "kinds": dict(f["kinds"]),
                              "example": f["example"]} for s, f in
                             sorted(self.failures.items(), key=lambda kv: -kv[1]["count"])]}

    def text(self) -> str:
        outcomes = ("clean", "error", "FAILURE", "harness-error")
        rows = [f"{'kind':<12}" + "".join(f"{o:>14}" for o in outcomes) + f"{'total':>8}"]
        total = Counter()
        for k in KINDS:
            c = self.by_kind.get(k)
            if not c:
                continue
            total.update(c)
            rows.append(f"{k:<12}" + "".join(f"{c[o]:>14}" for o in outcomes) + f"{sum(c.values()):>8}")
        rows.append(f"{'all':<12}" + "".join(f"{total[o]:>14}" for o in outcomes) + f"{sum(total.values()):>8}")
        out = [f"fuzz: seed {self.seed}, {self.count} cases, {self.seconds:.0f} s", *rows]
        if self.failures:
            out.append(f"\n{len(self.failures)} distinct failure signature(s):")
            for s, f in sorted(self.failures.items(), key=lambda kv: -kv[1]["count"]):
                ex = f["example"]
                kinds = ", ".join(f"{k} {n}" for k, n in f["kinds"].most_common())
                out.append(f"- {s}  [{f['count']}: {kinds}]")
                out.append(f"    case {ex['index']} ({ex['kind']}): {ex['what'][:160]}")
                out.append(f"    {ex['command'][:240]}")
                if ex.get("message"):
                    out.append(f"    -> {ex['message'][:200]}")
        return "\n".join(out)


def run(seed: int, count: int, *, kinds=KINDS, jobs: int | None = None, timeout: float = 20.0,
        quick: bool = False, keep: Path | None = None, start: int = 0, cases: list[int] | None = None,
        progress: Callable[[int, int], None] | None = None) -> Report:
    """Run cases start .. start+count-1 (or the listed `cases`), kinds dealt in turn; a Report.
    `keep`: a folder where the input of the first case of each failure signature is copied."""
    _patch_commands()
    import chakra_tools.cli.main  # noqa: F401  every command and what it imports, before forking
    _preload()
    jobs = jobs or os.cpu_count() or 1
    work = Path(tempfile.mkdtemp(prefix="chakra-fuzz-"))
    try:
        seeds = load_seeds(work, quick=quick)
        indices = cases if cases is not None else list(range(start, start + count))
        report = Report(seed, len(indices))
        t0 = time.perf_counter()
        pending = list(reversed(indices))
        running: dict[int, tuple[int, str, float, Path]] = {}
        done = 0
        while pending or running:
            while pending and len(running) < jobs:
                i = pending.pop()
                kind = kinds[i % len(kinds)]
                d = work / f"case{i}"
                pid = os.fork()
                if pid == 0:
                    _child(kind, i, seed, seeds, d)
                running[pid] = (i, kind, time.monotonic(), d)
            finished = _reap(running, timeout)
            for pid, status in finished:
                i, kind, _, d = running.pop(pid)
                rep = _collect(i, kind, d, status, timeout)
                report.add(rep)
                if keep is not None and rep["outcome"] != "clean" and rep["outcome"] != "error" \
                        and report.failures[rep["signature"]]["count"] == 1:
                    _keep(d, keep, rep)
                shutil.rmtree(d, ignore_errors=True)
                for suffix in (".json", ".log", ".pre.json"):
                    (work / f"case{i}{suffix}").unlink(missing_ok=True)
                done += 1
                if progress:
                    progress(done, len(indices))
            if not finished:
                time.sleep(0.005)
        report.seconds = time.perf_counter() - t0
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _preload() -> None:
    """Import what the commands import lazily, once, so that children do not each import it."""
    import chakra_tools.convert.run  # noqa: F401
    import chakra_tools.core.stats  # noqa: F401
    import chakra_tools.core.validate  # noqa: F401
    import chakra_tools.frontends  # noqa: F401
    import chakra_tools.frontends.onnx_model  # noqa: F401
    import chakra_tools.frontends.onnx_workload  # noqa: F401
    import chakra_tools.replay  # noqa: F401
    import chakra_tools.replay.engine  # noqa: F401
    import chakra_tools.visualize.report  # noqa: F401
    import chakra_tools.visualize.sources  # noqa: F401
    import chakra_tools.visualize.timeline  # noqa: F401
    import chakra_tools.visualize.drawing  # noqa: F401
    import onnx  # noqa: F401
    import yaml  # noqa: F401


def _reap(running: dict, timeout: float) -> list[tuple[int, int | str]]:
    out = []
    now = time.monotonic()
    for pid, (_, _, started, _) in list(running.items()):
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            out.append((pid, status))
        elif now - started > timeout:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            out.append((pid, "timeout"))
    return out


def _collect(i: int, kind: str, d: Path, status, timeout: float) -> dict:
    base = {"kind": kind, "index": i, "what": "", "command": "", "message": ""}
    rep_file = d.parent / f"{d.name}.json"
    if status == "timeout":
        return {**base, "outcome": "FAILURE", "signature": f"hang (no result in {timeout:.0f} s)",
                **_describe(d)}
    if rep_file.exists():
        return json.loads(rep_file.read_text())
    log = d.parent / f"{d.name}.log"
    tail = log.read_text(errors="replace")[-300:] if log.exists() else ""
    sig = f"crash (signal {os.WTERMSIG(status)})" if os.WIFSIGNALED(status) else "crash (no report)"
    if "MemoryError" in tail:
        sig = "MemoryError (child died)"
    return {**base, **_describe(d), "outcome": "FAILURE", "signature": sig, "message": tail}


def _describe(d: Path) -> dict:
    pre = d.parent / f"{d.name}.pre.json"
    return json.loads(pre.read_text()) if pre.exists() else {}


def _keep(d: Path, keep: Path, rep: dict) -> None:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", rep["signature"])[:80].strip("-")
    dest = keep / f"{rep['kind']}-{rep['index']}-{slug}"
    if (d / "in").exists():
        shutil.copytree(d / "in", dest / "in", dirs_exist_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "case.json").write_text(json.dumps(rep, indent=1))
