"""ASTRA-sim 1.0 text workloads ("DNN descriptions"): read and write.

The format (REFERENCE §5): whitespace-separated tokens. Line 1 is the parallelism policy and its
options (`HYBRID_TRANSFORMER model_parallel_NPU_group: 4`, `HYBRID_DLRM 4`); then the number of
layers; then one line per layer with 12 columns:

    name  reserved(-1)  fwd_compute fwd_comm fwd_size  ig_compute ig_comm ig_size
    wg_compute wg_comm wg_size  update_delay

`HYBRID_CUSTOMIZED` adds a 13th column, the layer's own policy. Compute columns are *cycles* of
the simulated NPU (ASTRA-sim 1.0 runs at 1 GHz, so one cycle is one ns); sizes are bytes; `NONE`
(or a size of 0) means no communication. This module only parses and prints; what the columns
mean for a training loop is `text_et.py`'s business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from chakra_tools.core.errors import InputError
from chakra_tools.core.model import MAX_RANK, CommType

POLICIES = ("MICRO", "DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA",
            "HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_DLRM",
            "HYBRID_DLRM_ENHANCED", "HYBRID_CUSTOMIZED", "DISTRIBUTED_INFERENCE")

#: Comm column tokens -> the collectives they stand for, in issue order.
COMM_TOKENS: dict[str, tuple[CommType, ...]] = {
    "NONE": (),
    "ALLREDUCE": (CommType.ALL_REDUCE,),
    "ALLGATHER": (CommType.ALL_GATHER,),
    "REDUCESCATTER": (CommType.REDUCE_SCATTER,),
    "ALLTOALL": (CommType.ALL_TO_ALL,),
    "ALLTOALLV": (CommType.ALL_TO_ALL,),
    "BROADCAST": (CommType.BROADCAST,),
    "ALLREDUCEALLTOALL": (CommType.ALL_REDUCE, CommType.ALL_TO_ALL),
}

#: what a HYBRID_CUSTOMIZED layer may name in its 13th column: a policy that maps phases to
#: network dimensions (ASTRA-sim 1.0's `decode_involved_dimensions`), not the customised one itself
LAYER_POLICIES = tuple(p for p in POLICIES if p != "HYBRID_CUSTOMIZED")

COLUMNS = 12
#: the largest count of cycles or bytes a column may hold: it stays exact as a float and fits the
#: trace's 64-bit fields after any unit conversion
MAX_VALUE = 1 << 53
#: an integer as the format writes it: ASCII digits (str.isdigit and int() also take "²" or "٣")
_DECIMAL = re.compile(r"[0-9]+")
#: an integer token, sign and leading zeros apart (Python's int() refuses over 4,300 digits, so
#: the digits are counted before any is converted)
_INTEGER = re.compile(r"(-?)0*([0-9]+)")
#: the most layers a workload may declare (a layer is a line of the file: this bounds only the
#: number read on line 2, before the lines are counted)
MAX_LAYERS = 1 << 24


@dataclass(frozen=True)
class Phase:
    """One phase of a layer: compute cycles, then a collective (`comm` "NONE" for none)."""

    compute: int
    comm: str = "NONE"
    size: int = 0

    @property
    def communicates(self) -> bool:
        return bool(COMM_TOKENS[self.comm]) and self.size > 0


@dataclass(frozen=True)
class TextLayer:
    name: str
    fwd: Phase
    ig: Phase
    wg: Phase
    update: int = 0
    policy: str | None = None  # HYBRID_CUSTOMIZED only
    line: int = 0


@dataclass(frozen=True)
class TextWorkload:
    """A parsed workload. `options` holds the header's `key: value` pairs, e.g.
    {"model_parallel_NPU_group": 4} or {"DLRM_LAST_BOTTOM_LAYER": 4}."""

    policy: str
    layers: tuple[TextLayer, ...]
    options: dict[str, int] = field(default_factory=dict)
    source: str = "<text>"

    @property
    def model_parallel_group(self) -> int | None:
        return self.options.get("model_parallel_NPU_group")

    @property
    def last_bottom_layer(self) -> int | None:
        return self.options.get("DLRM_LAST_BOTTOM_LAYER")


def read_text_workload(path: str | Path) -> TextWorkload:
    """Parse a workload file; errors name the file and line.

    >>> wl = parse_text_workload("MICRO\\n1\\nconv1 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1048576 5\\n")
    >>> wl.policy, wl.layers[0].wg
    ('MICRO', Phase(compute=5, comm='ALLREDUCE', size=1048576))
    """
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise InputError(f"{p}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{p}: not a text file") from None
    return parse_text_workload(text, source=p.name)


def parse_text_workload(text: str, source: str = "<text>") -> TextWorkload:
    lines = [(i + 1, ln.split()) for i, ln in enumerate(text.splitlines())]
    lines = [(n, toks) for n, toks in lines if toks]
    if not lines:
        raise InputError(f"{source}: empty workload file")
    (hline, header), rest = lines[0], lines[1:]
    policy, options = _parse_header(header, source, hline)
    if not rest:
        raise InputError(f"{source}: line {hline}: the number of layers is missing after the header")
    count_line, count_toks = rest[0]
    plain = len(count_toks) == 1 and _DECIMAL.fullmatch(count_toks[0])
    count = _bounded(count_toks[0], 0, MAX_LAYERS, MAX_LAYERS + 1) if plain else 0
    if count < 1:
        shown = " ".join(count_toks)
        raise InputError(f"{source}: line {count_line}: expected the number of layers (1 or more), "
                         f"got {shown if len(shown) <= 40 else shown[:37] + '...'!r}")
    if count > MAX_LAYERS:
        raise InputError(f"{source}: line {count_line}: the number of layers is {_digits(count_toks[0])}, "
                         f"more than {MAX_LAYERS} (no workload has so many)")
    rows = rest[1:]
    if len(rows) < count:
        raise InputError(f"{source}: line {count_line} promises {count} layers, the file has {len(rows)}")
    layers = tuple(_parse_layer(toks, n, policy, source) for n, toks in rows[:count])
    wl = TextWorkload(policy, layers, options, source)
    _check_policy_options(wl, hline)
    return wl


def _parse_header(tokens: list[str], source: str, line: int) -> tuple[str, dict[str, int]]:
    policy = tokens[0]
    if policy not in POLICIES:
        raise InputError(f"{source}: line {line}: unknown parallelism {policy!r}; "
                         f"expected one of {', '.join(POLICIES)}")
    options: dict[str, int] = {}
    rest = tokens[1:]
    if policy.startswith("HYBRID_DLRM") and rest and _INTEGER.fullmatch(rest[0]):
        # ASTRA-sim 1.0's `HYBRID_DLRM 4`; out of range, it fails the layer check later
        options["DLRM_LAST_BOTTOM_LAYER"] = _bounded(rest[0], -1, MAX_LAYERS, -1)
        rest = rest[1:]
    i = 0
    while i < len(rest):
        key = rest[i].rstrip(":")
        if i + 1 < len(rest) and re.fullmatch(r"-?[0-9]{1,18}", rest[i + 1]):
            options[key] = int(rest[i + 1])
            i += 2
        else:
            i += 1  # a word without a number (e.g. a list header) is kept out of the options
    mp = options.get("model_parallel_NPU_group")
    if mp is not None and not 1 <= mp <= MAX_RANK + 1:
        raise InputError(f"{source}: line {line}: model_parallel_NPU_group is {mp}, not a number "
                         f"of NPUs (1..{MAX_RANK + 1})")
    return policy, options


def _bounded(tok: str, lo: int, hi: int, outside: int | None = None) -> int | None:
    """The integer `tok` spells if it lies in lo..hi; `outside` if it is an integer that does
    not (however many digits it has), None if it is no integer. `hi` below 10**18."""
    m = _INTEGER.fullmatch(tok)
    if m is None:
        return None
    if len(m[2]) > 18:
        return outside
    v = int(m[1] + m[2])
    return v if lo <= v <= hi else outside


def _check_policy_options(wl: TextWorkload, line: int) -> None:
    if wl.policy.startswith("HYBRID_TRANSFORMER"):
        mp = wl.model_parallel_group
        if mp is None or mp < 1:
            raise InputError(f"{wl.source}: line {line}: {wl.policy} needs "
                             "'model_parallel_NPU_group: <n>' on the first line")
    if wl.policy.startswith("HYBRID_DLRM"):
        last = wl.last_bottom_layer
        if last is None or not 0 <= last < len(wl.layers) - 1:
            raise InputError(f"{wl.source}: line {line}: {wl.policy} needs the index of the last "
                             f"bottom layer (0..{len(wl.layers) - 2}), e.g. '{wl.policy} 3'")


def _int(tok: str, what: str, source: str, line: int) -> int:
    """A count of cycles or bytes: 0..MAX_VALUE, its digits counted before int() reads them."""
    m = _INTEGER.fullmatch(tok)
    if m is None:
        shown = tok if len(tok) <= 40 else tok[:37] + "..."
        raise InputError(f"{source}: line {line}: {what} must be an integer, got {shown!r}")
    if m[1] and m[2] != "0":
        raise InputError(f"{source}: line {line}: {what} must not be negative, got {_digits(m[2], '-')}")
    if len(m[2]) > 18 or int(m[2]) > MAX_VALUE:
        raise InputError(f"{source}: line {line}: {what} is {_digits(m[2])}, more than 2**53")
    return int(m[2])


def _digits(tok: str, sign: str = "") -> str:
    """A number of the file for a message: itself, or its length where it is long."""
    digits = tok.lstrip("0") or "0"
    if len(digits) <= 30:
        return sign + digits
    return f"a {'negative ' if sign else ''}{len(digits)}-digit number"


def _comm(tok: str, source: str, line: int) -> str:
    if tok not in COMM_TOKENS:
        hint = " (SimAI's group suffixes _EP/_DP_EP are not ASTRA-sim 1.0)" if "_" in tok else ""
        raise InputError(f"{source}: line {line}: unknown communication {tok!r}; expected one of "
                         f"{', '.join(COMM_TOKENS)}{hint}")
    return tok


def _parse_layer(toks: list[str], line: int, policy: str, source: str) -> TextLayer:
    want = COLUMNS + (policy == "HYBRID_CUSTOMIZED")
    if len(toks) not in (want, want + 2):  # ASTRA-sim also takes fwd memory read/write bytes
        raise InputError(f"{source}: line {line}: expected {want} columns, got {len(toks)}")

    def phase(c: int, name: str) -> Phase:
        return Phase(_int(toks[c], f"{name} compute", source, line), _comm(toks[c + 1], source, line),
                     _int(toks[c + 2], f"{name} comm size", source, line))

    own = toks[12] if policy == "HYBRID_CUSTOMIZED" else None
    if own is not None and own not in LAYER_POLICIES:
        raise InputError(f"{source}: line {line}: unknown layer parallelism {own!r}; expected one of "
                         f"{', '.join(LAYER_POLICIES)}")
    return TextLayer(toks[0], phase(2, "forward"), phase(5, "input-gradient"),
                     phase(8, "weight-gradient"), _int(toks[11], "update delay", source, line),
                     own, line)


def write_text_workload(wl: TextWorkload, path: str | Path) -> None:
    """Write `format_text_workload(wl)` to `path`, atomically (what `--emit text -o` writes)."""
    from chakra_tools.core.commit import atomic_output

    with atomic_output(path, "w") as f:
        f.write(format_text_workload(wl))


def format_text_workload(wl: TextWorkload) -> str:
    """The file text: a tab-separated table, as ASTRA-sim's own workloads are written."""
    head = [wl.policy]
    if wl.policy.startswith("HYBRID_DLRM") and wl.last_bottom_layer is not None:
        head.append(str(wl.last_bottom_layer))
    head += [f"{k}: {v}" for k, v in wl.options.items() if k != "DLRM_LAST_BOTTOM_LAYER"]
    out = ["\t".join(head), str(len(wl.layers))]
    for ly in wl.layers:
        cols = [ly.name, "-1"]
        for ph in (ly.fwd, ly.ig, ly.wg):
            cols += [str(ph.compute), ph.comm, str(ph.size)]
        cols.append(str(ly.update))
        if ly.policy:
            cols.append(ly.policy)
        out.append("\t".join(cols))
    return "\n".join(out) + "\n"


def with_policy(wl: TextWorkload, policy: str, **options: int) -> TextWorkload:
    return replace(wl, policy=policy, options=dict(options))
