"""A calibration's files: `network.yml` and `system.json` (ordinary ASTRA-sim files of the shared
fit), `fit.json` (everything `trace-replay --network-fit` prices with: the fit, its residuals, the
per-kind fit, the probed cluster), `cluster.infragraph.yaml` for a probed cluster; written
together and read back checked, field by field, and the fit as text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chakra_tools.core.commit import Staged
from chakra_tools.core.errors import InputError
from chakra_tools.core.commit import atomic_output

from .clusterfit import ONE_SIZE_WARNING, ClusterFit, cluster_lines
from .fabric import Fabric, Level
from .library import KindCost, library_of
from .netfit import PARAMS, Calibration, NetworkFit


def network_yaml(fit: NetworkFit, npus: int) -> str:
    """The analytical network file (ASTRA-sim's format, REFERENCE §4)."""
    return ("# ASTRA-sim analytical network fitted by trace-convert calibrate (chakra_tools/replay/netfit.py)\n"
            "topology: [ Ring ]\n"
            f"npus_count: [ {npus} ]\n"
            f"bandwidth: [ {fit.bandwidth_gbps:.6g} ]  # GB/s (1 GB = 2**30 bytes)\n"
            f"latency: [ {fit.latency_ns:.6g} ]  # ns per hop\n")


def system_json(fit: NetworkFit) -> dict:
    """The system file: ring everywhere, one chunk, the fitted reduction bandwidth."""
    return {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
            "preferred-dataset-splits": 1,
            **{f"{c}-implementation": ["ring"] for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")},
            "collective-optimization": "baseline", "local-mem-bw": round(fit.local_mem_bw_gbps, 6),
            "boost-mode": 0, "roofline-enabled": 0}


def write_calibration(cal: Calibration, out_dir: str | Path) -> Calibration:
    """Write OUT/network.yml, OUT/system.json and OUT/fit.json, and for a probed cluster
    OUT/cluster.infragraph.yaml where the infragraph package is installed (the fitted fabric as an
    InfraGraph, for `trace-replay --network` and other tools); the paths go into `cal.files`."""
    out = Path(out_dir)
    if not out.is_dir():
        raise InputError(f"{out}: output folder does not exist")
    names = {"network": "network.yml", "system": "system.json", "report": "fit.json"}
    infra = _cluster_infragraph(cal)
    if infra is not None:
        names["infragraph"] = "cluster.infragraph.yaml"
    cal.files = {k: str(out / n) for k, n in names.items()}
    with Staged(out, "calibration") as staged:  # the three replaced together: one fit, never two halves
        with atomic_output(staged.path(names["network"]), "w") as f:
            f.write(cal.cluster.network_yaml(cal.npus) if cal.cluster is not None else network_yaml(cal.fit, cal.npus))
        with atomic_output(staged.path(names["system"]), "w") as f:
            json.dump(system_json(cal.fit), f, indent=1)
        with atomic_output(staged.path(names["report"]), "w") as f:
            json.dump(cal.to_dict(), f, indent=1)
        if infra is not None:
            from .infrawrite import write_infragraph

            write_infragraph(infra, staged.path(names["infragraph"]))
        staged.commit(names.values())
    return cal


def _cluster_infragraph(cal: Calibration):
    """The probed cluster's fabric, sized to the calibration's ranks, as an InfraGraph (None
    without a probe, without the package, or where the probe found a level's rate too fast to
    measure: an InfraGraph link needs one)."""
    if cal.cluster is None or any(lv.ns_per_byte <= 0 for lv in cal.cluster.fabric.levels):
        return None
    try:
        from .infrawrite import fabric_infragraph
        import infragraph  # noqa: F401
    except ImportError:
        return None
    return fabric_infragraph(cal.cluster.fabric.sized(cal.npus), "calibrated-cluster")


#: what each bucket row of fit.json holds, and its type (int also takes a whole float)
_ROW_FIELDS = {"kind": str, "ranks": int, "size": int, "count": int, "measured_ns": float, "median_ns": float,
               "min_ns": float, "max_ns": float, "predicted_ns": float, "error": float}
_KIND_FIELDS = {"latency_ns": float, "bandwidth_gbps": float, "sizes": int, "separable": bool,
                "median_abs_error": float}
_FIT_FIELDS = ("latency_ns", "link_ns_per_byte", "reduce_ns_per_byte")


def read_calibration(path: str | Path) -> Calibration:
    """The Calibration that `write_calibration` wrote: `path` is its fit.json or the folder that
    holds it. Every field is checked for its type; a malformed file is an InputError naming the
    file and the field (the report reads it typed, not as loose JSON)."""
    from chakra_tools.core.files import read_json

    from chakra_tools.core.commit import recover

    p = Path(path)
    file = p / "fit.json" if p.is_dir() else p
    recover(file.parent)  # a calibration killed while it replaced these files is finished first
    if not file.exists():
        raise InputError(f"{file}: no such file (a calibration folder holds the fit.json that "
                         "trace-convert calibrate writes)")
    doc = read_json(file, what="an object (the fit.json of trace-convert calibrate)")

    def bad(where: str, want: str) -> InputError:
        return InputError(f"{file}: {where}: expected {want} (not a fit.json of trace-convert calibrate?)")

    def typed(obj: dict, key: str, kind: type, where: str):
        v = obj.get(key) if isinstance(obj, dict) else None
        if kind is bool:
            ok = isinstance(v, bool)
        elif kind is int:
            ok = isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()
        elif kind is float:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
        else:
            ok = isinstance(v, kind)
        if not ok:
            raise bad(f"{where}{key}", {bool: "true or false", int: "an integer", float: "a number",
                                        str: "a string", dict: "an object", list: "a list"}[kind])
        return int(v) if kind is int else float(v) if kind is float else v

    if doc.get("version") != 1:
        raise bad("version", "1")
    fit_doc = typed(doc, "fit", dict, "")
    values = [typed(fit_doc, k, float, "fit.") for k in _FIT_FIELDS]
    if min(values) < 0:
        raise bad("fit", "non-negative parameters")
    npus = typed(doc, "npus", int, "")
    if npus < 1:
        raise bad("npus", "at least 1")
    rows = []
    for i, row in enumerate(typed(doc, "buckets", list, "")):
        if not isinstance(row, dict):
            raise bad(f"buckets[{i}]", "an object")
        rows.append({**row, **{k: typed(row, k, t, f"buckets[{i}].") for k, t in _ROW_FIELDS.items()}})
    kinds = {}
    for kind, k in typed(doc, "kinds", dict, "").items():
        if not isinstance(k, dict):
            raise bad(f"kinds.{kind}", "an object")
        kinds[kind] = {**k, **{f: typed(k, f, t, f"kinds.{kind}.") for f, t in _KIND_FIELDS.items()}}
    replay = doc.get("replay")
    if replay is not None and not (isinstance(replay, dict) and all(
            isinstance(m, dict) and all(isinstance(e, (int, float)) for e in m.values()) for m in replay.values())):
        raise bad("replay", "an object {network: {mode: error}} or null")
    files = doc.get("files") or {}
    if not isinstance(files, dict):
        raise bad("files", "an object")
    per_kind = {}
    for kind, k in typed(doc, "per_kind", dict, "").items() if "per_kind" in doc else ():
        params = [typed(k, p, float, f"per_kind.{kind}.") for p in PARAMS]
        if min(params) < 0:
            raise bad(f"per_kind.{kind}", "non-negative parameters")
        per_kind[kind] = NetworkFit(*params)
    cluster = cluster_from_dict(doc["cluster"], str(file)) if doc.get("cluster") is not None else None
    return Calibration(NetworkFit(*values), npus, rows, kinds, {k: str(v) for k, v in files.items()}, replay,
                       per_kind, cluster, _sharing(doc.get("sharing"), file), _job_floors(doc.get("job_floors"), file))


def _sharing(v, file) -> dict | None:
    """fit.json's "sharing" (sharefit.SharingFit.to_dict), checked: it is printed, not priced."""
    if v is None:
        return None
    keys = {"efficiency": (int, float), "error_before": (int, float, type(None)),
            "error_after": (int, float, type(None)), "replays": (int,), "reason": (str,)}
    if not isinstance(v, dict) or any(not isinstance(v.get(k), t) or isinstance(v.get(k), bool)
                                      for k, t in keys.items()):
        raise InputError(f"{file}: sharing: expected an object with {', '.join(keys)}")
    return {k: v[k] for k in keys}


def _job_floors(v, file) -> dict | None:
    """fit.json's "job_floors" (jobfloors.py), checked: printed, not priced (the cluster's kinds are)."""
    if v is None:
        return None
    if not isinstance(v, dict) or any(
            not isinstance(f, dict) or set(f) != {"calls", "probe_ns", "job_ns"}
            or any(not isinstance(x, (int, float)) or isinstance(x, bool) or x < 0 for x in f.values())
            for f in v.values()):
        raise InputError(f"{file}: job_floors: expected an object {{kinds: {{calls, probe_ns, job_ns}}}}, "
                         "each a number of 0 or more")
    return v


def format_calibration(cal: Calibration) -> str:
    """The fit as text: the parameters, a row per bucket, a line per kind, the per-kind fit."""
    f = cal.fit
    lines = []
    if cal.cluster is not None:
        lines += cluster_lines(cal.cluster) + ["", "the capture's own collectives, on the shared fit "
                                                   "(trace-replay --network-fit prices with the probe's network above):"]
    elif cal.one_size:
        lines.append(ONE_SIZE_WARNING)
    lines += [f"fitted network: latency {f.latency_ns:.0f} ns/hop, bandwidth {f.bandwidth_gbps:.4g} GB/s, "
             f"local-mem-bw {f.local_mem_bw_gbps:.4g} GB/s (Ring of {cal.npus}, ring algorithms)",
             f"{'kind':<15}{'ranks':>6}{'bytes':>10}{'n':>4}{'mean':>11}{'median':>11}{'min..max':>22}{'fitted':>11}"
             f"{'error':>9}"]
    for r in cal.rows:
        lines.append(f"{r['kind']:<15}{r['ranks']:>6}{r['size']:>10}{r['count']:>4}{_us(r['measured_ns']):>11}"
                     f"{_us(r['median_ns']):>11}"
                     f"{_us(r['min_ns']) + '..' + _us(r['max_ns']):>22}{_us(r['predicted_ns']):>11}"
                     f"{r['error']:>+9.1%}")
    for kind, k in cal.kinds.items():
        alone = (f"latency {k['latency_ns']:.0f} ns, bandwidth {k['bandwidth_gbps']:.4g} GB/s"
                 if k["separable"] else "one size only: latency and bandwidth not separable")
        lines.append(f"  {kind} alone: {alone}; median |error| {k['median_abs_error']:.1%}")
    lines.append(f"median |error| over {len(cal.rows)} buckets: {cal.median_abs_error:.1%}")
    if cal.per_kind:
        any_fit = next(iter(cal.per_kind.values()))
        lines.append("per-kind fit (trace-replay --network-fit; ASTRA-sim reads the shared one): latency "
                     + ", ".join(f"{k} {f.latency_ns:.0f} ns" for k, f in sorted(cal.per_kind.items()))
                     + f"; bandwidth {any_fit.bandwidth_gbps:.4g} GB/s, local-mem-bw {any_fit.local_mem_bw_gbps:.4g} GB/s")
    if cal.sharing is not None:
        lines.append(_sharing_line(cal.sharing))
    for kinds, f in (cal.job_floors or {}).items():
        lines.append(f"floor within a machine, {kinds.replace(',', ', ')}: {f['job_ns'] / 1000:.0f} us a round, as "
                     f"the capture's {f['calls']} calls there paid it (the probe's {f['probe_ns'] / 1000:.0f} us)")
    for net, modes in (cal.replay or {}).items():
        lines.append(f"replayed on the {net} network: " + ", ".join(f"{m} {e:+.1%}" for m, e in modes.items())
                     + " (job error against the manifest)")
    return "\n".join(lines)


def _sharing_line(s: dict) -> str:
    def pct(e):
        return "n/a" if e is None else f"{e:+.1%}"

    return (f"calls sharing an uplink: {s['efficiency']:.0%} of its rate ({s['reason']}; the capture's own step "
            f"replayed on the probed network: {pct(s['error_before'])} before, {pct(s['error_after'])} after)")


def _us(ns: float) -> str:
    return f"{ns / 1000:.1f}us"


def cluster_from_dict(doc: Any, source: str) -> ClusterFit:
    """The ClusterFit `to_dict` wrote (fit.json's "cluster"); InputError naming the field."""
    def bad(where: str, want: str) -> InputError:
        return InputError(f"{source}: cluster.{where}: expected {want}")

    def number(obj: Any, key: str, where: str, least: float = 0.0) -> float:
        v = obj.get(key) if isinstance(obj, dict) else None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not least <= v < 1e18:
            raise bad(f"{where}{key}", f"a number >= {least:g}")
        return float(v)

    if not isinstance(doc, dict):
        raise bad("", "an object")
    library = doc.get("library")
    if library_of(library) is None:
        raise bad("library", "gloo")
    levels = []
    for i, lv in enumerate(doc.get("levels") or []):
        npus = number(lv, "npus", f"levels[{i}].", 1)
        if not npus.is_integer():
            raise bad(f"levels[{i}].npus", "an integer")
        levels.append(Level(str(lv.get("name", f"level {i}")), int(npus), number(lv, "latency_ns", f"levels[{i}]."),
                            number(lv, "ns_per_byte", f"levels[{i}]."), bool(lv.get("shared", False)),
                            number(lv, "burst_ns", f"levels[{i}].") if "burst_ns" in lv else 0.0,
                            _efficiency_of(lv, i, bad)))
    if not levels:
        raise bad("levels", "at least one level")
    kinds = {}
    for k, c in (doc.get("kinds") or {}).items():
        floors = c.get("floors_ns") if isinstance(c, dict) else None
        if not isinstance(floors, list) or len(floors) > len(levels) or not all(
                isinstance(f, (int, float)) and not isinstance(f, bool) and 0 <= f < 1e18 for f in floors):
            raise bad(f"kinds.{k}.floors_ns", f"a list of at most {len(levels)} numbers >= 0 (one per level)")
        by_size = c.get("by_size", [])
        if not isinstance(by_size, list) or not all(
                isinstance(p, list) and len(p) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                            and x > 0 for x in p) for p in by_size):
            raise bad(f"kinds.{k}.by_size", "a list of [size, efficiency] pairs above 0")
        per_peer = c.get("per_peer", False)  # absent in fits written before floors per peer: per round
        if not isinstance(per_peer, bool):
            raise bad(f"kinds.{k}.per_peer", "true or false")
        kinds[str(k)] = KindCost(tuple(float(f) for f in floors), number(c, "efficiency", f"kinds.{k}.", 1e-6),
                                 tuple(sorted((int(s_), float(e)) for s_, e in by_size)), per_peer)
    rows = doc.get("rows") or []
    window = doc.get("p2p_window_bytes")
    if window is not None and (type(window) is not int or not 0 <= window < 1 << 62):
        raise bad("p2p_window_bytes", "a size in bytes, or null")
    return ClusterFit(Fabric(tuple(levels)), library_of(library), kinds,
                      number(doc, "reduce_ns_per_byte", ""), bool(doc.get("inter_known", True)),
                      tuple(r for r in rows if isinstance(r, dict)), window)


def _efficiency_of(lv: dict, i: int, bad) -> float:
    v = lv.get("shared_efficiency", 1.0)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise bad(f"levels[{i}].shared_efficiency", "a number in (0, 1]")
    return float(v)
