"""What a running search reports to its caller (`run_search(..., on_progress=cb)`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchProgress:
    """One report of a running search.

    `settled` of `total` configurations are decided: solved, or pruned by a floor, a memory
    floor, dominance or the framework's checks; `fraction` is settled / total (1.0 in the last
    report). `incumbent_s`: the step time of the best plan so far (None before the first);
    `lower_bound_s` and `gap` as in the result's SearchStats (docs/search.md, Gap and status),
    None while an unswept group has no floor yet (its own or its coarse floor,
    sweep_floors.coarse_floor) or no incumbent exists. `elapsed_s`: the search's own clock (the
    caller's clock, or CP-SAT's solve time without one).
    """

    fraction: float
    settled: int
    total: int
    incumbent_s: float | None
    lower_bound_s: float | None
    gap: float | None
    elapsed_s: float
