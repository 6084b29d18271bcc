"""Inline SVG charts for the plan page: memory per GPU (a bar per pipeline rank) vs the cap."""

from __future__ import annotations

from xml.sax.saxutils import escape

from planner.plan import Prediction

GIB = 1024**3
PARTS: tuple[tuple[str, str, str], ...] = (
    ("params_bytes", "parameters", "#4c78a8"),
    ("grads_bytes", "gradients", "#72b7b2"),
    ("optimizer_bytes", "optimizer state", "#f58518"),
    ("activations_bytes", "activations", "#e45756"),
    ("buffers_bytes", "buffers", "#b279a2"),
    ("reserve_bytes", "reserve", "#bab0ac"),
)


def memory_chart_svg(prediction: Prediction) -> str:
    """Stacked bars of each rank's memory breakdown (GiB) with a dashed line at the cap."""
    ranks = sorted(prediction.ranks, key=lambda r: r.rank)
    cap = prediction.memory_cap_bytes
    top = max([cap, *(r.total_bytes for r in ranks)]) * 1.08 or 1.0
    bar_w, gap, left, plot_h, top_px = 38, 18, 64, 220, 20
    width = left + len(ranks) * (bar_w + gap) + 170
    height = top_px + plot_h + 50

    def y(v: float) -> float:
        return top_px + plot_h * (1 - v / top)

    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"role='img' aria-label='memory per GPU' class='memory-chart' "
        f"font-family='Helvetica, Arial, sans-serif' font-size='11'>"
    ]
    for k in range(5):  # axis ticks in GiB
        v = top * k / 4
        out.append(
            f"<line x1='{left - 4}' x2='{width - 170}' y1='{y(v):.1f}' y2='{y(v):.1f}' "
            "stroke='#eee'/>"
        )
        out.append(
            f"<text x='{left - 8}' y='{y(v) + 4:.1f}' text-anchor='end'>{v / GIB:.0f}</text>"
        )
    out.append(
        f"<text x='12' y='{top_px + plot_h / 2}' transform='rotate(-90 12 "
        f"{top_px + plot_h / 2})' text-anchor='middle'>GiB</text>"
    )
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
        out.append(
            f"<text x='{x + bar_w / 2:.1f}' y='{y(r.total_bytes) - 4:.1f}' "
            f"text-anchor='middle'>{r.total_bytes / GIB:.1f}</text>"
        )
    out.append(
        f"<line x1='{left}' x2='{width - 170}' y1='{y(cap):.1f}' y2='{y(cap):.1f}' "
        "stroke='#d62728' stroke-dasharray='6 4' stroke-width='2'/>"
    )
    out.append(
        f"<text x='{width - 166}' y='{y(cap) + 4:.1f}' fill='#d62728'>"
        f"cap {cap / GIB:.1f} GiB</text>"
    )
    for j, (_attr, label, colour) in enumerate(PARTS):
        ly = top_px + 40 + j * 16
        out.append(f"<rect x='{width - 166}' y='{ly}' width='10' height='10' fill='{colour}'/>")
        out.append(f"<text x='{width - 150}' y='{ly + 9}'>{escape(label)}</text>")
    out.append("</svg>")
    return "".join(out)
