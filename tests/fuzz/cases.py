"""Seed inputs and cases: each input kind's mutated input, written under a case folder, and the
command that reads it (tests/fuzz/harness.py runs them).

Seeds are real files from the shared fixtures (ASTRA-sim rank sets, configs and text workloads,
ONNX models, HTA/PARAM host and Kineto traces) and what the commands make of them (a text
workload converted, a run folder with a manifest and its conversion, replay results, each rank
set as a `json dump` document), plus legacy (2023) `.et` files built byte by byte with
tests/core/test_legacy.py's builder.

A case's folder `d` holds `in/` (the mutated input), `out/` (where the command may write) and
`cwd/` (the command's working folder, empty); `d.parent / OUTSIDE` is an empty sentinel folder that
hostile absolute paths point into. The harness reports anything a command creates outside `out/`.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import mutators as mu

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT.parent / "shared" / "fixtures" / "external"
EXAMPLES = ROOT / "examples"
#: the sentinel folder beside a case's folder: hostile absolute paths point into it
OUTSIDE = "outside"
#: .et files up to this size are cut at every byte offset in turn (`_cut_point`)
SMALL_ET = 4096


def _cli(command: str, argv: list[str]):
    """Run `trace-<command> ARGV` (`chakra-tools json|upgrade ARGV`) in this process as the console
    script does; the click Result."""
    from typer.testing import CliRunner

    from chakra_tools.cli import main

    sub = main.SUBAPPS[command]
    # a trace-<command> script's argv first goes through its module's prepare_argv; `chakra-tools
    # json` and `upgrade` have no script of their own (and no module cli/json.py)
    prepare = getattr(sys.modules.get(f"chakra_tools.cli.{command}"), "prepare_argv", None)
    argv = prepare(argv) if prepare else argv
    return CliRunner().invoke(sub, argv, prog_name=program(command))


def program(command: str) -> str:
    """The console script a command is run as: `trace-convert`, `chakra-tools json`."""
    return f"chakra-tools {command}" if command in ("json", "upgrade") else f"trace-{command}"


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
    results: list[tuple[str, str]] = field(default_factory=list)  # replay result JSON documents
    jsondocs: list[tuple[str, dict]] = field(default_factory=list)  # `json dump` of each rank set, parsed
    legacy: list[RankSetSeed] = field(default_factory=list)  # legacy (2023) .et sets and single files
    decoded: dict = field(default_factory=dict)  # name -> parsed JSON (host/kineto), parsed once
    infragraphs: list[tuple[str, dict]] = field(default_factory=list)  # InfraGraph documents, parsed


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
    for rs in (s.ranksets[0], s.ranksets[2]):
        folder = made / f"replayed-{rs.prefix}"
        _write_set(rs, folder)
        _cli("replay", [str(folder), "--out", str(folder / "result.json")])
        s.results.append((f"{rs.name} replayed", (folder / "result.json").read_text()))
    for rs in s.ranksets if not quick else [r for r in s.ranksets if r is not s.ranksets[1]]:  # no 8-rank ring
        folder = made / f"dumped-{rs.prefix}"
        _write_set(rs, folder)
        _cli("json", ["dump", str(folder), "-o", str(folder / "rankset.json")])
        s.jsondocs.append((f"{rs.name} as JSON", json.loads((folder / "rankset.json").read_bytes())))
    s.legacy = _legacy_seeds(made / "legacy")
    s.infragraphs = _infragraph_seeds()
    return s


def _infragraph_seeds() -> list[tuple[str, dict]]:
    """A fitted cluster of 2 hosts x 2 ranks written as an InfraGraph (the replay base's 4 ranks),
    plain and with its links' rates as annotations; none without the infragraph package."""
    try:
        from chakra_tools.replay.fabric import Fabric, Level
        from chakra_tools.replay.infrawrite import fabric_infragraph
    except ImportError:
        return []
    try:
        infra = fabric_infragraph(Fabric((Level("intra-node", 2, 1000.0, 0.01),
                                          Level("inter-node", 2, 20000.0, 80.0, shared=True))), "fuzz")
    except Exception:  # the package missing: InputError from fabric_infragraph
        return []
    doc = infra.serialize("dict")
    bare = json.loads(json.dumps(doc))
    annotations = {"links": []}
    for link in bare.get("links", []):
        gbps = link.get("physical", {}).get("bandwidth", {}).get("gigabits_per_second")
        link.pop("physical", None)
        if gbps is not None:
            annotations["links"].append({"name": link["name"], "attributes": [
                {"attribute": "bandwidth", "value": f"{gbps} Gbps"}]})
    return [("cluster.infragraph.json", doc),
            ("annotated.infragraph.json", {"infrastructure": bare, "annotations": annotations})]


def _legacy_builder():
    """tests/core/test_legacy.py, whose helpers build legacy files byte by byte (loaded from its
    path: tests/ is no package)."""
    path = ROOT / "tests" / "core" / "test_legacy.py"
    spec = importlib.util.spec_from_file_location("_fuzz_legacy_builder", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _legacy_seeds(folder: Path) -> list[RankSetSeed]:
    """Legacy sets as Chakra's 2023 generator wrote them: a 2-rank all-gather, a send/receive pair
    with its comm_group.json, and one file of compute and collective nodes chained by `parent`
    (strings in the input fields, a legacy GlobalMetadata first)."""
    b = _legacy_builder()
    out = [_read_set(b.allgather(folder / "allgather"), "legacy all_gather 2 ranks", "one_comm_coll_node_allgather")]
    p2p = folder / "p2p"
    p2p.mkdir()
    for r, (name, kind) in enumerate((("COMM_SEND_NODE", b.SEND), ("COMM_RECV_NODE", b.RECV))):
        b.write_legacy(p2p / f"p2p.{r}.et", b.node(0, name, kind, b.attr("src", b.INT, i=0), b.attr("dst", b.INT, i=1),
                                                   b.attr("comm_size", b.INT, i=4096)))
    (p2p / "comm_group.json").write_text('{"1": [0, 1]}\n')
    out.append(_read_set(p2p, "legacy send/recv pair", "p2p"))
    mixed = folder / "mixed"
    mixed.mkdir()
    meta = b.ld(1, b.attr("schema", b.INT, s="1.0.0")) + b.ld(1, b.attr("rank", b.INT, i=0))
    strings = b.ld(5, b"[1, 2]") + b.ld(6, b"[[4, 4]]") + b.ld(7, b"['float']")
    runtime = lambda us: b.attr("runtime", b.INT, i=us)  # noqa: E731
    coll = lambda kind, size: (b.attr("comm_type", b.INT, i=kind), b.attr("comm_size", b.INT, i=size),  # noqa: E731
                               b.attr("involved_dim", b.BOOLS, bools=(1,)))
    b.write_legacy(mixed / "mixed.0.et", meta,
                   b.node(0, "embedding", b.COMP, runtime(12)) + strings,
                   b.node(1, "mlp", b.COMP, runtime(30), b.attr("num_ops", b.INT, i=1000), parents=(0,)),
                   b.node(2, "ALL_REDUCE", b.COLL, *coll(0, 1 << 20), parents=(1,)),
                   b.node(3, "backward", b.COMP, runtime(25), b.attr("is_cpu_op", b.BOOL, i=0), parents=(2,)),
                   b.node(4, "ALL_TO_ALL", b.COLL, *coll(b.LEGACY_ALL_TO_ALL, 4096), parents=(3, 1)),
                   b.node(5, "optimizer", b.COMP, runtime(7), parents=(4,)))
    out.append(_read_set(mixed, "legacy compute and collectives", "mixed"))
    return out


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
    call: Callable[[], object] | None = None  # a Python API call run instead of a command

    def line(self) -> str:
        """The command line (or the API call) a report shows."""
        return " ".join(self.argv) if self.call else f"{program(self.command)} " + " ".join(self.argv)


def _write_set(rs: RankSetSeed, folder: Path, files: dict[str, bytes] | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in (files or rs.files).items():
        (folder / name).write_bytes(data)


#: the share of host_et and kineto cases damaged by the targeted mutators (parent cycles, nested
#: `args` of another type, ...) rather than the blind tree ones
TARGETED = 0.4

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


def make_case(kind: str, rng: random.Random, seeds: Seeds, d: Path, ordinal: int = 0) -> Case:
    """Write the mutated input under `d/in`; the command to run on it. `ordinal`: the how-many-th
    case of its kind this is (the cutting modes cut at the next byte offset with each)."""
    inp, out = d / "in", d / "out"
    inp.mkdir(parents=True)
    out.mkdir()
    if kind in ORDINAL_MAKERS:
        return ORDINAL_MAKERS[kind](rng, seeds, inp, out, ordinal)
    return CASE_MAKERS[kind](rng, seeds, inp, out)


def _mutated_set(rng, seeds) -> tuple[RankSetSeed, dict[str, bytes], str, str]:
    """A seed rank set with one rank file damaged (or removed): (seed, files, victim, what)."""
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
    return rs, files, victim, what


def _cut_point(sets: list[RankSetSeed], n: int) -> tuple[RankSetSeed, str, int]:
    """The n-th (set, small .et file, byte offset) in a fixed order over every offset of every
    .et file of at most SMALL_ET bytes: successive cases cut each file at each byte in turn."""
    small = [(rs, name, len(data)) for rs in sets for name, data in sorted(rs.files.items())
             if name.endswith(".et") and len(data) <= SMALL_ET]
    n %= sum(size for _, _, size in small)
    for rs, name, size in small:
        if n < size:
            return rs, name, n
        n -= size
    raise AssertionError("unreachable")


def _case_et(rng, seeds, inp, out) -> Case:
    rs, files, victim, what = _mutated_set(rng, seeds)
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
    if rng.random() < TARGETED:
        what = (mu.mutate_host_trace if kind == "host_et" else mu.mutate_kineto_trace)(rng, target)
        data = mu.dump_json(rng, target)
        data = gzip.compress(data, mtime=0) if gz else data
    else:
        data, what = mu.mutate_json_bytes(rng, target, gz=gz)
    h_name = "rank0.host.json" + (".gz" if gz and kind == "host_et" else "")
    k_name = "rank0.kineto.json" + (".gz" if gz and kind == "kineto" else "")
    (inp / h_name).write_bytes(data if kind == "host_et" else host)
    (inp / k_name).write_bytes(data if kind == "kineto" else kineto)
    stale = None
    if rng.random() < 0.1:
        stale = _stale(seeds, out / "rs", "trace.7.et")
    host_arg = ["--host", str(inp / h_name)]
    if kind == "kineto" and rng.random() < 0.3:  # device-only: the host ops from the Kineto events' args
        host_arg, what = [], what + " (device only)"
    argv = ["pytorch", *host_arg, "--device", str(inp / k_name), "-o", str(out / "rs"), "--executor", "serial", "-q"]
    return Case(kind, f"{name}: {what}", "convert", argv, [out / "rs"], [h_name if kind == "host_et" else k_name],
                stale=stale)


def _stale(seeds, folder: Path, name: str) -> Path:
    """A rank file of an earlier conversion in the output folder: a command that writes a new
    rank set there must not leave it beside the new one."""
    folder.mkdir()
    (folder / name).write_bytes(seeds.ranksets[0].files["all_reduce.0.et"])
    return folder / name


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
        return Case("manifest", what, "convert", [str(run), "-o", str(out / "rs"), "--executor", "serial", "-q"],
                    [out / "rs"],
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
        stale = _stale(seeds, out / "rs", "wl.99.et")
    argv = ["text", str(inp / name), "--npus", npus, "-o", str(out / "rs"), "--prefix", "wl"]
    if rng.random() < 0.3:  # network dimensions: a split of the NPUs, or one that does not hold them
        argv += ["--dims", rng.choice({"1": ("1", "1,1"), "4": ("2,2", "4,1", "3"), "8": ("2,4", "2,2,2", "8,2"),
                                       "16": ("4,4", "2,8", "16", "0,16")}[npus])]
    return Case("text", f"{name}: {what}", "convert", argv, [out / "rs"], [name], stale=stale)


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
        argv += ["--emit", "et", "--npus", "4", "-o", str(out / "rs")]
        outputs = [out / "rs"]
    return Case("onnx", f"{name}: {what}", "convert", argv, outputs, [name])


def _case_result(rng, seeds, inp, out) -> Case:
    name, text = rng.choice(seeds.results)
    data, what = mu.mutate_json_bytes(rng, json.loads(text))
    (inp / "result.json").write_bytes(data)
    cmd = rng.choice(("timeline", "report", "summary"))
    r = str(inp / "result.json")
    if cmd == "timeline":
        return Case("result", f"{name}: {what}", "visualize", ["timeline", r, "-o", str(out / "t.json"),
                                                                "--no-progress"], [out / "t.json"], ["result.json"])
    if cmd == "report":
        return Case("result", f"{name}: {what}", "visualize", ["report", r, "-o", str(out / "r.html")],
                    [out / "r.html"], ["result.json"])
    return Case("result", f"{name}: {what}", "visualize", ["summary", r], [], ["result.json"])


def _case_jsondoc(rng, seeds, inp, out) -> Case:
    """A `json dump` document, damaged (blind tree mutations, or targeted ones: hostile prefixes,
    odd ranks, members, ids, attrs), through `chakra-tools json load`, sometimes with a hostile
    `--prefix`."""
    name, doc = rng.choice(seeds.jsondocs)
    outside = str(out.parent.parent / OUTSIDE)
    if rng.random() < 0.6:
        what = mu.mutate_rankset_doc(rng, doc, outside)
        data = mu.dump_json(rng, doc)
    else:
        data, what = mu.mutate_json_bytes(rng, doc)
    (inp / "rankset.json").write_bytes(data)
    argv = ["load", str(inp / "rankset.json"), "-o", str(out / "rs")]
    if rng.random() < 0.3:
        prefix = rng.choice(mu.hostile_prefixes(outside) + mu.ODD_PREFIXES)
        argv += ["--prefix", prefix]
        what += f"; --prefix {prefix!r}"
    return Case("jsondoc", f"{name}: {what}", "json", argv, [out / "rs"], ["rankset.json"])


def _case_infragraph(rng, seeds, inp, out) -> Case:
    """An InfraGraph document, damaged, as trace-replay's --network, either network model."""
    if not seeds.infragraphs:
        return _config_case("network", rng, seeds, inp, out)  # no infragraph package: a network case
    name, doc = rng.choice(seeds.infragraphs)
    data, what = mu.mutate_json_bytes(rng, doc)
    (inp / name).write_bytes(data)
    _write_set(seeds.replay_base, inp / "et")
    model = rng.choice(("congestion-aware", "congestion-unaware"))
    argv = [str(inp / "et"), "--network", str(inp / name), "--network-model", model, "--no-validate"]
    if rng.random() < 0.5:
        argv += ["--out", str(out / "r.json")]
    return Case("infragraph", f"{name}: {what} ({model})", "replay", argv, [out / "r.json"], [name])


def _case_legacy(rng, seeds, inp, out, ordinal) -> Case:
    """A legacy set or file through `chakra-tools upgrade`: every 4th case of the kind cut at the
    next byte offset (`_cut_point`), the others damaged by mu.mutate_legacy."""
    if ordinal % 4 == 0:
        rs, victim, at = _cut_point(seeds.legacy, ordinal // 4)
        data, what = mu.cut_at(rs.files[victim], at)
    else:
        rs = rng.choice(seeds.legacy)
        victim = rng.choice(sorted(n for n in rs.files if n.endswith(".et")))
        data, what = mu.mutate_legacy(rng, rs.files[victim])
    files = {**rs.files, victim: data}
    old = inp / "old"
    _write_set(rs, old, files)
    form = rng.choice(("file", "folder", "prefix"))
    if form == "file":
        src, dst = old / victim, out / "new.0.et"
    else:
        src, dst = (old if form == "folder" else old / rs.prefix), out / "new"
    return Case("legacy", f"{rs.name}: {victim}: {what}", "upgrade", [str(src), str(dst)], [dst],
                [victim, "comm_group.json"])


def _case_api(rng, seeds, inp, out, ordinal) -> Case:
    """`chakra_tools.replay.replay_rankset` on a damaged rank set (the `et` kind's damage; every
    4th case a small rank file cut at the next byte offset), its result sometimes written; every
    third by replica classes (`replicas="on"`: classes or a refusal that says why)."""
    if ordinal % 4 == 0:
        rs, victim, at = _cut_point(seeds.ranksets, ordinal // 4)
        data, what = mu.cut_at(rs.files[victim], at)
        files, what = {**rs.files, victim: data}, f"{rs.name}: {victim}: {what}"
    else:
        rs, files, victim, what = _mutated_set(rng, seeds)
    _write_set(rs, inp, files)
    validate = rng.random() < 0.5
    target = out / "r.json" if rng.random() < 0.5 else None
    replicas = ("auto", "on", "off")[ordinal % 3]  # by ordinal: the seed's draws stay as they were
    call = functools.partial(_replay_api, inp, validate, target, replicas)
    line = ([f"replay_rankset({str(inp)!r}, validate={validate}, replicas={replicas!r})"]
            + ([f"result.write({str(target)!r})"] if target else []))
    return Case("api", what, "api", line, [target] if target else [], [victim, "comm_group.json"],
                validating=validate, call=call)


def _replay_api(path: Path, validate: bool, target: Path | None, replicas: str = "auto") -> None:
    from chakra_tools.replay import replay_rankset

    heard = []
    result = replay_rankset(path, validate=validate, on_warning=heard.append, replicas=replicas)
    result.table()
    if target is not None:
        result.write(target)


CASE_MAKERS: dict[str, Callable] = {
    "et": _case_et, "comm_group": _case_comm_group, "host_et": _case_host_et, "kineto": _case_kineto,
    "manifest": _case_manifest, "network": _case_network, "system": _case_system, "memory": _case_memory,
    "text": _case_text, "onnx": _case_onnx, "result": _case_result, "jsondoc": _case_jsondoc,
    "infragraph": _case_infragraph,
}
#: makers that also take the case's ordinal within its kind (the cutting modes)
ORDINAL_MAKERS: dict[str, Callable] = {"legacy": _case_legacy, "api": _case_api}
