"""driver.close_search's one pass over the unswept groups (driver._settle_pending): past the time
limit it computes no floor (lookups of each group's kept keys and known floors), and it
settles exactly the groups whose known time floor reaches the incumbent or whose known kind
memory floor is over the cap, as a per-group evaluation of those known floors does."""

from __future__ import annotations

from typing import Any

import pytest

from planner.search import driver, sweep_floors
from planner.search.driver import run_search
from planner.search.exact import REL_TOL
from planner.search.outcome import Outcome
from planner.search.space import Config
from planner.search.sweep_floors import kind_memory_floor, known_time_floor, over_cap
from planner.specs import PlanRequest

from .helpers import JumpClock, deep_request


def test_the_close_past_the_limit_settles_by_known_floors_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closing: list[list[list[Config]]] = []
    computed: list[object] = []
    real_close, real_memory = driver.close_search, sweep_floors.kind_memory_floor_bytes

    def memory(*args: Any, **kwargs: Any) -> float:
        if closing:
            computed.append(args)
        return real_memory(*args, **kwargs)

    def close(request: PlanRequest, out: Outcome) -> None:
        closing.append(list(out.pending))
        real_close(request, out)

    monkeypatch.setattr(sweep_floors, "kind_memory_floor_bytes", memory)
    monkeypatch.setattr(driver, "close_search", close)
    request = deep_request(5.0)
    out = run_search(request, clock=JumpClock(3))
    assert out.best is not None and out.source is not None
    (before,) = closing
    assert out.pending and len(out.pending) < len(before), "the test needs both kinds"
    assert computed == []  # past the limit: no memory floor computed
    enough = out.best[1].score.step_time_s * (1 - REL_TOL)
    left = {id(g) for g in out.pending}
    least = float("inf")
    for group in before:
        floor = known_time_floor(request, out.source, out, group)
        kept = kind_memory_floor(request, out.source, out, group, known=True)
        over = kept is not None and over_cap(request, kept)
        assert (id(group) in left) == (floor < enough and not over), group[0]
        if id(group) in left:
            least = min(least, floor)
    # the bound counts the least known floor of the groups left (the pass's, not rescanned)
    assert out.lower_bound_s is not None and out.lower_bound_s <= least
