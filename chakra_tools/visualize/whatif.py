"""The what-if part of `trace-visualize report`: a scaled (or any) rank set's predicted step on a
calibrated network against the measured step of a real run at that scale, and the network's fit.

- `--fit NET` (the folder `trace-convert calibrate` wrote, or its fit.json): every rank-set input
  is replayed as `trace-replay RANKSET --network-fit NET` replays it (the same backend, the same
  default modes, `--bandwidth`/`--latency` changes included: the report's figure is the CLI's),
  and as ASTRA-sim would on the files calibrate wrote for it (`--network NET/network.yml
  --system NET/system.json`); the fit itself is shown: the probed cluster's levels where
  calibrated with --probe, latency and bandwidth, each collective kind fitted alone, and the
  residuals per kind and size that calibrate computed.
- `--measured RUN` (a `trace-capture` folder at the target scale, or its manifest.json): each
  prediction (a rank set replayed on the fit, or a replay result given as input) is compared with
  the run's measured step as `trace-replay --compare` compares it (`compare_with_manifest`: the
  job's captured window per step, a single rank's step). Without it a prediction shows no
  measured step, and says so: the scaled files keep no measured window (trace-convert scale
  drops it: nothing in them was measured at the new degree).

`whatif_data(...)` is the content as data (in `--json`), `whatif_html(data)` the page sections.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from chakra_tools.core.errors import InputError

from .tables import html_table

MS = 1e6
NO_MEASURED = ("no measured step at this scale: the scaled files keep no measured window (nothing in "
               "them was measured at the new degree); give --measured RUN, a real capture at {ranks} "
               "rank(s), to compare")


def whatif_data(paths: list[str | Path], *, fit: str | Path | None = None, measured: str | Path | None = None,
                comm_group: str | Path | None = None, links: tuple = ()) -> dict:
    """{"fit": the calibration (Calibration.to_dict() plus its file) or None,
    "predictions": [one per rank-set input (when `fit`) and per replay-result input]}.
    `links`: what-if changes (replay.links), as trace-replay's --bandwidth/--latency."""
    from chakra_tools.replay.calfile import read_calibration

    cal = read_calibration(fit) if fit is not None else None
    manifest = _manifest(measured) if measured is not None else None
    fit_file = str(Path(fit) / "fit.json" if Path(fit).is_dir() else fit) if fit is not None else None
    preds = [p for p in (_prediction(path, cal, fit_file, manifest, comm_group, links) for path in paths) if p]
    return {"fit": {"file": fit_file, **cal.to_dict()} if cal else None, "predictions": preds,
            "measured_run": str(manifest) if manifest else None}


def _manifest(path: str | Path) -> Path:
    p = Path(path)
    file = p / "manifest.json" if p.is_dir() else p
    if not file.is_file():
        raise InputError(f"--measured {path}: no manifest.json (give a trace-capture run folder at the "
                         "target scale, or its manifest.json)")
    return file


def _prediction(path, cal, fit_file, manifest, comm_group, links=()) -> dict | None:
    from chakra_tools.core.measured import captured_steps, scaled_from
    from chakra_tools.core.chrome_trace import load as load_doc
    from chakra_tools.core.graph import RankSet
    from chakra_tools.replay import replay
    from chakra_tools.replay.spec import SystemSpec

    from .sources import detect

    kind = detect(path)
    if kind == "replay":
        doc, info = load_doc(path), None
        steps = (doc.get("config") or {}).get("captured_steps")  # where the replay recorded them
        network = str((doc.get("config") or {}).get("network", "as replayed"))
    elif kind == "rankset":
        rs = RankSet.load(path, comm_group)
        first = rs[rs.ranks[0]]
        info = scaled_from(first)
        steps = captured_steps(first.metadata, first.source or str(path))
        if cal is None:
            if info is None:
                return None
            return {"source": str(path), "ranks": len(rs), "scaled_from": info, "network": None,
                    "steps": steps, "makespan_ns": None, "predicted_step_ns": None, "measured": None,
                    "notes": ["a scaled rank set: give --fit NET (trace-convert calibrate's folder) to "
                              "replay it on the calibrated network and predict its step"]}
        npus = max(cal.npus, len(rs))
        spec = SystemSpec(kind_fit=fit_file, links=tuple(links))
        backend = spec.backend(npus, str(path))
        doc = replay(path, backend, comm_group=comm_group, record_events=False).to_dict(events=False)
        changes = "".join(f" --{c.what} {c.text}" for c in links)
        what = "the probed cluster" if cal.cluster is not None else "the per-kind fit"
        network = f"trace-replay --network-fit {fit_file}{changes} ({what}, {npus} ranks)"
        out = _compared(str(path), doc, info, steps, network, manifest)
        out["notes"] += getattr(backend, "extrapolated", list)()  # what trace-replay warns of
        files = {k: Path(v) for k, v in (cal.files or {}).items()}
        if not links and files.get("network") and files["network"].is_file() and files["system"].is_file():
            try:  # as ASTRA-sim runs it on the files calibrate wrote
                backend = SystemSpec(network=files["network"], system=files["system"]).backend(npus, str(path))
            except InputError as e:
                out["notes"].append(f"not replayed on {files['network']}: {e}")
            else:
                by_files = _compared(str(path), replay(path, backend, comm_group=comm_group,
                                                       record_events=False).to_dict(events=False),
                                     info, steps, network, manifest)
                out["network_file"] = {"network": str(files["network"]),
                                       "predicted_step_ns": by_files["predicted_step_ns"],
                                       "error": by_files["measured"]["error"] if by_files["measured"] else None}
        return out
    else:
        return None  # a captured run is measured, not a prediction
    return _compared(str(path), doc, info, steps, network, manifest)


