"""Inline SVG charts for the plan page: memory per GPU (a bar per pipeline rank) against the
cap, and the trade-off between step time and peak memory over the configurations the search
settled (the chosen plan and its alternatives).

Axis ticks fall on round numbers: 1, 2 or 5 times a power of ten (Heckbert, "Nice numbers for
graph labels", Graphics Gems, 1990). Text is placed clear of the cap line."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from planner.plan import Prediction

GIB = 1024**3
PARTS: tuple[tuple[str, str, str], ...] = (
    ("params_bytes", "parameters", "#4c78a8"),
    ("grads_bytes", "gradients", "#72b7b2"),
    ("optimizer_bytes", "optimizer state", "#f58518"),
    ("activations_bytes", "activations", "#e45756"),
    ("transient_bytes", "temporaries", "#ff9da6"),
    ("fragmentation_bytes", "allocator reserve", "#9d755d"),
    ("buffers_bytes", "buffers", "#b279a2"),
    ("reserve_bytes", "reserve", "#bab0ac"),
)
CAP = "#d62728"
FONT_PX = 11  # the charts' font size; a label's box is [baseline - FONT_PX, baseline + 3]


def nice_step(span: float, count: int) -> float:
    """The round step (1, 2 or 5 x 10^k) that cuts `span` into about `count` intervals."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / max(1, count)
    power = 10.0 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * power >= raw * 0.999:
            return m * power
    return 10 * power


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (the first <= lo, the last >= hi)."""
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        hi = lo + 1.0
    step = nice_step(hi - lo, count)
    first = math.floor(lo / step + 1e-9) * step
    last = math.ceil(hi / step - 1e-9) * step
    n = round((last - first) / step)
    return [_clean(first + i * step, step) for i in range(n + 1)]


def _clean(value: float, step: float) -> float:
    digits = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return round(value, digits + 1)


def tick_label(value: float) -> str:
    return f"{value:g}"


def clear_of_line(baseline: float, line_y: float, above: float) -> float:
    """A label's baseline moved off a horizontal line it would cross: the label stays at
    `baseline` when its box [baseline - FONT_PX, baseline + 3] misses `line_y` by 1 px, else
    it sits 5 px above min(line_y, above) (`above`: the top of what it labels)."""
    if baseline - FONT_PX - 1 <= line_y <= baseline + 4:
        return min(line_y, above) - 5
    return baseline


def memory_chart_svg(prediction: Prediction) -> str:
    """Stacked bars of each rank's memory breakdown (GiB) with a dashed line at the cap."""
    ranks = sorted(prediction.ranks, key=lambda r: r.rank)
    cap = prediction.memory_cap_bytes
    ticks = nice_ticks(0.0, max([cap, *(r.total_bytes for r in ranks)]) / GIB * 1.05)
    top = ticks[-1] * GIB or 1.0
    bar_w, gap, left, plot_h, top_px = 38, 18, 64, 220, 24
    plot_r = left + len(ranks) * (bar_w + gap)
    width = plot_r + 170
    height = top_px + plot_h + 40

    def y(v: float) -> float:
        return top_px + plot_h * (1 - v / top)

    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"role='img' aria-label='memory per GPU' class='memory-chart' "
        f"font-family='Helvetica, Arial, sans-serif' font-size='{FONT_PX}'>"
    ]
    for t in ticks:
        out.append(
            f"<line x1='{left - 4}' x2='{plot_r}' y1='{y(t * GIB):.1f}' y2='{y(t * GIB):.1f}' "
            "stroke='#eee'/>"
        )
        out.append(
            f"<text x='{left - 8}' y='{y(t * GIB) + 4:.1f}' text-anchor='end' "
            f"class='tick'>{tick_label(t)}</text>"
        )
    out.append(
        f"<text x='12' y='{top_px + plot_h / 2}' transform='rotate(-90 12 "
        f"{top_px + plot_h / 2})' text-anchor='middle'>GiB per GPU</text>"
    )
    cap_y = y(cap)
    for i, r in enumerate(ranks):
        x = left + gap / 2 + i * (bar_w + gap)
        base = 0.0
        for attr, label, colour in PARTS:
            part = float(getattr(r.memory, attr))
            if part <= 0:
                continue
            out.append(
                f"<rect x='{x:.1f}' y='{y(base + part):.1f}' width='{bar_w}' "
                f"height='{max(0.5, y(base) - y(base + part)):.1f}' fill='{colour}'>"
                f"<title>rank {r.rank} {escape(label)}: {part / GIB:.2f} GiB</title></rect>"
            )
            base += part
        out.append(
            f"<text x='{x + bar_w / 2:.1f}' y='{top_px + plot_h + 16}' "
            f"text-anchor='middle'>rank {r.rank}</text>"
        )
        bar_top = y(r.total_bytes)
        out.append(
            f"<text x='{x + bar_w / 2:.1f}' y='{clear_of_line(bar_top - 4, cap_y, bar_top):.1f}' "
            f"text-anchor='middle' class='total'>{r.total_bytes / GIB:.1f}</text>"
        )
    out.append(
        f"<line x1='{left}' x2='{plot_r}' y1='{cap_y:.1f}' y2='{cap_y:.1f}' class='cap' "
        f"stroke='{CAP}' stroke-dasharray='6 4' stroke-width='2'/>"
    )
    # the cap's label right of the plot, at the line; the legend below it, or above it when
    # the cap sits low (an infeasible plan's bars overshoot it)
    out.append(
        f"<text x='{plot_r + 6}' y='{cap_y + 4:.1f}' fill='{CAP}' class='cap-label'>"
        f"cap {cap / GIB:.1f} GiB</text>"
    )
    legend_h = 16 * len(PARTS)
    below = cap_y + 14
    legend_top = below if below + legend_h <= height else cap_y - 12 - legend_h
    for j, (_attr, label, colour) in enumerate(PARTS):
        ly = legend_top + j * 16
        out.append(f"<rect x='{plot_r + 6}' y='{ly:.1f}' width='10' height='10' fill='{colour}'/>")
        out.append(f"<text x='{plot_r + 22}' y='{ly + 9:.1f}'>{escape(label)}</text>")
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True)
class Point:
    """One configuration on the trade-off chart."""

    label: str
    step_time_s: float
    peak_memory_bytes: float
    href: str | None
    chosen: bool = False
    measured: bool = False  # a measured run of the chosen plan (hollow), not a prediction
    tag: str = ""  # drawn beside the dot, e.g. '#2' for the alternatives table's row


