"""Timeline picture of a simulated schedule, as a standalone SVG document (a string; no I/O).

One row per pipeline rank, time to scale left to right with an axis in ms or s. Boxes are
coloured by kind (forward, full backward, input-grad, weight-grad), later model chunks of the
same rank drawn lighter, and carry the micro-batch number; idle time is the empty row between
them. Each box has a `<title>` tooltip (`2F0 1.20-3.40 ms`).
"""

from __future__ import annotations

import math
from xml.sax.saxutils import escape

from planner.schedules.ir import ActionKind, Schedule
from planner.schedules.sim_types import SimResult

__all__ = ["KIND_COLOURS", "render_timeline_svg"]

KIND_COLOURS: dict[ActionKind, tuple[str, str]] = {
    ActionKind.F: ("#4c78a8", "forward (F)"),
    ActionKind.B: ("#e45756", "backward (B)"),
    ActionKind.I: ("#f58518", "input grad (I)"),
    ActionKind.W: ("#54a24b", "weight grad (W)"),
}

_LEFT_PX = 72
_RIGHT_PX = 24
_TOP_PX = 44
_ROW_PX = 26
_ROW_GAP_PX = 6
_PLOT_PX = 1100
_FONT = "font-family='Helvetica, Arial, sans-serif'"


def _nice_step(span: float, target_ticks: int = 8) -> float:
    """A 1/2/5 x 10^k tick spacing giving about `target_ticks` ticks over `span`."""
    raw = span / target_ticks
    power: float = 10.0 ** math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 5.0, 10.0):
        if raw <= factor * power:
            return factor * power
    return 10.0 * power


def _chunk(schedule: Schedule, stage: int) -> int:
    if schedule.name == "zbv":
        return 0 if stage < schedule.pp else 1
    return stage // schedule.pp


def render_timeline_svg(schedule: Schedule, sim: SimResult, *, title: str = "") -> str:
    """Draw `sim` (from `simulate(schedule, ...)` with its timeline) as an SVG document."""
    step_s = sim.step_time_s if sim.step_time_s > 0 else 1.0
    in_ms = step_s < 1.0
    unit, scale = ("ms", 1e3) if in_ms else ("s", 1.0)
    px_per_s = _PLOT_PX / step_s
    rows = len(sim.timeline)
    plot_bottom = _TOP_PX + rows * (_ROW_PX + _ROW_GAP_PX)
    kinds = [k for k in KIND_COLOURS if any(t.action.kind is k for r in sim.timeline for t in r)]
    height = plot_bottom + 78
    width = _LEFT_PX + _PLOT_PX + _RIGHT_PX
    out: list[str] = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' {_FONT} font-size='11'>",
        f"<rect x='0' y='0' width='{width}' height='{height}' fill='white'/>",
    ]
    heading = title or (
        f"{schedule.name}  pp={schedule.pp} vpp={schedule.vpp} m={schedule.num_microbatches}"
    )
    out.append(
        f"<text x='{_LEFT_PX}' y='18' font-size='14' font-weight='bold'>{escape(heading)}</text>"
    )
    out.append(
        f"<text x='{_LEFT_PX}' y='34' fill='#444'>step {step_s * scale:.4g} {unit}, "
        f"bubble {sim.bubble_fraction:.1%}, peak in-flight (stage 0) "
        f"{sim.peak_inflight[0] if sim.peak_inflight else 0}</text>"
    )
    for rank, row in enumerate(sim.timeline):
        y = _TOP_PX + rank * (_ROW_PX + _ROW_GAP_PX)
        out.append(
            f"<text x='{_LEFT_PX - 8}' y='{y + _ROW_PX / 2 + 4:.1f}' text-anchor='end'>"
            f"rank {rank}</text>"
        )
        out.append(
            f"<rect class='lane' x='{_LEFT_PX}' y='{y}' width='{_PLOT_PX}' height='{_ROW_PX}' "
            "fill='#fafafa' stroke='#d0d0d0' stroke-width='0.5'/>"
        )
        for timed in row:
            a = timed.action
            x = _LEFT_PX + timed.start_s * px_per_s
            w = max((timed.end_s - timed.start_s) * px_per_s, 0.0)
            colour = KIND_COLOURS[a.kind][0]
            opacity = 1.0 / (1 + 0.6 * _chunk(schedule, a.stage))
            tip = f"{a} {timed.start_s * scale:.4g}-{timed.end_s * scale:.4g} {unit}"
            out.append(
                f"<g><title>{escape(tip)}</title>"
                f"<rect class='action' data-action='{a}' x='{x:.2f}' y='{y}' width='{w:.2f}' "
                f"height='{_ROW_PX}' fill='{colour}' fill-opacity='{opacity:.2f}' "
                "stroke='white' stroke-width='0.6'/>"
            )
            label = str(a.microbatch)
            ink = "white" if opacity > 0.9 else "#1a1a1a"
            if w >= 6.5 * len(label) + 2:
                font = 11 if w >= 14 else 8
                out.append(
                    f"<text x='{x + w / 2:.2f}' y='{y + _ROW_PX / 2 + 4:.1f}' "
                    f"text-anchor='middle' fill='{ink}' font-size='{font}'>{label}</text>"
                )
            out.append("</g>")
    tick = _nice_step(step_s * scale)
    out.append(
        f"<line x1='{_LEFT_PX}' y1='{plot_bottom}' x2='{_LEFT_PX + _PLOT_PX}' "
        f"y2='{plot_bottom}' stroke='#333'/>"
    )
    value = 0.0
    while value <= step_s * scale * (1 + 1e-9):
        x = _LEFT_PX + value / scale * px_per_s
        out.append(
            f"<line x1='{x:.2f}' y1='{plot_bottom}' x2='{x:.2f}' y2='{plot_bottom + 5}' "
            "stroke='#333'/>"
        )
        out.append(
            f"<text x='{x:.2f}' y='{plot_bottom + 17}' text-anchor='middle'>{value:.4g}</text>"
        )
        value += tick
    out.append(
        f"<text x='{_LEFT_PX + _PLOT_PX}' y='{plot_bottom + 31}' text-anchor='end' "
        f"fill='#444'>time ({unit})</text>"
    )
    legend_y = plot_bottom + 50
    x = float(_LEFT_PX)
    for kind in kinds:
        colour, name = KIND_COLOURS[kind]
        out.append(
            f"<rect x='{x:.0f}' y='{legend_y}' width='14' height='14' fill='{colour}'/>"
            f"<text x='{x + 20:.0f}' y='{legend_y + 11}'>{name}</text>"
        )
        x += 130
    out.append(
        f"<rect x='{x:.0f}' y='{legend_y}' width='14' height='14' fill='#fafafa' "
        "stroke='#d0d0d0'/>"
        f"<text x='{x + 20:.0f}' y='{legend_y + 11}'>idle</text>"
    )
    if schedule.vpp > 1:
        out.append(
            f"<text x='{x + 70:.0f}' y='{legend_y + 11}' fill='#444'>"
            "lighter = later model chunk on the same rank</text>"
        )
    out.append("</svg>")
    return "\n".join(out)
