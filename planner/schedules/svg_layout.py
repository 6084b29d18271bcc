"""Where the timeline picture puts its boxes.

A short timeline is drawn in full: one box per action, one hatched box per idle stretch. A
long one (more than `TimelineStyle.full_limit` actions) is drawn as an overview of the whole
step in columns (each column's bar height is the share of it the rank was busy, the rest is
idle) and, below it, its warm-up and cool-down in full on their own time axes — the periods
where the pipeline fills and drains and where its bubble lives.

The layout is geometry in seconds; `planner.schedules.svg` turns it into SVG. Idle time is laid
out as boxes of its own (never as the absence of boxes), and the overview's idle boxes add up
to the simulator's idle time exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from planner.schedules.ir import ActionKind
from planner.schedules.sim_types import SimResult, TimedAction

__all__ = ["AggregateBox", "IdleBox", "Layout", "TimelineStyle", "Window", "layout_timeline"]

_BACKWARD = (ActionKind.B, ActionKind.I)


@dataclass(frozen=True)
class TimelineStyle:
    """Knobs of the timeline picture.

    `full_limit`: a timeline of at most this many actions is drawn one box each; a longer one
    gets the overview plus its warm-up and cool-down, each holding at most `full_limit / 2`
    actions. `column_px`: the width of one overview column, so the overview holds at most
    `2 x ranks x plot_px / column_px` boxes (fewer: fully busy or fully idle neighbours merge).
    `plot_px`: the width of the time axis.
    """

    full_limit: int = 1200
    column_px: float = 6.0
    plot_px: float = 1100.0

    def __post_init__(self) -> None:
        if self.full_limit < 2:
            raise ValueError(f"full_limit={self.full_limit} must be at least 2")
        if not 0 < self.column_px <= self.plot_px:
            raise ValueError(f"column_px={self.column_px} must be in (0, plot_px={self.plot_px}]")


@dataclass(frozen=True)
class IdleBox:
    """Idle time on `rank` from `start_s` to `end_s`, over `share` of the row's height (1 in
    a full drawing; in an overview column, the column's idle fraction)."""

    rank: int
    start_s: float
    end_s: float
    share: float = 1.0


@dataclass(frozen=True)
class AggregateBox:
    """Busy time on `rank` in the overview column(s) [start_s, end_s): `share` of it busy (the
    bar's height); `counts`, the actions of each kind that start in it."""

    rank: int
    start_s: float
    end_s: float
    share: float
    counts: tuple[tuple[ActionKind, int], ...]


@dataclass(frozen=True)
class Window:
    """[start_s, end_s] of the step drawn in full: per rank the actions in it (clipped to it)
    and its idle stretches. `name`: "step" (the whole of a short timeline), "warm-up" or
    "cool-down"."""

    name: str
    start_s: float
    end_s: float
    actions: tuple[tuple[TimedAction, ...], ...]
    idle: tuple[IdleBox, ...]


@dataclass(frozen=True)
class Layout:
    overview: tuple[AggregateBox, ...]  # empty when the step is drawn in full
    overview_idle: tuple[IdleBox, ...]
    windows: tuple[Window, ...]

    @property
    def is_aggregated(self) -> bool:
        return bool(self.overview) or bool(self.overview_idle)


