"""Micro-batches whose activations a stage (or a rank) holds: per-stage peaks, and each rank's
held counts at every point of its timeline.

A micro-batch is held on stage s from the start of F(s, mb) until the end of its last backward
action on s: B, or W for split (zero-bubble) schedules, since W still needs the saved inputs
(an I releases nothing). A rank runs its actions one at a time in list order, so every count
here depends only on the per-rank orders, never on durations.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from functools import lru_cache

from planner.memo import PerObject
from planner.schedules import kernel
from planner.schedules.generators import generate, peak_inflight_of, schedule_codes
from planner.schedules.ir import ActionKind, Schedule, rank_stages, stage_to_rank
from planner.specs.base import ScheduleName

__all__ = [
    "HeldPoint",
    "coheld_counts",
    "held_points_of",
    "peak_inflight",
    "rank_held_points",
    "rank_peak_inflight",
]


def peak_inflight(schedule: Schedule) -> tuple[int, ...]:
    """Per stage, the most micro-batches whose activations the stage holds at once.

    A micro-batch is held on stage s from the start of F(s, mb) until the end of its last
    backward action on s: B, or W for split (zero-bubble) schedules, since W still needs the
    saved inputs. Because a rank runs its actions one at a time in list order, this count
    depends only on the per-rank order, never on durations: walk each rank's list, +1 at F,
    -1 at B or W (an I releases nothing), and keep the maximum per stage.

    Closed forms it reproduces (Narayanan et al. 2021 §2.2.1): GPipe m on every stage;
    1F1B min(pp - s, m) on stage s.
    """
    held = [0] * schedule.num_stages
    peak = [0] * schedule.num_stages
    for order in schedule.orders:
        for a in order:
            if a.kind is ActionKind.F:
                held[a.stage] += 1
                if held[a.stage] > peak[a.stage]:
                    peak[a.stage] = held[a.stage]
            elif a.kind is not ActionKind.I:
                held[a.stage] -= 1
    return tuple(peak)


def rank_peak_inflight(schedule: Schedule) -> tuple[int, ...]:
    """Per rank, the most (stage, micro-batch) activation sets the rank holds at once.

    With vpp chunks per rank, each set is one chunk's activations of one micro-batch; divide by
    vpp for full-rank micro-batch equivalents when the chunks are equal. For interleaved 1F1B
    with m a multiple of pp the first rank gives min(pp * vpp + pp - 1, vpp * m)
    chunk-micro-batches; the first term is pp * (1 + (pp - 1) / (pp * vpp)) micro-batches
    (Narayanan et al. 2021 §2.2.2; Korthikanti et al. 2022). Like
    `peak_inflight`, it depends only on the per-rank order.
    """
    peaks = []
    for order in schedule.orders:
        held = peak = 0
        for a in order:
            if a.kind is ActionKind.F:
                held += 1
                peak = max(peak, held)
            elif a.kind is not ActionKind.I:
                held -= 1
        peaks.append(peak)
    return tuple(peaks)


@dataclass(frozen=True)
class HeldPoint:
    """What one rank holds while one of its actions runs.

    `counts[j]`: micro-batches held by the rank's j-th stage (rank_stages order), counting the
    running action's own micro-batch (an F's activations exist by its end; a B, I or W runs on
    saved activations it releases at its end). `stage` is the running action's stage and
    `phase` its kind (F; B for B and I, the backward that recomputes; W), which decides the
    transient bytes the cost model adds on top (planner.cost.memory.rank_activation_peak).
    """

    counts: tuple[int, ...]
    stage: int
    phase: ActionKind
    total: int = field(init=False, compare=False, repr=False)  # sum(counts)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", sum(self.counts))


_PHASE_ORDER = {ActionKind.W: 0, ActionKind.F: 1, ActionKind.B: 2}
_F, _B, _W = 0, 1, 3  # kind codes (planner.schedules.generators: F, B, I, W); I counts as B


def _covered(counts: tuple[int, ...], front: list[tuple[int, ...]]) -> bool:
    return any(all(map(operator.le, counts, q)) for q in front)


def _front(vectors: set[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The vectors no other one is >= everywhere (most held first; with two chunks the
    vertices of their upper hull, _upper_hull)."""
    if not vectors:
        return []
    width = len(next(iter(vectors)))
    if width == 1:
        return [max(vectors)]
    if width == 2:  # by the first count, falling: kept when its second beats all before it
        kept: list[tuple[int, ...]] = []
        for v in sorted(vectors, reverse=True):
            if not kept or v[1] > kept[-1][1]:
                kept.append(v)
        return _upper_hull(kept)
    ordered = sorted(vectors, key=lambda x: (-sum(x), x))
    kept = []
    for v in ordered:
        if not _covered(v, kept):
            kept.append(v)
    return kept


