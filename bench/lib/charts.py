"""SVG charts, standard library only: line charts for bench/runners/scale.py and soak.py, and the
pieces of the TPS bar charts that render.py (run.py's) and bench/runners/sql_edition.py lay out.

    line_chart(title, series, xlabel, ylabel, xlog=False) -> str

series: a list of dicts {"name", "points": [(x, y), ...], "color"?, "dash"?, "marker"?}; points
are drawn in the order given, joined by a line; a y of None breaks the line.

    svg_open(width, height, title, title_y, title_size) -> list[str]   # the first lines
    bar_axis_top(raw) -> float          # the top of a value axis of 5 round steps, each >= raw
    bar(o, x, bw, base, height, top, v, lo, hi, color, tip, gap, label_dy, label_size)
"""

from __future__ import annotations

import math
from html import escape

COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2", "#72b7b2", "#9d755d", "#bab0ac"]


def nice_step(span: float, steps: int = 5) -> float:
    raw = max(span, 1e-12) / steps
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def fmt_tick(v: float) -> str:
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:g}G"
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e4:
        return f"{v / 1e3:g}k"
    if a >= 100 or v == int(v):
        return f"{v:,.0f}"
    return f"{v:g}"


def svg_open(width: float, height: float, title: str, title_y: float, title_size: int) -> list[str]:
    """The first lines of a chart: the svg element, a white background, the title (already escaped)."""
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'font-family="Helvetica,Arial,sans-serif" font-size="12">',
            f'<rect width="{width}" height="{height}" fill="white"/>',
            f'<text x="{width / 2}" y="{title_y}" text-anchor="middle" font-size="{title_size}" '
            f'font-weight="bold">{title}</text>']


def bar_axis_top(raw: float) -> float:
    """The top of a bar chart's value axis: 5 steps of 1, 2, 2.5, 5 or 10 times a power of ten,
    each step at least `raw`."""
    mag = 10 ** (len(str(int(max(raw, 1)))) - 1)
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return step * 5


def bar(o: list[str], x: float, bw: float, base: float, height: float, top: float, v: float, lo, hi,
        color: str, tip: str, gap: float, label_dy: float, label_size: int) -> None:
    """Appends to `o` a bar of value v in a slot [x, x + bw) (`gap` px free on each side), standing
    on the axis at y = base that is `height` px tall for `top`; a whisker from lo to hi unless
    either is None; v above the bar (or the whisker) by label_dy px. tip: the hover text."""
    h = height * v / top
    y = base - h
    o.append(f'<rect x="{x + gap:.1f}" y="{y:.1f}" width="{bw - 2 * gap:.1f}" height="{h:.1f}" '
             f'fill="{color}"><title>{tip}</title></rect>')
    ytext = y
    if lo is not None and hi is not None:
        y1 = base - height * lo / top
        y2 = base - height * hi / top
        xm = x + bw / 2
        o.append(f'<line x1="{xm:.1f}" y1="{y1:.1f}" x2="{xm:.1f}" y2="{y2:.1f}" stroke="#333"/>')
        ytext = min(y, y2)
    o.append(f'<text x="{x + bw / 2:.1f}" y="{ytext - label_dy:.1f}" text-anchor="middle" '
             f'font-size="{label_size}">{v:,.0f}</text>')


