"""Past its time limit and tuning.finish_slack_s, the final bound over groups never swept
calls no cost model: each such group counts a floor already known, else 0, and the bound
stays at most the proven optimum."""

from __future__ import annotations

import time
from typing import Any

import pytest

from planner.search import driver, search
from planner.search.driver import run_search
from planner.search.outcome import Outcome
from planner.search.space import Config
from planner.specs import PlanRequest

from .helpers import JumpClock, deep_request


def _swept_configs(out: Outcome) -> list[Config]:
    swept = [e.config for e in out.entries]
    for group in [*out.memory_groups, *out.time_groups]:
        swept.extend(group.members)
    return swept


def test_the_final_bound_past_the_deadline_builds_no_new_floor() -> None:
    out = run_search(deep_request(5.0), clock=JumpClock(3))
    assert out.pending, "the jump must leave groups unswept for this test to mean anything"
    assert out.best is not None and out.status == "FEASIBLE"
    # The work kinds computed are those of groups the sweep reached, not of the unswept ones.
    reached = {(c.tp, c.micro_batch_size, c.sequence_parallel) for c in _swept_configs(out)}
    assert {key[:3] for key in out.work_kinds} <= reached
    unswept = {(c.tp, c.micro_batch_size, c.sequence_parallel) for ms in out.pending for c in ms}
    assert unswept - reached, "some unswept group must be of a kind never computed"
    # The bound is still a lower bound of the optimum, so at most the step time of any plan,
    # here one a search given a second of CPU time finds (the incumbent's own time proves
    # nothing: the bound is the least of it and the open floors)
    assert out.lower_bound_s is not None
    other = run_search(deep_request(1.0), clock=time.process_time, cpu_clock=True)
    assert other.best is not None
    assert out.lower_bound_s <= other.best[1].score.step_time_s
    assert out.elapsed_s == 1e9  # the clock read after the limit ends it: no extra pass


def test_a_search_cut_past_the_deadline_states_no_infinite_gap() -> None:
    result = search(deep_request(5.0), clock=JumpClock(3))
    stats = result.search
    assert stats.status == "FEASIBLE"
    assert stats.lower_bound_s is not None and stats.lower_bound_s >= 0.0
    # a bound of 0 proves no finite gap: the gap is then not stated (None), never inf
    assert stats.gap is None or 0.0 <= stats.gap < float("inf")
    assert (stats.gap is None) == (stats.lower_bound_s == 0.0)


def test_past_the_limit_a_gap_tolerance_costs_no_scan_per_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With search.gap_tolerance set, the exact phase asks per configuration whether the gap
    is within it; past the limit its pass over the rest returns at once per configuration,
    and a bound scan each (every entry and unswept group) made it quadratic: the 405B
    bubble-megatron bench request ran 62 s of CPU on a 30 s limit. The check is throttled to
    the search clock (tuning.progress_every_s): with the clock stopped far past the limit,
    a scan or two, not one per configuration."""
    late = 0
    scan = driver.search_bounds

    def counted(request: PlanRequest, out: Outcome, *, sweep: bool) -> Any:
        nonlocal late
        late += out.now() > request.search.time_limit_s
        return scan(request, out, sweep=sweep)

    monkeypatch.setattr(driver, "search_bounds", counted)
    request = deep_request(5.0)
    tolerant = request.model_copy(
        update={"search": request.search.model_copy(update={"gap_tolerance": 1e-9})}
    )
    out = run_search(tolerant, clock=JumpClock(5000))
    assert len(out.entries) >= 100, "the jump must leave the exact phase many configurations"
    assert out.status == "FEASIBLE" and not out.stopped_at_gap
    assert late <= 3, late
