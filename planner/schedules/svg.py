"""Timeline picture of a simulated schedule, as a standalone SVG document (a string; no I/O).

One row per pipeline rank, time to scale left to right with an axis in ms or s. Boxes are
coloured by kind (forward, full backward, input-grad, weight-grad), later model chunks of the
same rank drawn lighter (never lighter than `_MIN_OPACITY`, so a late chunk cannot pass for
idle), and carry the micro-batch number; idle time is drawn as hatched boxes of its own. Each
box has a `<title>` tooltip (`2F0 1.20-3.40 ms`). A long timeline is drawn aggregated
(`planner.schedules.svg_layout`): its first and last actions in full and the steady state
between as columns whose bar height is the rank's busy share, idle share hatched above it.

The step the picture spans is the pipeline's: forward, backward and p2p. The predicted step
time adds what follows the pipeline (the data-parallel gradient sync that is not overlapped
and the optimizer step); pass `predicted_step_s` to have both labelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from xml.sax.saxutils import escape

from planner.schedules.ir import ActionKind, Schedule
from planner.schedules.sim_types import SimResult, TimedAction
from planner.schedules.svg_layout import (
    AggregateBox,
    IdleBox,
    Layout,
    TimelineStyle,
    layout_timeline,
)

__all__ = ["KIND_COLOURS", "TimelineStyle", "render_timeline_svg"]

KIND_COLOURS: dict[ActionKind, tuple[str, str]] = {
    ActionKind.F: ("#4c78a8", "forward (F)"),
    ActionKind.B: ("#e45756", "backward (B)"),
    ActionKind.I: ("#f58518", "input grad (I)"),
    ActionKind.W: ("#54a24b", "weight grad (W)"),
}

_LEFT_PX = 72
_RIGHT_PX = 24
_TOP_PX = 44
_PANEL_HEAD_PX = 20
_AXIS_PX = 40
_ROW_PX = 26
_ROW_GAP_PX = 6
_PLOT_PX = 1100
_MIN_OPACITY = 0.45
_IDLE_FILL = "url(#idle)"
_AGGREGATE_FILL = "#5b5f97"
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


def _opacity(schedule: Schedule, stage: int) -> float:
    chunks = 2 if schedule.name == "zbv" else schedule.vpp
    if chunks <= 1:
        return 1.0
    return 1.0 - (1.0 - _MIN_OPACITY) * _chunk(schedule, stage) / (chunks - 1)


def render_timeline_svg(
    schedule: Schedule,
    sim: SimResult,
    *,
    title: str = "",
    predicted_step_s: float | None = None,
    style: TimelineStyle = TimelineStyle(plot_px=_PLOT_PX),
) -> str:
    """Draw `sim` (from `simulate(schedule, ...)` with its timeline) as an SVG document."""
    step_s = sim.step_time_s if sim.step_time_s > 0 else 1.0
    unit, scale = ("ms", 1e3) if step_s < 1.0 else ("s", 1.0)
    layout = layout_timeline(sim, style)
    ranks = len(sim.timeline)
    panels: list[tuple[str, float, float]] = []
    if layout.is_aggregated:
        panels.append(("overview", 0.0, step_s))
    panels += [(w.name, w.start_s, w.end_s) for w in layout.windows]
    panel_px = _PANEL_HEAD_PX + ranks * (_ROW_PX + _ROW_GAP_PX) + _AXIS_PX
    height = _TOP_PX + len(panels) * panel_px + 30
    width = _LEFT_PX + _PLOT_PX + _RIGHT_PX
    out: list[str] = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' {_FONT} font-size='11'>",
        "<defs><pattern id='idle' width='6' height='6' patternUnits='userSpaceOnUse' "
        "patternTransform='rotate(45)'><rect width='6' height='6' fill='#fdecec'/>"
        "<line x1='0' y1='0' x2='0' y2='6' stroke='#e3a0a0' stroke-width='2'/></pattern></defs>",
        f"<rect x='0' y='0' width='{width}' height='{height}' fill='white'/>",
    ]
    heading = title or (
        f"{schedule.name}  pp={schedule.pp} vpp={schedule.vpp} m={schedule.num_microbatches}"
    )
    out.append(
        f"<text x='{_LEFT_PX}' y='18' font-size='14' font-weight='bold'>{escape(heading)}</text>"
    )
    subtitle = _subtitle(sim, step_s, scale, unit, predicted_step_s, layout)
    out.append(f"<text x='{_LEFT_PX}' y='34' fill='#444'>{escape(subtitle)}</text>")
    y0 = _TOP_PX
    for name, lo, hi in panels:
        frame = _Frame(y0, lo, max(hi - lo, 1e-12), scale, unit)
        out.append(f"<g class='panel' data-panel='{name}'>")
        out += _panel_head(name, frame, ranks)
        if name == "overview":
            out += [_idle_box(frame, box) for box in layout.overview_idle]
            out += [_aggregate_box(frame, box) for box in layout.overview]
        else:
            window = next(w for w in layout.windows if w.name == name)
            out += [_idle_box(frame, box) for box in window.idle]
            for rank, row in enumerate(window.actions):
                for timed in row:
                    out += _action_box(schedule, frame, rank, timed)
        out += _axis(frame, ranks)
        out.append("</g>")
        y0 += panel_px
    out += _legend(schedule, layout, y0 + 4)
    out.append("</svg>")
    return "\n".join(out)


@dataclass(frozen=True)
class _Frame:
    """One panel: its top, the time it starts at and spans, and the axis unit."""

    top: float
    start_s: float
    span_s: float
    scale: float
    unit: str

    def x(self, t: float) -> float:
        return _LEFT_PX + (t - self.start_s) * _PLOT_PX / self.span_s

    def w(self, a: float, b: float) -> float:
        return max((b - a) * _PLOT_PX / self.span_s, 0.0)

    def row_y(self, rank: int) -> float:
        return self.top + _PANEL_HEAD_PX + rank * (_ROW_PX + _ROW_GAP_PX)


_PANEL_TITLES = {
    "overview": "the whole step (each column: the share of it a rank was busy)",
    "warm-up": "warm-up, in full: until the first rank starts its first backward",
    "cool-down": "cool-down, in full: from the first rank's last forward",
    "step": "",
}


def _panel_head(name: str, frame: _Frame, ranks: int) -> list[str]:
    out = []
    if _PANEL_TITLES[name]:
        out.append(
            f"<text x='{_LEFT_PX}' y='{frame.top + 14:.0f}' font-weight='bold' fill='#333'>"
            f"{escape(_PANEL_TITLES[name])}</text>"
        )
    for rank in range(ranks):
        y = frame.row_y(rank)
        out.append(
            f"<text x='{_LEFT_PX - 8}' y='{y + _ROW_PX / 2 + 4:.1f}' text-anchor='end'>"
            f"rank {rank}</text>"
        )
        out.append(
            f"<rect class='lane' x='{_LEFT_PX}' y='{y:.0f}' width='{_PLOT_PX}' "
            f"height='{_ROW_PX}' fill='white' stroke='#d0d0d0' stroke-width='0.5'/>"
        )
    return out


def _subtitle(
    sim: SimResult,
    step_s: float,
    scale: float,
    unit: str,
    predicted_step_s: float | None,
    layout: Layout,
) -> str:
    text = f"pipeline {step_s * scale:.4g} {unit} (forward, backward, p2p)"
    if predicted_step_s is not None:
        text += (
            f"; predicted step {predicted_step_s * scale:.4g} {unit} "
            "(adds DP gradient sync and the optimizer)"
        )
    text += f", bubble {sim.bubble_fraction:.1%}"
    if layout.is_aggregated:
        total = sum(len(r) for r in sim.timeline)
        text += f"; {total} actions: overview in columns, warm-up and cool-down in full"
    return text


def _action_box(schedule: Schedule, frame: _Frame, rank: int, timed: TimedAction) -> list[str]:
    a = timed.action
    x, w, y = frame.x(timed.start_s), frame.w(timed.start_s, timed.end_s), frame.row_y(rank)
    colour = KIND_COLOURS[a.kind][0]
    opacity = _opacity(schedule, a.stage)
    tip = f"{a} {timed.start_s * frame.scale:.4g}-{timed.end_s * frame.scale:.4g} {frame.unit}"
    out = [
        f"<g><title>{escape(tip)}</title>"
        f"<rect class='action' data-action='{a}' x='{x:.2f}' y='{y:.0f}' width='{w:.2f}' "
        f"height='{_ROW_PX}' fill='{colour}' fill-opacity='{opacity:.2f}' "
        "stroke='white' stroke-width='0.6'/>"
    ]
    label = str(a.microbatch)
    ink = "white" if opacity > 0.7 else "#1a1a1a"
    if w >= 6.5 * len(label) + 2:
        font = 11 if w >= 14 else 8
        out.append(
            f"<text x='{x + w / 2:.2f}' y='{y + _ROW_PX / 2 + 4:.1f}' "
            f"text-anchor='middle' fill='{ink}' font-size='{font}'>{label}</text>"
        )
    out.append("</g>")
    return out


def _idle_box(frame: _Frame, box: IdleBox) -> str:
    y = frame.row_y(box.rank)
    h = _ROW_PX * box.share
    tip = f"idle {box.start_s * frame.scale:.4g}-{box.end_s * frame.scale:.4g} {frame.unit}"
    if box.share < 1.0:
        tip += f" ({box.share:.0%} of it)"
    return (
        f"<rect class='idle' x='{frame.x(box.start_s):.2f}' y='{y:.0f}' "
        f"width='{frame.w(box.start_s, box.end_s):.2f}' height='{h:.2f}' "
        f"fill='{_IDLE_FILL}'><title>{escape(tip)}</title></rect>"
    )


def _aggregate_box(frame: _Frame, box: AggregateBox) -> str:
    y = frame.row_y(box.rank)
    h = _ROW_PX * box.share
    kinds = ", ".join(f"{n} {kind.name}" for kind, n in box.counts)
    tip = (
        f"{box.start_s * frame.scale:.4g}-{box.end_s * frame.scale:.4g} {frame.unit}: "
        f"busy {box.share:.0%}" + (f" ({kinds} start here)" if kinds else "")
    )
    return (
        f"<rect class='aggregate' x='{frame.x(box.start_s):.2f}' y='{y + _ROW_PX - h:.2f}' "
        f"width='{frame.w(box.start_s, box.end_s):.2f}' height='{h:.2f}' "
        f"fill='{_AGGREGATE_FILL}'><title>{escape(tip)}</title></rect>"
    )


def _axis(frame: _Frame, ranks: int) -> list[str]:
    bottom = frame.row_y(ranks) - _ROW_GAP_PX + 4
    lo, span = frame.start_s * frame.scale, frame.span_s * frame.scale
    tick = _nice_step(span)
    out = [
        f"<line x1='{_LEFT_PX}' y1='{bottom:.0f}' x2='{_LEFT_PX + _PLOT_PX}' "
        f"y2='{bottom:.0f}' stroke='#333'/>"
    ]
    k = math.ceil(lo / tick - 1e-9)
    while k * tick <= (lo + span) * (1 + 1e-9):
        value = k * tick
        x = frame.x(value / frame.scale)
        out.append(
            f"<line x1='{x:.2f}' y1='{bottom:.0f}' x2='{x:.2f}' y2='{bottom + 5:.0f}' "
            "stroke='#333'/>"
        )
        out.append(
            f"<text x='{x:.2f}' y='{bottom + 17:.0f}' text-anchor='middle'>{value:.4g}</text>"
        )
        k += 1
    out.append(
        f"<text x='{_LEFT_PX + _PLOT_PX}' y='{bottom + 31:.0f}' text-anchor='end' "
        f"fill='#444'>time ({frame.unit})</text>"
    )
    return out


def _legend(schedule: Schedule, layout: Layout, legend_y: float) -> list[str]:
    drawn = [t for w in layout.windows for row in w.actions for t in row]
    kinds = [k for k in KIND_COLOURS if any(t.action.kind is k for t in drawn)]
    entries = [(KIND_COLOURS[k][0], KIND_COLOURS[k][1]) for k in kinds]
    if layout.is_aggregated:
        entries.append((_AGGREGATE_FILL, "busy (aggregated; height = busy share)"))
    entries.append((_IDLE_FILL, "idle"))
    out = []
    x = float(_LEFT_PX)
    for colour, name in entries:
        out.append(
            f"<rect x='{x:.0f}' y='{legend_y}' width='14' height='14' fill='{colour}' "
            "stroke='#d0d0d0' stroke-width='0.5'/>"
            f"<text x='{x + 20:.0f}' y='{legend_y + 11}'>{escape(name)}</text>"
        )
        x += 130 if len(name) < 20 else 250
    if schedule.vpp > 1:
        out.append(
            f"<text x='{x:.0f}' y='{legend_y + 11}' fill='#444'>"
            "lighter = later model chunk on the same rank</text>"
        )
    return out
