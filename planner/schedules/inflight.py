"""Peak in-flight micro-batches per stage: how many micro-batches' activations a stage holds."""

from __future__ import annotations

from planner.schedules.ir import ActionKind, Schedule

__all__ = ["peak_inflight"]


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
