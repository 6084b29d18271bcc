"""Micro-batches whose activations a stage (or a rank) holds: per-stage peaks, and each rank's
held counts at every point of its timeline.

A micro-batch is held on stage s from the start of F(s, mb) until the end of its last backward
action on s: B, or W for split (zero-bubble) schedules, since W still needs the saved inputs
(an I releases nothing). A rank runs its actions one at a time in list order, so every count
here depends only on the per-rank orders, never on durations.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from planner.memo import PerObject
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


_PHASE_ORDER = {ActionKind.W: 0, ActionKind.F: 1, ActionKind.B: 2}


def _dominated(p: HeldPoint, q: HeldPoint) -> bool:
    """p never exceeds q for any non-negative per-stage bytes and transients: q holds at
    least as much everywhere, and p's transient is at most q's. Transients: W has none; on
    one stage the backward's (recompute, loss gradient) is at least the forward's (loss)."""
    if p.phase is not ActionKind.W and (
        p.stage != q.stage or _PHASE_ORDER[p.phase] > _PHASE_ORDER[q.phase]
    ):
        return False
    return all(a <= b for a, b in zip(p.counts, q.counts, strict=True))


def _pareto(points: list[HeldPoint]) -> tuple[HeldPoint, ...]:
    kept: list[HeldPoint] = []
    for p in sorted(points, key=lambda x: (-sum(x.counts), -_PHASE_ORDER[x.phase])):
        if not any(_dominated(p, q) for q in kept):
            kept.append(p)
    return tuple(sorted(kept, key=lambda x: (x.stage, _PHASE_ORDER[x.phase], x.counts)))


_KINDS = (ActionKind.F, ActionKind.B, ActionKind.I, ActionKind.W)  # code order (generators)


def _walk(schedule: Schedule) -> tuple[tuple[HeldPoint, ...], ...]:
    codes, offsets = schedule_codes(schedule)
    stage_rank = tuple(schedule.rank_of(s) for s in range(schedule.num_stages))
    stages = rank_stages(stage_rank)
    out = []
    for r in range(schedule.pp):
        slot = {s: j for j, s in enumerate(stages[r])}
        held = [0] * len(stages[r])
        points: dict[tuple[int, ActionKind, tuple[int, ...]], HeldPoint] = {}
        for i in range(offsets[r], offsets[r + 1]):
            stage, kind = codes[3 * i], _KINDS[codes[3 * i + 1]]
            j = slot[stage]
            if kind is ActionKind.F:
                held[j] += 1
            phase = ActionKind.B if kind is ActionKind.I else kind
            counts = tuple(held)
            points.setdefault((stage, phase, counts), HeldPoint(counts, stage, phase))
            if kind is ActionKind.B or kind is ActionKind.W:
                held[j] -= 1
        out.append(_pareto(list(points.values())))
    return tuple(out)


_HELD: PerObject[tuple[tuple[HeldPoint, ...], ...]] = PerObject()


def rank_held_points(schedule: Schedule) -> tuple[tuple[HeldPoint, ...], ...]:
    """Per rank, the held counts at every action of its timeline, reduced to the points no
    other point dominates (HeldPoint; cached per Schedule object).

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
        best = max(pts, key=lambda p: sum(p.counts))
        for j, s in enumerate(stages[r]):
            out[s] = best.counts[j]
    return tuple(out)