def tradeoff_chart_svg(points: Sequence[Point], cap_bytes: float) -> str:
    """Step time (y) against peak memory per GPU (x) for `points`, the cap as a vertical
    dashed line, the chosen plan as a larger ringed dot, measured runs as hollow rings; each
    other dot links to its page."""
    width, height, left, right, top_px, bottom = 620, 320, 70, 20, 20, 44
    mems = [p.peak_memory_bytes / GIB for p in points]
    unit, scale = ("ms", 1e3) if max(p.step_time_s for p in points) < 1 else ("s", 1.0)
    times = [p.step_time_s * scale for p in points]
    xt = nice_ticks(min([*mems, cap_bytes / GIB]) * 0.9, max([*mems, cap_bytes / GIB]) * 1.02)
    yt = nice_ticks(min(times) * 0.95, max(times) * 1.05)
    pw, ph = width - left - right, height - top_px - bottom

    def sx(v: float) -> float:
        return left + pw * (v - xt[0]) / ((xt[-1] - xt[0]) or 1.0)

    def sy(v: float) -> float:
        return top_px + ph * (1 - (v - yt[0]) / ((yt[-1] - yt[0]) or 1.0))

    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        "role='img' aria-label='step time against peak memory' class='tradeoff-chart' "
        f"font-family='Helvetica, Arial, sans-serif' font-size='{FONT_PX}'>"
    ]
    for t in xt:
        out.append(
            f"<line x1='{sx(t):.1f}' x2='{sx(t):.1f}' y1='{top_px}' y2='{top_px + ph}' "
            "stroke='#eee'/>"
        )
        out.append(
            f"<text x='{sx(t):.1f}' y='{top_px + ph + 15}' text-anchor='middle' "
            f"class='xtick'>{tick_label(t)}</text>"
        )
    for t in yt:
        out.append(
            f"<line x1='{left}' x2='{left + pw}' y1='{sy(t):.1f}' y2='{sy(t):.1f}' stroke='#eee'/>"
        )
        out.append(
            f"<text x='{left - 6}' y='{sy(t) + 4:.1f}' text-anchor='end' "
            f"class='ytick'>{tick_label(t)}</text>"
        )
    out.append(
        f"<text x='{left + pw / 2}' y='{height - 8}' text-anchor='middle'>"
        "peak memory per GPU (GiB)</text>"
    )
    out.append(
        f"<text x='14' y='{top_px + ph / 2}' transform='rotate(-90 14 {top_px + ph / 2})' "
        f"text-anchor='middle'>step time ({unit})</text>"
    )
    cx = sx(cap_bytes / GIB)
    out.append(
        f"<line x1='{cx:.1f}' x2='{cx:.1f}' y1='{top_px}' y2='{top_px + ph}' class='cap' "
        f"stroke='{CAP}' stroke-dasharray='6 4' stroke-width='2'/>"
    )
    out.append(
        f"<text x='{cx - 4:.1f}' y='{top_px + 10}' text-anchor='end' fill='{CAP}' "
        f"class='cap-label'>cap {cap_bytes / GIB:.1f} GiB</text>"
    )
    for p in sorted(points, key=lambda q: q.chosen):  # the chosen one drawn last, on top
        px, py = sx(p.peak_memory_bytes / GIB), sy(p.step_time_s * scale)
        tip = f"{p.label}: {p.step_time_s:.4g} s, {p.peak_memory_bytes / GIB:.2f} GiB" + (
            " (chosen)" if p.chosen else ""
        )
        if p.chosen:
            dot = (
                f"<circle cx='{px:.1f}' cy='{py:.1f}' r='7' fill='#1e8449' stroke='#000' "
                f"stroke-width='2' class='chosen'><title>{escape(tip)}</title></circle>"
                f"<text x='{px + 10:.1f}' y='{py + 4:.1f}' class='chosen-label'>chosen</text>"
            )
        elif p.measured:
            dot = (
                f"<circle cx='{px:.1f}' cy='{py:.1f}' r='6' fill='none' stroke='#f58518' "
                f"stroke-width='2' class='measured'><title>{escape(tip)}</title></circle>"
            )
        else:
            dot = (
                f"<circle cx='{px:.1f}' cy='{py:.1f}' r='5' fill='#4c78a8' class='alt'>"
                f"<title>{escape(tip)}</title></circle>"
            )
            if p.tag:
                dot += (
                    f"<text x='{px + 7:.1f}' y='{py - 6:.1f}' font-size='10' fill='#4c78a8' "
                    f"class='alt-tag'>{escape(p.tag)}</text>"
                )
        if p.href and not p.chosen:
            dot = f"<a href={quoteattr(p.href)}>{dot}</a>"
        out.append(dot)
    out.append("</svg>")
    return "".join(out)