def _upper_hull(front: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The vertices of a 2-chunk front's upper convex hull (the front: first count falling,
    second rising). A point on or below the segment between two others never holds more
    bytes than both of them for any non-negative bytes per chunk (the bytes held are linear in
    the counts), so the peak is the max over these vertices alone."""
    hull: list[tuple[int, ...]] = []
    for p in reversed(front):  # first count rising, second falling
        while len(hull) >= 2:
            (ox, oy), (ax, ay) = hull[-2], hull[-1]
            if (ax - ox) * (p[1] - oy) - (ay - oy) * (p[0] - ox) < 0:
                break
            hull.pop()  # hull[-1] is on or below the segment from hull[-2] to p
        hull.append(p)
    return hull


def _undominated(
    stages: tuple[int, ...],
    back: dict[int, set[tuple[int, ...]]],
    loss_fw: set[tuple[int, ...]],
    plain: dict[tuple[int, ...], tuple[int, ActionKind]],
    last: int,
) -> tuple[HeldPoint, ...]:
    """The points of one rank that no other point dominates: q dominates p when q holds at
    least as much on every stage and p's transient is at most q's whatever the transients
    (planner.cost.memory.point_transient_bytes). A backward point (B, I) is compared with its
    stage's backward points; the last stage's F (the loss temporary) also with that stage's
    backward points; a point without transient (W) with every point. With two chunks, only
    the upper convex hull of each class is kept (_upper_hull). kernel.held_points makes the
    same selection in C."""
    out: list[HeldPoint] = []
    kept: list[tuple[int, ...]] = []
    for s in stages:
        front = _front(back.get(s, set()))
        out += [HeldPoint(v, s, ActionKind.B) for v in front]
        kept += front
        if s == last:
            fwd = [v for v in _front(loss_fw) if not _covered(v, front)]
            out += [HeldPoint(v, s, ActionKind.F) for v in fwd]
            kept += fwd
    for v in _front(set(plain)):
        if not _covered(v, kept):
            out.append(HeldPoint(v, *plain[v]))
    return tuple(sorted(out, key=_point_order))


def _point_order(p: HeldPoint) -> tuple[int, int, int, tuple[int, ...]]:
    """Most held first (rank_activation_peak stops early on it), then by stage and phase."""
    return (-p.total, p.stage, _PHASE_ORDER[p.phase], p.counts)


def _walk(schedule: Schedule) -> tuple[tuple[HeldPoint, ...], ...]:
    """Every rank's undominated points. An F's point is kept only on the last stage: on any
    other stage its transient is 0 and the action that follows it on the rank (a B, I or W:
    every F precedes its own backward) runs with the same counts held. The walk runs in C
    where the kernel is built (kernel.held_points: each class's maximal vectors as they
    arrive, whose front is the front of all of them, then _undominated's selection and
    order of those fronts), else in Python (_walk_python)."""
    if not kernel.available():
        return _walk_python(schedule)
    codes, offsets = schedule_codes(schedule)
    stage_rank = tuple(schedule.rank_of(s) for s in range(schedule.num_stages))
    stages = rank_stages(stage_rank)
    flat = kernel.held_points(codes, offsets, schedule.pp, schedule.num_stages, stage_rank)
    values = flat.tolist()
    out = []
    at = 0
    for r in range(schedule.pp):
        rec = len(stages[r]) + 2
        start = at + 1
        at = start + values[at] * rec
        out.append(
            tuple(
                HeldPoint(tuple(values[k + 2 : k + rec]), values[k], _PHASES[values[k + 1]])
                for k in range(start, at, rec)
            )
        )
    return tuple(out)


_PHASES = (ActionKind.W, ActionKind.F, ActionKind.B)  # kernel.held_points' phase codes


def _walk_python(schedule: Schedule) -> tuple[tuple[HeldPoint, ...], ...]:
    """_walk in Python: every held vector of every action into its class's set."""
    codes, offsets = schedule_codes(schedule)
    stage_rank = tuple(schedule.rank_of(s) for s in range(schedule.num_stages))
    stages = rank_stages(stage_rank)
    last = schedule.num_stages - 1
    out = []
    for r in range(schedule.pp):
        slot = [0] * schedule.num_stages
        for j, s in enumerate(stages[r]):
            slot[s] = j
        held = [0] * len(stages[r])
        back: dict[int, set[tuple[int, ...]]] = {s: set() for s in stages[r]}
        loss_fw: set[tuple[int, ...]] = set()
        plain: dict[tuple[int, ...], tuple[int, ActionKind]] = {}
        lo, hi = 3 * offsets[r], 3 * offsets[r + 1]
        for stage, kind in zip(codes[lo:hi:3], codes[lo + 1 : hi : 3], strict=True):
            if kind == _F:
                held[slot[stage]] += 1
                if stage == last:
                    loss_fw.add(tuple(held))
            elif kind == _W:
                plain.setdefault(tuple(held), (stage, ActionKind.W))
                held[slot[stage]] -= 1
            else:  # B or I: a backward, which may recompute; B releases, I does not
                back[stage].add(tuple(held))
                if kind == _B:
                    held[slot[stage]] -= 1
        out.append(_undominated(stages[r], back, loss_fw, plain, last))
    return tuple(out)


