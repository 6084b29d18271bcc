"""sweep_floors.least_first, the best-first pass over the unswept groups at a cut of the sweep:
where it stops (the first group out of its queue with every floor known, none settling it),
the least known floor of the groups not settled by memory is the least that evaluating every
floor of every group would give. So stopping there loses nothing of the bound; the floors
themselves are each tested on their own (test_coarse_floor, test_expert_floor, test_kinds,
test_group_floor, test_kind_memory_floor)."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

from planner.cost import resolve_costs
from planner.search.driver import run_search
from planner.search.exact import REL_TOL
from planner.search.outcome import Outcome
from planner.search.space import Config, enumerate_groups
from planner.search.sweep_floors import (
    coarse_floor,
    expert_floor,
    group_floors_time,
    kind_memory_floor,
    known_time_floor,
    least_first,
    over_cap,
    work_floor,
)
from planner.specs import PlanRequest

from .random_folded import random_folded_request


def _full_floor(
    request: PlanRequest, out: Outcome, members: list[Config], enough: float
) -> float | None:
    """Every time floor of the group evaluated, None where its kind memory floor is over
    the cap."""
    src = out.source
    assert src is not None
    memory = kind_memory_floor(request, src, out, members, known=False)
    if memory is not None and over_cap(request, memory):
        return None
    floors = (
        coarse_floor(request, src, out, members),
        expert_floor(request, src, out, members),
        work_floor(request, src, out, members),
        group_floors_time(request, src, members, enough),
    )
    return max(f or 0.0 for f in floors)


def _cut(request: PlanRequest, incumbent: float) -> tuple[Outcome, list[list[Config]]]:
    src = resolve_costs(request)
    groups = enumerate_groups(request, num_layers=len(src.layers))
    out = Outcome(entries=[], best=None, status="FEASIBLE", source=src)
    score = SimpleNamespace(step_time_s=incumbent, bubble_fraction=0.0, feasible=True)
    out.best = (None, SimpleNamespace(score=score))  # type: ignore[assignment]
    out.pending = groups
    return out, groups


def test_the_pass_stops_at_the_least_floor_of_a_full_evaluation() -> None:
    compared = raised = 0
    for i in range(8):
        request = random_folded_request(random.Random(f"least-first-{i}"), "moe")
        done = run_search(request)
        if done.best is None:
            continue
        # above the optimum, so that groups stay below it and the queue has work
        incumbent = done.best[1].score.step_time_s * 1.2
        enough = incumbent * (1 - REL_TOL)
        out, groups = _cut(request, incumbent)
        src = out.source
        assert src is not None
        before = min((known_time_floor(request, src, out, g) for g in groups), default=math.inf)
        least_first(request, src, out, math.inf, enough)
        known = []
        for g in groups:
            memory = kind_memory_floor(request, src, out, g, known=True)
            if memory is None or not over_cap(request, memory):
                known.append(known_time_floor(request, src, out, g))
        stated = min(known, default=math.inf)
        check, _ = _cut(request, incumbent)
        full = [_full_floor(request, check, g, enough) for g in groups]
        least = min((f for f in full if f is not None), default=math.inf)
        if least >= enough:
            assert stated >= enough or stated == least
        else:
            assert stated == least, (i, stated, least)
            compared += 1
            raised += least > before
    assert compared >= 4 and raised >= 2


def test_the_known_floor_follows_the_floors_computed_since() -> None:
    """known_time_floor keeps a group's coarse and expert floors per value of the fields
    they read once both are known: before that it must not keep what it found (a floor
    computed later would be missed), and what it keeps is what each group's own floors
    give."""
    checked = 0
    for i in range(6):
        request = random_folded_request(random.Random(f"known-floor-{i}"), "moe")
        out, groups = _cut(request, math.inf)
        src = out.source
        assert src is not None
        for g in groups:
            coarse = coarse_floor(request, src, out, g) or 0.0
            assert known_time_floor(request, src, out, g) == coarse
        for g in groups:
            expert = expert_floor(request, src, out, g) or 0.0
            coarse = coarse_floor(request, src, out, g) or 0.0
            assert known_time_floor(request, src, out, g) == max(coarse, expert)
            checked += expert > coarse
    assert checked >= 1
