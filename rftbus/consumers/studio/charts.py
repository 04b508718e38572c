"""Small server-rendered SVG charts: no JavaScript library, no build chain, readable without a script."""

from __future__ import annotations

import math
from html import escape

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf"]
W, H = 460, 230
L, R, T, B = 48, 12, 12, 34  # margins: room for the y ticks on the left, the x label below

Series = dict[str, list[tuple[float, float]]]


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _fmt(v: float) -> str:
    if v == int(v) and abs(v) < 1e6:
        return str(int(v))
    return f"{v:.3g}"


def _frame(xlo: float, xhi: float, ylo: float, yhi: float, xlabel: str, ylabel: str,
           xticks: list[float] | None = None):
    xs = (W - L - R) / ((xhi - xlo) or 1.0)
    ys = (H - T - B) / ((yhi - ylo) or 1.0)

    def px(x: float) -> float:
        return L + (x - xlo) * xs

    def py(y: float) -> float:
        return H - B - (y - ylo) * ys
    parts = [f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" class="plot"/>']
    for t in _ticks(ylo, yhi):
        parts.append(f'<line x1="{L}" x2="{W - R}" y1="{py(t):.1f}" y2="{py(t):.1f}" class="grid"/>'
                     f'<text x="{L - 4}" y="{py(t) + 3:.1f}" text-anchor="end">{_fmt(t)}</text>')
    for t in xticks if xticks is not None else _ticks(xlo, xhi, 6):
        parts.append(f'<text x="{px(t):.1f}" y="{H - B + 13}" text-anchor="middle">{_fmt(t)}</text>')
    parts.append(f'<text x="{(L + W - R) / 2}" y="{H - 4}" text-anchor="middle" class="label">{escape(xlabel)}</text>')
    parts.append(f'<text transform="translate(11,{(T + H - B) / 2}) rotate(-90)" text-anchor="middle" '
                 f'class="label">{escape(ylabel)}</text>')
    return px, py, parts


def _svg(parts: list[str], legend: list[str], title: str) -> str:
    leg = "".join(f'<span class="key"><i style="background:{COLORS[i % len(COLORS)]}"></i>{escape(n)}</span>'
                  for i, n in enumerate(legend)) if len(legend) > 1 else ""
    return (f'<svg viewBox="0 0 {W} {H}" role="img" aria-label="{escape(title)}" class="chart">'
            + "".join(parts) + f"</svg><div class=\"legend\">{leg}</div>")


def line_chart(series: Series, title: str, xlabel: str, ylabel: str, y_range: tuple[float, float] | None = None,
               markers: bool = True) -> str:
    pts = [p for s in series.values() for p in s]
    if not pts:
        return f'<p class="empty">{escape(title)}: no data yet</p>'
    xlo, xhi = min(p[0] for p in pts), max(p[0] for p in pts)
    ylo, yhi = y_range or (min(0.0, min(p[1] for p in pts)), max(p[1] for p in pts) or 1.0)
    if xhi == xlo:
        xlo, xhi = xlo - 1, xhi + 1
    px, py, parts = _frame(xlo, xhi, ylo, yhi, xlabel, ylabel)
    for i, (name, s) in enumerate(series.items()):
        c = COLORS[i % len(COLORS)]
        if len(s) > 1:
            d = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s)
            parts.append(f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="1.6"/>')
        if markers or len(s) == 1:
            parts += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.4" fill="{c}"><title>{escape(name)}: '
                      f'{_fmt(x)}, {y:.3g}</title></circle>' for x, y in s[-200:]]
    return _svg(parts, list(series), title)


def bar_chart(bars: list[tuple[float, float]], title: str, xlabel: str, ylabel: str) -> str:
    """One bar per x value, side by side in order (a category axis: 0, 1 and a rare 715 stay readable)."""
    if not bars:
        return f'<p class="empty">{escape(title)}: no data yet</p>'
    bars = sorted(bars)
    yhi = max(b[1] for b in bars) or 1.0
    px, py, parts = _frame(-0.5, len(bars) - 0.5, 0.0, yhi, xlabel, ylabel, xticks=[])
    w = max(2.0, (px(1) - px(0)) * 0.7)
    step = max(1, len(bars) // 12)
    for i, (x, y) in enumerate(bars):
        parts.append(f'<rect x="{px(i) - w / 2:.1f}" y="{py(y):.1f}" width="{w:.1f}" height="{py(0) - py(y):.1f}" '
                     f'fill="{COLORS[0]}"><title>{_fmt(x)}: {_fmt(y)}</title></rect>')
        if i % step == 0:
            parts.append(f'<text x="{px(i):.1f}" y="{H - B + 13}" text-anchor="middle">{_fmt(x)}</text>')
    return _svg(parts, [], title)
