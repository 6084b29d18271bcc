"""run_search / search report SearchProgress: settled configurations, incumbent, bound, gap."""

from __future__ import annotations

import dataclasses
import itertools
import time

from planner.search import SearchProgress, search

from .helpers import gpt_request


def test_progress_reports_settle_towards_the_proof() -> None:
    reports: list[SearchProgress] = []
    result = search(
        gpt_request(search={"time_limit_s": 60, "top_k": 0}),
        on_progress=reports.append,
        clock=time.monotonic,
    )
    assert [f.name for f in dataclasses.fields(SearchProgress)] == [
        "fraction",
        "settled",
        "total",
        "incumbent_s",
        "lower_bound_s",
        "gap",
        "elapsed_s",
    ]
    assert len(reports) >= 2
    for a, b in itertools.pairwise(reports):
        assert a.settled <= b.settled and a.elapsed_s <= b.elapsed_s
        if a.incumbent_s is not None:
            assert b.incumbent_s is not None and b.incumbent_s <= a.incumbent_s
    for p in reports:
        assert 0.0 <= p.fraction <= 1.0 and 0 <= p.settled <= p.total
        assert p.total == result.search.candidates_considered
        if p.lower_bound_s is not None and p.incumbent_s is not None:
            assert p.lower_bound_s <= p.incumbent_s
            assert p.gap is not None and p.gap >= 0.0
    last = reports[-1]
    assert last.fraction == 1.0 and last.settled == last.total
    assert last.incumbent_s == result.plan.prediction.step_time_s
    assert last.lower_bound_s == result.search.lower_bound_s and last.gap == 0.0


def test_a_search_cut_short_ends_with_its_open_gap() -> None:
    reports: list[SearchProgress] = []
    result = search(
        gpt_request(search={"time_limit_s": 0.05, "top_k": 0}),
        on_progress=reports.append,
        # CPU time: on a loaded machine a wall clock can pass the limit plus the final bound's
        # slack before the bound is computed, and the search then rightly states no gap
        clock=time.process_time,
    )
    last = reports[-1]
    assert result.search.status == "FEASIBLE"
    assert last.settled < last.total
    assert last.gap == result.search.gap and last.gap is not None and last.gap > 0
