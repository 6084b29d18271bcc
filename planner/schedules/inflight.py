"""Peak in-flight micro-batches per stage: how many micro-batches' activations a stage holds."""

from __future__ import annotations

from planner.schedules.ir import ActionKind, Schedule

__all__ = ["peak_inflight", "rank_peak_inflight"]


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
