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


#: the heat scale of `heat`: pale yellow (idle; still seen on white) through orange to dark brown
#: (always busy)
HEAT = ("#fee391", "#fec44f", "#fe9929", "#ec7014", "#cc4c02", "#8c2d04", "#4a1a02")
DEVICE_FILL = {"npu": "#3182bd", "switch": "#636363"}
DOT_R = 7
ARC_MAX = 90  # px: how far a link between two devices of one row bends up, at most


def heat(share: float) -> str:
    """The colour of a share in [0, 1] (clamped) on the HEAT scale, interpolated.

    >>> heat(0.0), heat(1.0), heat(7.0)
    ('#fee391', '#4a1a02', '#4a1a02')
    """
    x = min(max(share, 0.0), 1.0) * (len(HEAT) - 1)
    i = min(int(x), len(HEAT) - 2)
    a, b = (tuple(int(c[k:k + 2], 16) for k in (1, 3, 5)) for c in HEAT[i:i + 2])
    return "#" + "".join(f"{round(p + (q - p) * (x - i)):02x}" for p, q in zip(a, b))


def heat_legend(title: str, *, width: int = 360, steps: int = 10) -> str:
    """The HEAT scale as a bar from 0% to 100%, under `title`."""
    bar_w = (width - 40) / steps
    body = [f'<text x="20" y="12">{escape(title)}</text>']
    for k in range(steps):
        body.append(f'<rect x="{20 + k * bar_w:.1f}" y="18" width="{bar_w + 0.5:.1f}" height="10" '
                    f'fill="{heat((k + 0.5) / steps)}"/>')
    for frac, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
        body.append(f'<text x="{20 + frac * (width - 40):.1f}" y="40" text-anchor="{anchor}">{100 * frac:.0f}%</text>')
    return _svg(width, 46, body, "heat-legend")


def network(devices: Sequence[tuple[str, float, float, str, str]],
            links: Sequence[tuple[str, str, str, float, str, dict]], *, width: int, height: int,
            slant: bool = False, cls: str = "network") -> str:
    """Devices and the links between them. A device: (name, x, y, kind, label side "above" or
    "below"), drawn as a dot (an "npu" round, anything else square, coloured by DEVICE_FILL). A
    link: (from, to, colour, stroke width, tooltip, data attributes), one direction of a link,
    drawn to the right of its direction of travel so that a pair linked both ways shows both;
    between two devices of one row, an arc bending up (at most ARC_MAX).
    `slant`: labels at an angle, for rows too tight for them level."""
    at = {d[0]: (d[1], d[2]) for d in devices}
    body = [_link_line(at[a], at[b], color, w, tip, data) for a, b, color, w, tip, data in links]
    body += [_device(*d, slant=slant) for d in devices]
    return _svg(width, height, body, cls)


def _link_line(a: tuple[float, float], b: tuple[float, float], color: str, w: float, tip: str,
               data: dict) -> str:
    dx, dy = b[0] - a[0], b[1] - a[1]
    norm = (dx * dx + dy * dy) ** 0.5 or 1.0
    off = w / 2 + 0.75  # right of travel, by half a line and a gap
    ox, oy = -dy / norm * off, dx / norm * off
    attrs = " ".join(f'data-{k}="{escape(str(v))}"' for k, v in data.items())
    (x1, y1), (x2, y2) = (a[0] + ox, a[1] + oy), (b[0] + ox, b[1] + oy)
    bend = f" Q {(x1 + x2) / 2:.1f} {y1 - min(ARC_MAX, 0.3 * abs(dx)):.1f}" if abs(dy) < 1 else ""  # one row: an arc up
    return (f'<path class="link" {attrs} d="M {x1:.1f} {y1:.1f}{bend} {x2:.1f} {y2:.1f}" fill="none" '
            f'stroke="{color}" stroke-width="{w:.2f}" stroke-linecap="round"><title>{escape(tip)}</title></path>')


def _device(name: str, x: float, y: float, kind: str, side: str, *, slant: bool) -> str:
    fill = DEVICE_FILL.get(kind, DEVICE_FILL["switch"])
    dot = (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{DOT_R}" fill="{fill}"/>' if kind == "npu" else
           f'<rect x="{x - DOT_R:.1f}" y="{y - DOT_R:.1f}" width="{2 * DOT_R}" height="{2 * DOT_R}" rx="2" fill="{fill}"/>')
    ty = y + DOT_R + 12 if side == "below" else y - DOT_R - 5
    if slant:  # below: ending at the dot, down to the left; above: from the dot, up to the right
        anchor = "end" if side == "below" else "start"
        label = (f'<text x="{x:.1f}" y="{ty:.1f}" text-anchor="{anchor}" '
                 f'transform="rotate(-35 {x:.1f} {ty:.1f})">{escape(name)}</text>')
    else:
        label = f'<text x="{x:.1f}" y="{ty:.1f}" text-anchor="middle">{escape(name)}</text>'
    return f'<g class="device" data-name="{escape(name)}" data-kind="{kind}">{dot}{label}<title>{escape(name)}</title></g>'
