"""`trace-visualize report`: one self-contained HTML file that explains a run at a glance.

The page embeds everything (CSS, inline SVG charts, a few lines of JavaScript that only count
what was drawn and fill the page's summary line), so it opens from a file with no network.
Sections: per-rank breakdown (compute, overlap, exposed communication, idle), top operators by
time, communication volume by kind and group, the network's busiest links (links.py, when a
replay routed its messages over links), the critical path, and, when a measured source
(a captured run or a converted rank set) and a simulated one (a replay result) are both given,
measured against simulated side by side; with `whatif` (whatif.whatif_data: `--fit`,
`--measured`) a prediction's step against a real run's at that scale and the calibrated
network's fit.

`report_data(sets)` is the same content as data (what `--json` prints); `render_html(sets)` the
page.
"""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape
from pathlib import Path

from chakra_tools.core.commit import atomic_output
from chakra_tools.core.model import format_bytes
from chakra_tools.core.replaydoc import headline_line

from . import analysis, svg
from .tables import html_table
from .events import EventSet
from .links import section_html as links_html
from .whatif import headline_html, whatif_html

MS = 1e6  # ns per ms
PARTS = ("compute", "overlap", "exposed_comm", "idle")


def _ms(ns: float) -> float:
    return ns / MS


def makespan_ns(es: EventSet) -> int:
    return es.makespan_ns if es.makespan_ns is not None else es.end_ns - es.origin_ns


def source_data(es: EventSet) -> dict:
    """Everything the report shows about one source, as plain data."""
    path = analysis.critical_path(es)
    origin = es.origin_ns  # a property that scans every event: once
    return {
        "source": es.source, "times": es.label, "ranks": es.ranks, "events": len(es.events),
        "makespan_ns": makespan_ns(es), "breakdown": analysis.breakdown(es),
        "top_operators": analysis.top_operators(es), "comm_volume": analysis.comm_volume(es),
        "critical_path": [{"rank": e.rank, "node_id": e.node_id, "name": e.name, "kind": e.kind,
                           "start_ns": e.start_ns - origin, "dur_ns": e.dur_ns} for e in path],
        "notes": es.notes,
        **({"links": es.links.to_dict()} if es.links is not None else {}),
    }


def report_data(sets: list[EventSet], whatif: dict | None = None) -> dict:
    data = {"sources": [source_data(es) for es in sets]}
    head = next((es.fidelity["headline"] for es in sets if es.fidelity and es.fidelity.get("headline")), None)
    if head is not None:
        data["headline"] = head  # the replay's error against the measured steps, as trace-replay printed it
    cmp = comparison(data["sources"])
    if cmp:
        data["comparison"] = cmp
    if whatif is not None:
        data["whatif"] = whatif
    return data