def _compared(source: str, doc: dict, info: dict | None, steps: int | None, network: str,
              manifest: Path | None) -> dict:
    from chakra_tools.core.manifest import read_manifest
    from chakra_tools.replay import compare_with_manifest

    ranks = sorted(r["rank"] for r in doc["ranks"])
    makespan = doc.get("makespan_ns") or max(r["finish_ns"] for r in doc["ranks"])
    out = {"source": source, "ranks": len(ranks), "scaled_from": info, "network": network, "steps": steps,
           "makespan_ns": makespan, "predicted_step_ns": makespan / steps if steps else None,
           "measured": None, "notes": []}
    if manifest is None:
        out["notes"].append(NO_MEASURED.format(ranks=len(ranks)) if info else
                            "no measured step given (--measured RUN: a real capture to compare with)")
        if not steps:
            out["notes"].append("the captured steps are unknown: the predicted figure is the whole window")
        return out
    man = read_manifest(manifest)
    cmp = compare_with_manifest(doc, man)
    picked = cmp.get("job") or cmp["step"]
    out["steps"] = len(man.captured_steps) or out["steps"]
    out["predicted_step_ns"] = picked["predicted_ns"]
    out["measured"] = {"run": str(manifest), "ranks": man.world_size or len(man.ranks),
                       "measured_ns": picked["measured_ns"], "error": picked["error"],
                       "basis": "job window per step" if "job" in cmp else "mean rank step",
                       "per_rank": cmp["ranks"]}
    measured_ranks = man.world_size or len(man.ranks)
    if measured_ranks != len(ranks):
        out["notes"].append(f"the measured run has {measured_ranks} rank(s), the prediction {len(ranks)}: "
                            "not the same scale")
    return out


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------

def _ms(ns: float | None) -> str:
    return "" if ns is None else f"{ns / MS:.3f}"


def _us(ns: float) -> str:
    return f"{ns / 1e3:.1f}"


def whatif_html(data: dict) -> str:
    return _predictions_html(data["predictions"]) + _fit_html(data["fit"])


def _was(info: dict) -> str:
    """The captured rank count, with the model-parallel degrees scale kept."""
    kept = ", ".join(f"{k} {info[k]}" for k in ("tp", "pp") if info[k] > 1)
    return f'{info["dp"] * info["tp"] * info["pp"]}' + (f" ({kept} kept)" if kept else "")


def headline_html(data: dict) -> str:
    """The prediction first: each predicted step, and its error where a real run was given."""
    cards = []
    for p in data["predictions"]:
        if p["predicted_step_ns"] is None:
            continue
        m = p["measured"]
        against = ("" if m is None else
                   f' measured {_ms(m["measured_ns"])} ms, error <b>{100 * m["error"]:+.1f}%</b>')
        cards.append(f'<div class="card" data-headline="prediction">predicted step, {p["ranks"]} ranks'
                     f'<b>{_ms(p["predicted_step_ns"])} ms</b>{escape(p["network"] or "")}{against}</div>')
    return '<div class="cards">' + "".join(cards) + "</div>" if cards else ""