def layout_timeline(sim: SimResult, style: TimelineStyle = TimelineStyle()) -> Layout:
    """Lay out `sim`'s timeline: in full if it has at most `style.full_limit` actions."""
    step_s = sim.step_time_s
    total = sum(len(row) for row in sim.timeline)
    if total <= style.full_limit:
        return Layout((), (), (_window(sim, "step", 0.0, step_s),))
    head_s, tail_s = (
        _warm_up_end(sim, style.full_limit // 2),
        _cool_down_start(sim, style.full_limit // 2),
    )
    column_s = step_s * style.column_px / style.plot_px
    overview: list[AggregateBox] = []
    idle: list[IdleBox] = []
    for rank, row in enumerate(sim.timeline):
        boxes, holes = _columns(rank, row, 0.0, step_s, column_s)
        overview += boxes
        idle += holes
    windows = (_window(sim, "warm-up", 0.0, head_s), _window(sim, "cool-down", tail_s, step_s))
    return Layout(tuple(overview), tuple(idle), windows)


def _warm_up_end(sim: SimResult, most: int) -> float:
    """When the first rank starts its first backward (the pipeline is full), but no later than
    the start of the `most`-th action."""
    first = sim.timeline[0]
    filled = next((t.start_s for t in first if t.action.kind in _BACKWARD), sim.step_time_s)
    starts = sorted(t.start_s for row in sim.timeline for t in row)
    return min(filled, starts[min(most, len(starts) - 1)]) or starts[min(most, len(starts) - 1)]


def _cool_down_start(sim: SimResult, most: int) -> float:
    """When the first rank ends its last forward (the pipeline drains), but no earlier than the
    end of the `most`-th action from the end."""
    first = sim.timeline[0]
    drained = max((t.end_s for t in first if t.action.kind is ActionKind.F), default=0.0)
    ends = sorted((t.end_s for row in sim.timeline for t in row), reverse=True)
    return max(drained, ends[min(most, len(ends) - 1)])


def _window(sim: SimResult, name: str, lo: float, hi: float) -> Window:
    actions: list[tuple[TimedAction, ...]] = []
    idle: list[IdleBox] = []
    for rank, row in enumerate(sim.timeline):
        inside = tuple(
            TimedAction(t.action, max(t.start_s, lo), min(t.end_s, hi))
            for t in row
            if t.start_s < hi and t.end_s > lo
        )
        actions.append(inside)
        idle += _gaps(rank, inside, lo, hi)
    return Window(name, lo, hi, tuple(actions), tuple(idle))


def _gaps(rank: int, row: tuple[TimedAction, ...], lo: float, hi: float) -> list[IdleBox]:
    """The idle stretches of `row` (sorted, non-overlapping) within [lo, hi]."""
    out: list[IdleBox] = []
    at = lo
    for t in row:
        if t.start_s > at:
            out.append(IdleBox(rank, at, t.start_s))
        at = max(at, t.end_s)
    if hi > at:
        out.append(IdleBox(rank, at, hi))
    return out


def _columns(
    rank: int, row: tuple[TimedAction, ...], lo: float, hi: float, column_s: float
) -> tuple[list[AggregateBox], list[IdleBox]]:
    """Columns of width `column_s` over [lo, hi]: each one's busy share (its exact overlap
    with `row`) as an aggregate box and the rest as idle; neighbours that are both fully busy
    or both fully idle merge."""
    edges = [lo + k * column_s for k in range(int((hi - lo) / column_s) + 1)]
    if edges[-1] < hi:
        edges.append(hi)
    boxes: list[AggregateBox] = []
    holes: list[IdleBox] = []
    i = 0
    for a, b in pairwise(edges):
        busy = 0.0
        counts: dict[ActionKind, int] = {}
        while i < len(row) and row[i].end_s <= a:
            i += 1
        j = i
        while j < len(row) and row[j].start_s < b:
            busy += max(0.0, min(b, row[j].end_s) - max(a, row[j].start_s))
            if row[j].start_s >= a:
                counts[row[j].action.kind] = counts.get(row[j].action.kind, 0) + 1
            j += 1
        share = min(busy / (b - a), 1.0)
        if share > 0:
            _append_busy(boxes, AggregateBox(rank, a, b, share, tuple(counts.items())))
        if share < 1.0:
            _append_idle(holes, IdleBox(rank, a, b, 1.0 - share))
    return boxes, holes


def _append_busy(boxes: list[AggregateBox], box: AggregateBox) -> None:
    last = boxes[-1] if boxes else None
    if last is not None and last.end_s == box.start_s and last.share == box.share == 1.0:
        merged = dict(last.counts)
        for kind, n in box.counts:
            merged[kind] = merged.get(kind, 0) + n
        boxes[-1] = AggregateBox(box.rank, last.start_s, box.end_s, 1.0, tuple(merged.items()))
    else:
        boxes.append(box)


def _append_idle(holes: list[IdleBox], hole: IdleBox) -> None:
    last = holes[-1] if holes else None
    if last is not None and last.end_s == hole.start_s and last.share == hole.share == 1.0:
        holes[-1] = IdleBox(hole.rank, last.start_s, hole.end_s)
    else:
        holes.append(hole)
