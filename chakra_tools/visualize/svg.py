"""Tiny inline-SVG charts for the HTML report: no plotting library, no network, no JavaScript.

Each function returns an `<svg>` string; every bar carries a `<title>` (the browser's tooltip)
and `data-*` attributes, so a test (or a person with dev tools) can read the numbers back from
the rendered page.

>>> "<rect" in hbars([("gemm", 3.0, "#3182bd", "3 ms")], unit="ms")
True
"""

from __future__ import annotations

from html import escape
from typing import Callable, Sequence

COLORS = {"not_started": "none", "compute": "#3182bd", "overlap": "#9e9ac8", "exposed_comm": "#e6550d", "idle": "#d9d9d9",
          "comm": "#e6550d", "host": "#74c476"}
ROW_H = 18
LABEL_W = 220
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _svg(width: int, height: int, body: list[str], cls: str) -> str:
    return (f'<svg class="{cls}" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            'style="max-width:100%;height:auto" '
            f'viewBox="0 0 {width} {height}" {FONT}>' + "".join(body) + "</svg>")


def _label(y: float, text: str) -> str:
    short = text if len(text) <= 30 else text[:29] + "…"
    return f'<text x="{LABEL_W - 6}" y="{y + ROW_H * 0.7:.1f}" text-anchor="end">{escape(short)}</text>'


def stacked_bars(rows: Sequence[tuple[str, dict, Sequence[tuple[str, float]]]], *, width: int = 640,
                 unit: str = "ms", cls: str = "breakdown", scale: float | None = None) -> str:
    """One horizontal stacked bar per row: (label, data attributes, [(part, value), ...]); parts
    are coloured by name (COLORS). The scale is shared so rows compare by length; pass `scale`
    to share it across charts too (measured beside simulated)."""
    scale_max = scale or max((sum(v for _, v in parts) for _, _, parts in rows), default=0) or 1
    plot_w = width - LABEL_W - 70
    body = []
    for i, (label, data, parts) in enumerate(rows):
        y = 4 + i * (ROW_H + 4)
        attrs = " ".join(f'data-{k}="{escape(str(v))}"' for k, v in data.items())
        body.append(f'<g class="bar-row" {attrs}>{_label(y, label)}')
        x = float(LABEL_W)
        for part, v in parts:
            w = plot_w * v / scale_max
            body.append(f'<rect class="seg seg-{part}" x="{x:.2f}" y="{y}" width="{w:.2f}" height="{ROW_H}" '
                        f'fill="{COLORS.get(part, "#999")}"><title>{escape(label)}: {part.replace("_", " ")} '
                        f'{_fmt(v)} {unit}</title></rect>')
            x += w
        total = sum(v for _, v in parts)
        body.append(f'<text x="{x + 4:.1f}" y="{y + ROW_H * 0.7:.1f}">{_fmt(total)} {unit}</text></g>')
    return _svg(width, 8 + len(rows) * (ROW_H + 4), body, cls)


def hbars(rows: Sequence[tuple[str, float, str, str]], *, width: int = 640, unit: str = "ms",
          cls: str = "hbars", fmt: Callable[[float], str] | None = None) -> str:
    """Simple horizontal bars: (label, value, colour, tooltip); `fmt` writes the value label."""
    fmt = fmt or (lambda v: f"{_fmt(v)} {unit}")
    vmax = max((v for _, v, _, _ in rows), default=0) or 1
    plot_w = width - LABEL_W - 70
    body = []
    for i, (label, v, color, tip) in enumerate(rows):
        y = 4 + i * (ROW_H + 4)
        w = plot_w * v / vmax
        body.append(f'<g class="bar" data-value="{v}">{_label(y, label)}'
                    f'<rect x="{LABEL_W}" y="{y}" width="{w:.2f}" height="{ROW_H}" fill="{color}">'
                    f'<title>{escape(tip)}</title></rect>'
                    f'<text x="{LABEL_W + w + 4:.1f}" y="{y + ROW_H * 0.7:.1f}">{escape(fmt(v))}</text></g>')
    return _svg(width, 8 + len(rows) * (ROW_H + 4), body, cls)


def gantt(rows: Sequence[tuple[str, float, float, str, str]], *, width: int = 640, unit: str = "ms",
          cls: str = "gantt") -> str:
    """Segments on a shared time axis, one row per lane: (lane, start, end, colour, tooltip)."""
    lanes = list(dict.fromkeys(r[0] for r in rows))
    t0 = min((r[1] for r in rows), default=0)
    t1 = max((r[2] for r in rows), default=1)
    span = (t1 - t0) or 1
    plot_w = width - LABEL_W - 20
    body = [_label(4 + i * (ROW_H + 4), lane) for i, lane in enumerate(lanes)]
    for lane, s, e, color, tip in rows:
        y = 4 + lanes.index(lane) * (ROW_H + 4)
        x = LABEL_W + plot_w * (s - t0) / span
        w = max(1.0, plot_w * (e - s) / span)
        body.append(f'<rect class="path-seg" x="{x:.2f}" y="{y}" width="{w:.2f}" height="{ROW_H}" '
                    f'fill="{color}" stroke="#fff" stroke-width="0.5"><title>{escape(tip)}</title></rect>')
    h = 8 + len(lanes) * (ROW_H + 4)
    body.append(f'<text x="{LABEL_W}" y="{h + 10}">{_fmt(t0)} {unit}</text>'
                f'<text x="{width - 20}" y="{h + 10}" text-anchor="end">{_fmt(t1)} {unit}</text>')
    return _svg(width, h + 16, body, cls)


def legend(parts: Sequence[str]) -> str:
    items = "".join(f'<span class="key"><i style="background:{COLORS.get(p, "#999")}"></i>'
                    f'{escape(p.replace("_", " "))}</span>' for p in parts)
    return f'<div class="legend">{items}</div>'