def _predictions_html(preds: list[dict]) -> str:
    if not preds:
        return ""
    rows = []
    for p in preds:
        info = p["scaled_from"]
        scaled = (f'{_was(info)} → {p["ranks"]} ranks ({escape(info["batch"])} batch)' if info else "not scaled")
        m = p["measured"]
        k = p.get("network_file")
        rows.append([f'<span class="l">{escape(p["source"])}</span>', scaled, str(p["ranks"]),
                     escape(p["network"] or "none"), "" if p["steps"] is None else str(p["steps"]),
                     _ms(p["predicted_step_ns"]), "none" if m is None else _ms(m["measured_ns"]),
                     "" if m is None else f'{100 * m["error"]:+.1f}%',
                     "" if k is None else _ms(k["predicted_step_ns"])
                     + ("" if k["error"] is None else f' ({100 * k["error"]:+.1f}%)')])
    notes = "".join(f'<p class="note">{escape(p["source"])}: {escape(n)}</p>' for p in preds for n in p["notes"])
    return ('<h2 id="whatif">Predicted step against measured</h2>'
            + html_table(["input", "scaled", "ranks", "network", "steps", "predicted ms/step", "measured ms/step",
                          "error", "on network.yml (as ASTRA-sim) ms/step"], rows, "whatif") + notes)


def _fit_html(cal: dict | None) -> str:
    if cal is None:
        return ""
    f = cal["fit"]
    head = (f'<p data-fit="parameters">from {escape(cal["file"])}: latency <b>{f["latency_ns"]:.0f} ns</b> per hop, '
            f'bandwidth <b>{f["bandwidth_gbps"]:.4g} GB/s</b>, local-mem-bw {f["local_mem_bw_gbps"]:.4g} GB/s '
            f'(Ring of {cal["npus"]}); median |error| over {len(cal["buckets"])} buckets '
            f'<b>{100 * cal["median_abs_error"]:.1f}%</b></p>')
    kinds = html_table(["kind", "latency ns", "bandwidth GB/s", "sizes", "median |error|"],
                   [[escape(k), f'{v["latency_ns"]:.0f}' if v["separable"] else "not separable",
                     f'{v["bandwidth_gbps"]:.4g}' if v["separable"] else "(one size only)", str(v["sizes"]),
                     f'{100 * v["median_abs_error"]:.1f}%'] for k, v in cal["kinds"].items()], "fit-kinds")
    rows = html_table(["kind", "ranks", "bytes", "n", "mean µs", "median µs", "min µs", "max µs", "fitted µs", "error"],
                  [[escape(r["kind"]), str(r["ranks"]), str(r["size"]), str(r["count"]), _us(r["measured_ns"]),
                    _us(r["median_ns"]), _us(r["min_ns"]), _us(r["max_ns"]), _us(r["predicted_ns"]),
                    f'{100 * r["error"]:+.1f}%'] for r in cal["buckets"]], "fit-residuals")
    checks = "".join(f'<p>replayed on the {escape(net)} network: '
                     + ", ".join(f"{escape(m)} {100 * e:+.1f}%" for m, e in modes.items()) + "</p>"
                     for net, modes in (cal.get("replay") or {}).items())
    per_kind = cal.get("per_kind") or {}
    by_kind = "" if not per_kind else (
        '<h3>per-kind fit (trace-replay --network-fit: one latency per kind, the byte costs shared; '
        'ASTRA-sim reads the one Ring above)</h3>'
        + html_table(["kind", "latency ns"], [[escape(k), f'{v["latency_ns"]:.0f}'] for k, v in per_kind.items()],
                     "fit-per-kind"))
    cluster = cal.get("cluster")
    probed = "" if not cluster else (
        '<h3>the cluster the probe measured (what trace-replay --network-fit prices with)</h3>'
        + html_table(["level", "units", "latency µs", "Mbit/s", "shared by a unit's ranks"],
                     [[escape(lv["name"]), str(lv["npus"]), _us(lv["latency_ns"]),
                       f'{8e3 / lv["ns_per_byte"]:.4g}' if lv["ns_per_byte"] > 0 else "∞",
                       "yes" if lv["shared"] else "no"] for lv in cluster["levels"]], "fit-cluster")
        + html_table(["kind", "efficiency", "floor per round µs (" + ", ".join(
                         escape(lv["name"]) for lv in cluster["levels"]) + ")"],
                     [[escape(k), f'{v["efficiency"]:.3f}', ", ".join(_us(f) for f in v["floors_ns"])
                       + (" per peer a rank sends to" if v.get("per_peer") else "")]
                      for k, v in cluster["kinds"].items()], "fit-cluster-kinds"))
    return ('<h2 id="network-fit">Calibrated network</h2>' + probed + head
            + '<h3>each kind fitted alone</h3>' + kinds + by_kind
            + '<h3>residuals per kind and size (measured: the instances\' mean, waits taken out)</h3>' + rows + checks)