def comparison(sources: list[dict]) -> list[dict]:
    """Per rank: measured finish vs simulated finish and the error, when both kinds are present
    (a rank set without start times is only "laid out", not measured: no comparison)."""
    measured = next((s for s in sources if s["times"] in ("measured", "converted")), None)
    simulated = next((s for s in sources if s["times"] == "simulated"), None)
    if measured is None or simulated is None:
        return []
    rows = []
    for r in sorted(set(measured["breakdown"]) | set(simulated["breakdown"])):
        m = measured["breakdown"].get(r, {}).get("finish_ns")
        s = simulated["breakdown"].get(r, {}).get("finish_ns")
        err = (s - m) / m if m and s is not None else None
        rows.append({"rank": r, "measured_ns": m, "simulated_ns": s, "error": err})
    return rows


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:10px 0 4px}
.sub{color:#666;font-size:13px} .note{color:#8a6d3b;font-size:12px}
.cols{display:flex;flex-wrap:wrap;gap:28px} .col{flex:1 1 600px;min-width:0}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
td,th{border-bottom:1px solid #eee;padding:2px 8px;text-align:right}
td:first-child,th:first-child{text-align:left} td span.l{display:block;text-align:left}
.legend{font-size:12px;margin:4px 0} .key{margin-right:14px}
.key i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
.cards{display:flex;gap:14px;flex-wrap:wrap;margin:12px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;font-size:13px}
.card b{display:block;font-size:18px}
"""

JS = """
document.querySelectorAll('[data-chart="breakdown"]').forEach(function (c) {
  c.setAttribute('data-ranks-drawn', c.querySelectorAll('g.bar-row').length);
});
var first = document.querySelector('[data-chart="breakdown"]');
var n = first ? first.querySelectorAll('g.bar-row').length : 0;
var s = document.getElementById('ranks-drawn');
s.textContent = n + (n === 1 ? ' rank drawn' : ' ranks drawn');
s.setAttribute('data-count', n);
"""


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:+.1f}%"


def _breakdown_section(src: dict, scale: float) -> str:
    rows = []
    for r, b in sorted(src["breakdown"].items()):
        parts = [("not_started", _ms(b.get("start_ns", 0))), ("compute", _ms(b["compute_ns"] - b["overlap_ns"])),
                 ("overlap", _ms(b["overlap_ns"])), ("exposed_comm", _ms(b["exposed_comm_ns"])),
                 ("idle", _ms(b["idle_ns"]))]
        rows.append((f"rank {r}", {"rank": r, "finish-ns": b["finish_ns"]}, parts))
    chart = svg.stacked_bars(rows, scale=scale)
    table = html_table(["rank", "start ms", "finish ms", "compute ms", "overlap ms", "exposed comm ms", "idle ms"],
                   [[str(r), *(f"{_ms(b.get(k, 0)):.3f}" for k in ("start_ns", "finish_ns", "compute_ns", "overlap_ns",
                                                                    "exposed_comm_ns", "idle_ns"))]
                    for r, b in sorted(src["breakdown"].items())])
    return (f'<div class="col"><h3>{escape(src["times"])}: {escape(src["source"])}</h3>'
            f'<div data-chart="breakdown" data-times="{escape(src["times"])}">{chart}</div>'
            f"<details><summary>numbers</summary>{table}</details></div>")


def _top_section(src: dict) -> str:
    rows = [(o["name"], _ms(o["total_ns"]), svg.COLORS.get(o["kind"], "#3182bd"),
             f'{o["name"]}: {_ms(o["total_ns"]):.4g} ms in {o["count"]} calls ({100 * o["share"]:.1f}%)')
            for o in src["top_operators"]]
    if not rows:
        return f'<div class="col"><h3>{escape(src["times"])}</h3><p class="sub">no timed work</p></div>'
    table = html_table(["operator", "kind", "calls", "self ms", "share"],
                   [[f'<span class="l">{escape(o["name"][:90])}</span>', o["kind"], str(o["count"]),
                     f'{_ms(o["total_ns"]):.3f}', f'{100 * o["share"]:.1f}%'] for o in src["top_operators"]])
    return (f'<div class="col"><h3>{escape(src["times"])}</h3>'
            f'<div data-chart="top-operators">{svg.hbars(rows)}</div>{table}</div>')


def _comm_section(src: dict) -> str:
    vol = src["comm_volume"]
    if not vol:
        return f'<div class="col"><h3>{escape(src["times"])}</h3><p class="sub">no communication</p></div>'
    rows = [(f'{v["kind"]} {v["group"]}', v["bytes"] / (1 << 20), "#e6550d",
             f'{v["kind"]} in group {v["group"]}: {v["count"]} ops, {format_bytes(v["bytes"])}') for v in vol]
    table = html_table(["kind", "group", "ops", "bytes"],
                   [[escape(v["kind"]), escape(v["group"]), str(v["count"]), format_bytes(v["bytes"])] for v in vol])
    return (f'<div class="col"><h3>{escape(src["times"])}</h3>'
            f'<div data-chart="comm-volume">{svg.hbars(rows, fmt=lambda v: format_bytes(int(v * (1 << 20))))}</div>{table}'
            f'<p class="sub">bytes summed over the ranks\' records</p></div>')


#: the critical path's costliest nodes listed under its drawing
PATH_ROWS = 60


def _path_section(src: dict) -> str:
    path = src["critical_path"]
    if not path:
        return (f'<div class="col"><h3>{escape(src["times"])}</h3><p class="sub">no critical path: this source '
                "records no dependencies (replay the converted trace to get one)</p></div>")
    segs = [(f'rank {p["rank"]}', _ms(p["start_ns"]), _ms(p["start_ns"] + p["dur_ns"]),
             svg.COLORS.get(p["kind"], "#999"), f'%{p["node_id"]} {p["name"]}: {_ms(p["dur_ns"]):.4g} ms')
            for p in path]
    segs = _coalesce(segs)
    # nodes on the path may run at once (a call and the op it overlaps): the time it covers counts once
    busy = analysis.length(analysis.union((p["start_ns"], p["start_ns"] + p["dur_ns"]) for p in path))
    costly = sorted(path, key=lambda p: (-p["dur_ns"], p["start_ns"]))[:PATH_ROWS]
    rows = [[str(p["rank"]), f'%{p["node_id"]}', f'<span class="l">{escape(p["name"][:80])}</span>', p["kind"],
             f'{_ms(p["start_ns"]):.3f}', f'{_ms(p["dur_ns"]):.3f}'] for p in costly]
    listed = (f"the {len(costly)} costliest of its nodes" if len(path) > PATH_ROWS else "its nodes, costliest first")
    return (f'<div class="col"><h3>{escape(src["times"])}: {len(path)} nodes covering {_ms(busy):.4g} ms of the '
            f'{_ms(src["makespan_ns"]):.4g} ms makespan</h3>'
            f'<div data-chart="critical-path" data-length="{len(path)}">{svg.gantt(segs)}</div>'
            f'<p class="sub">{listed}</p>'
            f'{html_table(["rank", "node", "name", "kind", "start ms", "dur ms"], rows, "critical-path-nodes")}</div>')


MAX_SEGMENTS = 1500


def _coalesce(segs: list[tuple]) -> list[tuple]:
    """Keep a long path's drawing small: beyond MAX_SEGMENTS, merge neighbours on one lane and
    of one kind into a single box (the table still lists the nodes)."""
    if len(segs) <= MAX_SEGMENTS:
        return segs
    out: list[tuple] = []
    for lane, s, e, color, tip in segs:
        if out and out[-1][0] == lane and out[-1][3] == color:
            out[-1] = (lane, out[-1][1], e, color, "several nodes")
        else:
            out.append((lane, s, e, color, tip))
    return out[:MAX_SEGMENTS]


def _comparison_section(rows: list[dict], head: dict | None) -> str:
    """The headline error first, as `trace-replay` printed it; then each rank's finish."""
    line = f'<p data-headline="error"><b>{escape(headline_line(head))}</b></p>' if head else ""
    if not rows:
        return f'<h2 id="comparison">Measured against simulated</h2>{line}' if line else ""
    table = html_table(["rank", "measured finish ms", "simulated finish ms", "error"],
                   [[str(c["rank"]), "" if c["measured_ns"] is None else f'{_ms(c["measured_ns"]):.3f}',
                     "" if c["simulated_ns"] is None else f'{_ms(c["simulated_ns"]):.3f}', _pct(c["error"])]
                    for c in rows])
    return (f'<h2 id="comparison">Measured against simulated</h2>{line}'
            '<p class="sub">each rank\'s finish, from the start of everything either source holds (the '
            'headline, where given, is the replay\'s own comparison with the measured steps)</p>'
            f'<div data-chart="comparison">{table}</div>')


def _cards(sources: list[dict], head: dict | None = None) -> str:
    cards = []
    if head is not None:  # the figure the replay is judged by leads, as trace-replay printed it first
        cards.append(f'<div class="card" data-headline="error">error against the measured steps'
                     f'<b>{100 * head["error"]:+.1f}%</b>measured {_ms(head["measured_ns"]):.3f} ms, predicted '
                     f'{_ms(head["predicted_ns"]):.3f} ms</div>')
    for s in sources:
        cards.append(f'<div class="card">{escape(s["times"])}<b>{_ms(s["makespan_ns"]):.4g} ms</b>'
                     f'{len(s["ranks"])} ranks, {s["events"]} events</div>')
    return '<div class="cards">' + "".join(cards) + "</div>"


def render_html(sets: list[EventSet], *, title: str = "Chakra trace report", whatif: dict | None = None) -> str:

    data = report_data(sets, whatif)
    sources = data["sources"]
    notes = "".join(f'<p class="note">{escape(n)}</p>' for s in sources for n in s["notes"][:5])
    scale = max((_ms(b.get("start_ns", 0) + b["compute_ns"] + b["exposed_comm_ns"] + b["idle_ns"])
                 for s in sources for b in s["breakdown"].values()), default=0)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cards = _cards(sources, data.get("headline"))
    sections = [  # a prediction first: it is what the report was asked for
        whatif_html(whatif) if whatif is not None else "",
        '<h2 id="breakdown">Per-rank breakdown</h2>' + svg.legend(PARTS)
        + '<div class="cols">' + "".join(_breakdown_section(s, scale) for s in sources) + "</div>",
        _comparison_section(data.get("comparison", []), data.get("headline")),
        '<h2 id="top-operators">Top operators by time</h2><p class="sub">self time: an op\'s duration less that of the ops nested in it</p><div class="cols">'
        + "".join(_top_section(s) for s in sources) + "</div>",
        '<h2 id="comm-volume">Communication volume by kind and group</h2><div class="cols">'
        + "".join(_comm_section(s) for s in sources) + "</div>",
        links_html(sources),
        '<h2 id="critical-path">Critical path</h2><div class="cols">'
        + "".join(_path_section(s) for s in sources) + "</div>",
    ]
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{escape(title)}</h1>"
            f'<p class="sub">{escape(", ".join(s["source"] for s in sources))} — generated {when} — '
            f'<span id="ranks-drawn" data-count="0">rendering…</span></p>'
            f'{headline_html(whatif) if whatif is not None else ""}{cards}{notes}'
            + "".join(sections) + f"<script>{JS}</script></body></html>\n")


def write_report(sets: list[EventSet], path: str | Path, *, title: str = "Chakra trace report",
                 whatif: dict | None = None) -> Path:
    with atomic_output(path, "w") as f:
        f.write(render_html(sets, title=title, whatif=whatif))
    return Path(path)