def line_chart(title: str, series: list[dict], xlabel: str, ylabel: str, xlog: bool = False,
               width: int = 900, height: int = 460, ymin0: bool = True, note: str = "") -> str:
    pts = [(x, y) for s in series for x, y in s["points"] if x is not None and y is not None]
    W, H, L, R, T, B = width, height, 80, 20, 50, 95
    pw, ph = W - L - R, H - T - B
    if not pts:
        pts = [(0, 0), (1, 1)]
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    if xlog:
        xs = [max(x, 1.0) for x in xs]
        lx0 = math.floor(math.log10(min(xs)))
        lx1 = max(lx0 + 1, math.ceil(math.log10(max(xs))))
        fx = lambda x: L + pw * (math.log10(max(x, 10 ** lx0)) - lx0) / (lx1 - lx0)  # noqa: E731
        xticks = [10 ** e for e in range(lx0, lx1 + 1)]
    else:
        x0, x1 = min(xs), max(xs)
        if x1 == x0:
            x1 = x0 + 1
        st = nice_step(x1 - x0)
        x0 = math.floor(x0 / st) * st
        x1 = math.ceil(x1 / st) * st
        fx = lambda x: L + pw * (x - x0) / (x1 - x0)  # noqa: E731
        xticks = [x0 + i * st for i in range(int(round((x1 - x0) / st)) + 1)]
    y0 = 0.0 if ymin0 else min(ys)
    y1 = max(ys) * 1.08 if max(ys) > 0 else 1.0
    st = nice_step(y1 - y0)
    y0 = math.floor(y0 / st) * st
    y1 = math.ceil(y1 / st) * st
    fy = lambda y: T + ph - ph * (y - y0) / (y1 - y0)  # noqa: E731
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
         f'font-family="Helvetica,Arial,sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{escape(title)}</text>']
    yv = y0
    while yv <= y1 + st / 2:
        y = fy(yv)
        o.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#e3e3e3"/>')
        o.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt_tick(yv)}</text>')
        yv += st
    for xv in xticks:
        x = fx(xv)
        o.append(f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{T + ph}" stroke="#f0f0f0"/>')
        o.append(f'<text x="{x:.1f}" y="{T + ph + 16}" text-anchor="middle">{fmt_tick(xv)}</text>')
    o.append(f'<line x1="{L}" y1="{T + ph}" x2="{W - R}" y2="{T + ph}" stroke="#333"/>')
    o.append(f'<line x1="{L}" y1="{T}" x2="{L}" y2="{T + ph}" stroke="#333"/>')
    o.append(f'<text x="{L + pw / 2}" y="{T + ph + 36}" text-anchor="middle">{escape(xlabel)}</text>')
    o.append(f'<text x="18" y="{T + ph / 2}" transform="rotate(-90 18 {T + ph / 2})" '
             f'text-anchor="middle">{escape(ylabel)}</text>')
    for i, s in enumerate(series):
        col = s.get("color") or COLORS[i % len(COLORS)]
        dash = f' stroke-dasharray="{s["dash"]}"' if s.get("dash") else ""
        segs, cur = [], []
        for x, y in s["points"]:
            if x is None or y is None:
                if cur:
                    segs.append(cur)
                cur = []
                continue
            cur.append((fx(x), fy(y), x, y))
        if cur:
            segs.append(cur)
        for seg in segs:
            if len(seg) > 1:
                d = " ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in seg)
                o.append(f'<polyline points="{d}" fill="none" stroke="{col}" stroke-width="2"{dash}/>')
            if s.get("marker", True):
                for px, py, x, y in seg:
                    o.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{col}">'
                             f'<title>{escape(s["name"])}: {fmt_tick(x)} → {y:,.1f}</title></circle>')
    # legend, two columns under the axis label
    lx, ly = L, T + ph + 54
    colw = (W - L - R) / 2
    for i, s in enumerate(series):
        col = s.get("color") or COLORS[i % len(COLORS)]
        x = lx + (i % 2) * colw
        y = ly + (i // 2) * 16
        dash = f' stroke-dasharray="{s["dash"]}"' if s.get("dash") else ""
        o.append(f'<line x1="{x:.1f}" y1="{y - 4}" x2="{x + 24:.1f}" y2="{y - 4}" stroke="{col}" stroke-width="2"{dash}/>')
        o.append(f'<text x="{x + 30:.1f}" y="{y}">{escape(s["name"])}</text>')
    if note:
        o.append(f'<text x="{W - R}" y="{T - 8}" text-anchor="end" fill="#555" font-size="11">{escape(note)}</text>')
    o.append("</svg>")
    # the legend may need more rows than the bottom margin has
    rows = (len(series) + 1) // 2
    extra = max(0, ly + rows * 16 - H + 4)
    if extra:
        o[0] = o[0].replace(f'height="{H}" viewBox="0 0 {W} {H}"', f'height="{H + extra}" viewBox="0 0 {W} {H + extra}"')
        o[1] = f'<rect width="{W}" height="{H + extra}" fill="white"/>'
    return "\n".join(o) + "\n"
