"""What-if changes to a network's links, as a user states them: "the links between machines 5x
faster", "500 Mbit/s between nodes", "latency 2 us within a node".

A change names a level of the fitted fabric (`intra-node`, `inter-node`) or a dimension of an
ASTRA-sim network by its index (0 is the innermost), and either a factor (`x5`: five times the
bandwidth; for latency, five times the latency) or a value with its unit. Bandwidth units are
bits or bytes per second with SI prefixes (`500Mbit/s`, `500Mbps`, `12.5GB/s`) or binary ones
(`1.5GiB/s`); latency units are ns, us, ms, s.

>>> change = parse_change("inter-node=500Mbit/s", "bandwidth")
>>> change.level, round(change.ns_per_byte(83.7), 3)
('inter-node', 16.0)
>>> parse_change("0=x4", "bandwidth").ns_per_byte(2.0)
0.5
>>> parse_change("intra-node=2us", "latency").latency_ns(100.0)
2000.0
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from chakra_tools.core.errors import InputError

from .config import NetworkConfig
from .fabric import Fabric

_BANDWIDTH_UNITS = {"bit/s": 1 / 8, "bps": 1 / 8, "b/s": 1.0, "B/s": 1.0}
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2 ** 10, "Mi": 2 ** 20,
           "Gi": 2 ** 30, "Ti": 2 ** 40}
_LATENCY_UNITS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"


@dataclass(frozen=True)
class LinkChange:
    """One level's bandwidth or latency, multiplied (`factor`) or set (`value`: bytes/s for
    bandwidth, ns for latency)."""

    level: str
    what: str  # "bandwidth" | "latency"
    factor: float | None = None
    value: float | None = None
    text: str = ""

    def ns_per_byte(self, old: float) -> float:
        if self.factor is not None:
            return old / self.factor
        return 1e9 / self.value

    def latency_ns(self, old: float) -> float:
        return old * self.factor if self.factor is not None else self.value


def parse_change(text: str, what: str) -> LinkChange:
    """`LEVEL=VALUE` as --bandwidth or --latency takes it; ValueError saying what is wrong."""
    level, sep, value = text.partition("=")
    level, value = level.strip(), value.strip().replace(" ", "")
    if not sep or not level or not value:
        raise ValueError(f"{text!r}: expected LEVEL=VALUE, e.g. inter-node=x5 or inter-node="
                         + ("500Mbit/s" if what == "bandwidth" else "20us"))
    factor = re.fullmatch(rf"[xX*]({_NUMBER})|({_NUMBER})[xX]", value)
    if factor:
        f = float(factor.group(1) or factor.group(3))
        if f <= 0:
            raise ValueError(f"{text!r}: the factor must be above 0")
        return LinkChange(level, what, factor=f, text=text)
    m = re.fullmatch(rf"({_NUMBER})(.*)", value)
    unit = m.group(3) if m else ""
    amount = float(value[: len(value) - len(unit)]) if m else 0.0
    if what == "bandwidth":
        for suffix, bytes_per in _BANDWIDTH_UNITS.items():
            prefix = unit[: -len(suffix)] if unit.endswith(suffix) else None
            if prefix is not None and prefix in _PREFIX and amount > 0:
                return LinkChange(level, what, value=amount * _PREFIX[prefix] * bytes_per, text=text)
        raise ValueError(f"{text!r}: a bandwidth is a factor (x5) or a rate with its unit "
                         "(500Mbit/s, 500Mbps, 12.5GB/s, 1.5GiB/s), above 0")
    if unit in _LATENCY_UNITS and amount >= 0:
        return LinkChange(level, what, value=amount * _LATENCY_UNITS[unit], text=text)
    raise ValueError(f"{text!r}: a latency is a factor (x0.5) or a time with its unit (500ns, 20us, 1ms)")


def parse_changes(bandwidth: Iterable[str] = (), latency: Iterable[str] = ()) -> tuple[LinkChange, ...]:
    return (tuple(parse_change(t, "bandwidth") for t in bandwidth)
            + tuple(parse_change(t, "latency") for t in latency))


def _index(names: Sequence[str], change: LinkChange, source: str) -> int:
    if change.level in names:
        return names.index(change.level)
    if change.level.isdigit() and int(change.level) < len(names):
        return int(change.level)
    raise InputError(f"--{change.what} {change.text}: {source} has no level {change.level!r}; its levels: "
                     + ", ".join(f"{i} ({n})" for i, n in enumerate(names)))


def changed_fabric(fabric: Fabric, changes: Sequence[LinkChange], source: str = "the fitted network") -> Fabric:
    """`fabric` with each change made to the level it names."""
    names = [lv.name for lv in fabric.levels]
    for c in changes:
        i = _index(names, c, source)
        lv = fabric.levels[i]
        fabric = (fabric.with_level(i, ns_per_byte=c.ns_per_byte(lv.ns_per_byte)) if c.what == "bandwidth"
                  else fabric.with_level(i, latency_ns=c.latency_ns(lv.latency_ns)))
    return fabric


def latency_factors(fabric: Fabric, changes: Sequence[LinkChange], zero_byte: Sequence[float]) -> dict[int, float]:
    """By level, what the --latency `changes` multiply the time a message of no bytes takes there
    by: a factor as given, a time over `zero_byte`'s (each level's time at no bytes before the
    change; at 0 no factor applies). A fitted cluster's rounds take a floor beyond the link's own
    latency (waking the members), which a what-if on the level's latency scales with it."""
    names = [lv.name for lv in fabric.levels]
    now, factors = list(zero_byte), {}
    for c in changes:
        if c.what != "latency":
            continue
        i = _index(names, c, "the fitted network")
        new = c.latency_ns(now[i])
        if now[i] > 0:
            factors[i] = factors.get(i, 1.0) * new / now[i]
        now[i] = new
    return factors


def changed_network(net: NetworkConfig, changes: Sequence[LinkChange]) -> NetworkConfig:
    """An ASTRA-sim network with each change made to the dimension it names (by index)."""
    dims = list(net.dims)
    names = [f"dim {i}" for i in range(len(dims))]
    for c in changes:
        i = _index(names, c, net.source or "the network")
        d = dims[i]
        if c.what == "bandwidth":
            gbps = d.bandwidth_gbps * c.factor if c.factor is not None else c.value / (1 << 30)
            dims[i] = replace(d, bandwidth_gbps=gbps)
        else:
            dims[i] = replace(d, latency_ns=c.latency_ns(d.latency_ns))
    return NetworkConfig(tuple(dims), net.source)