_HELD: PerObject[tuple[tuple[HeldPoint, ...], ...]] = PerObject()


def rank_held_points(schedule: Schedule) -> tuple[tuple[HeldPoint, ...], ...]:
    """Per rank, the held counts at every action of its timeline, reduced to the points no
    other point dominates (HeldPoint; cached per Schedule object), most held first.

    A rank's activation bytes while an action runs are sum_j counts[j] * bytes(stage j) plus
    that action's transient, so its peak over the timeline is the largest of these sums over
    the points kept. With one stage per rank (vpp = 1) this is the stage's peak in-flight count
    (its backward runs with the peak held: tests/planner/schedules/test_schedule_held.py); with
    several chunks it is at most, and usually below, the sum of the chunks' peaks, because
    the chunks do not peak at the same time.
    """
    return _HELD.get(schedule, lambda: _walk(schedule))


@lru_cache(maxsize=4096)
def held_points_of(
    name: ScheduleName, *, pp: int, vpp: int, num_microbatches: int
) -> tuple[tuple[HeldPoint, ...], ...]:
    """rank_held_points(generate(...)), without generating the schedule when vpp = 1: rank r
    then holds one stage, and its one undominated point is that stage's backward with the
    stage's peak in-flight count held (peak_inflight_of; checked against the walk of the
    generated orders in tests/planner/schedules/test_schedule_held.py)."""
    if vpp == 1:
        peaks = peak_inflight_of(name, pp=pp, vpp=1, num_microbatches=num_microbatches)
        ranks = [stage_to_rank(s, pp=pp, schedule=name) for s in range(pp)]
        by_rank = sorted(range(pp), key=ranks.__getitem__)
        return tuple((HeldPoint((peaks[s],), s, ActionKind.B),) for s in by_rank)
    return rank_held_points(generate(name, pp=pp, vpp=vpp, num_microbatches=num_microbatches))


def coheld_counts(
    points: tuple[tuple[HeldPoint, ...], ...], stage_rank: tuple[int, ...]
) -> tuple[int, ...]:
    """Per stage, the counts of one point of its rank (the one holding the most micro-batches
    in all): held at the same moment, so sum_{s on r} coheld[s] * bytes(s) is a lower bound
    of rank r's activation peak for any bytes (what the search's floors may use)."""
    stages = rank_stages(stage_rank)
    out = [0] * len(stage_rank)
    for r, pts in enumerate(points):
        best = max(pts, key=lambda p: p.total)
        for j, s in enumerate(stages[r]):
            out[s] = best.counts[j]
    return tuple(out)
