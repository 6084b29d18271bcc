"""The proven lower bound and gap, search.gap_tolerance, objective bubble stopping and top_k."""

from __future__ import annotations

import random
import time

import pytest
from pydantic import ValidationError

from planner.search import driver, run_search, search
from planner.search.tuning import TUNING

from .helpers import DEEP, gpt_request
from .random_requests import random_request, solve_in_mode


def _with(request, **search_over):  # type: ignore[no-untyped-def]
    return request.model_copy(update={"search": request.search.model_copy(update=search_over)})


@pytest.mark.parametrize("seed", range(8))
def test_a_finished_search_has_gap_zero_and_a_bound_at_most_the_oracle(seed: int) -> None:
    request = random_request(random.Random(7_000 + seed))
    best = solve_in_mode(request, "optimal")
    oracle = solve_in_mode(request, "exhaustive")
    assert (best is None) == (oracle is None)
    if best is None or oracle is None:
        return
    want = oracle.plan.prediction.step_time_s
    assert best.search.status == "OPTIMAL"
    assert best.search.gap == 0.0
    assert best.search.lower_bound_s is not None
    assert best.search.lower_bound_s <= want * (1 + 1e-9)
    assert oracle.search.gap == 0.0  # the oracle settles every configuration too


def test_a_search_cut_short_states_a_finite_gap_below_the_optimum() -> None:
    full = search(gpt_request(search={"time_limit_s": 60, "top_k": 0}), clock=time.monotonic)
    assert full.search.status == "OPTIMAL" and full.search.gap == 0.0
    optimum = full.plan.prediction.step_time_s
    cut = search(gpt_request(search={"time_limit_s": 0.05, "top_k": 0}), clock=time.monotonic)
    stats = cut.search
    assert stats.status == "FEASIBLE"
    assert stats.lower_bound_s is not None and stats.gap is not None
    assert 0.0 < stats.lower_bound_s <= optimum
    assert 0.0 <= stats.gap < float("inf")
    incumbent = cut.plan.prediction.step_time_s
    assert stats.gap == pytest.approx(incumbent / stats.lower_bound_s - 1.0)
    assert incumbent >= optimum * (1 - 1e-9)


def test_gap_tolerance_stops_once_the_gap_is_within_it() -> None:
    # 128 layers on 512 GPUs: no proof within the limit, but a gap under 30 % early
    request = gpt_request(
        model=DEEP,
        cluster={"gpu": "A100-SXM-80GB", "num_gpus": 512, "gpus_per_node": 8},
        training={"global_batch_size": 1024, "seq_length": 2048},
        search={"time_limit_s": 20, "top_k": 0, "gap_tolerance": 0.3},
    )
    result = search(request, clock=time.monotonic)
    stats = result.search
    assert stats.gap_tolerance == 0.3
    assert stats.status == "FEASIBLE" and stats.details["stopped_at_gap_tolerance"]
    assert stats.gap is not None and 0.0 < stats.gap <= 0.3
    assert stats.lower_bound_s is not None
    assert result.plan.prediction.step_time_s <= stats.lower_bound_s * 1.3
    assert stats.wall_time_s < 0.5 * request.search.time_limit_s  # it stopped, not the limit


def test_checking_the_gap_takes_a_bounded_share_of_the_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each full gap check (every entry and unswept group) is made to cost 50 ms more; a
    tolerance no proof meets in time keeps the search checking to its limit. At most
    TUNING.gap_check_share of its clock may go to the throttled checks, plus the few
    unthrottled ones (per pass of the search, and the final bound). Checked every
    progress_every_s regardless of their cost, a third of the search went to them."""
    scan_s = 0.05
    calls = []
    real_bounds = driver.search_bounds

    def slow_bounds(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(scan_s)
        calls.append(1)
        return real_bounds(*args, **kwargs)

    monkeypatch.setattr(driver, "search_bounds", slow_bounds)
    request = gpt_request(
        model=DEEP,
        cluster={"gpu": "A100-SXM-80GB", "num_gpus": 512, "gpus_per_node": 8},
        training={"global_batch_size": 1024, "seq_length": 2048},
        search={"time_limit_s": 3, "top_k": 0, "gap_tolerance": 1e-9},
    )
    out = run_search(request, clock=time.monotonic)
    assert out.status == "FEASIBLE" and not out.stopped_at_gap
    unthrottled = 3
    allowed = TUNING.gap_check_share * out.elapsed_s / scan_s + unthrottled
    assert 0 < len(calls) <= allowed, (len(calls), out.elapsed_s)


def test_a_tolerance_the_proof_meets_anyway_is_optimal() -> None:
    result = search(
        gpt_request(search={"time_limit_s": 60, "top_k": 0, "gap_tolerance": 0.5}),
        clock=time.monotonic,
    )
    stats = result.search
    if stats.status == "OPTIMAL":  # settled everything before the gap was checked
        assert stats.gap == 0.0 and not stats.details["stopped_at_gap_tolerance"]
    else:
        assert stats.gap is not None and 0.0 < stats.gap <= 0.5
        assert stats.details["stopped_at_gap_tolerance"]


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_gap_tolerance_outside_0_to_1_is_refused(value: float) -> None:
    with pytest.raises(ValidationError, match="gap_tolerance"):
        gpt_request(search={"gap_tolerance": value})


def test_a_zero_bubble_proves_itself_and_time_breaks_the_tie() -> None:
    # pp = 1 has no bubble: the search may stop at the first such plan proven time-optimal,
    # keeping the fastest of the zero-bubble configurations.
    req = gpt_request(
        constraints={"memory_cap_gib": 76, "micro_batch_sizes": [1, 2]},
        objective="bubble",
        search={"time_limit_s": 60, "top_k": 3},
    )
    result = search(req, clock=time.monotonic)
    assert result.plan.prediction.bubble_fraction == 0.0
    assert result.search.status == "OPTIMAL" and result.search.gap == 0.0
    zero = [a for a in result.alternatives if a.prediction.bubble_fraction == 0.0]
    assert all(a.prediction.step_time_s >= result.plan.prediction.step_time_s for a in zero)
    # stopped by the proof, long before the limit (the search's own clock)
    assert result.search.wall_time_s < 0.5 * req.search.time_limit_s


@pytest.mark.parametrize("seed", range(6))
def test_bubble_objective_agrees_with_the_oracle(seed: int) -> None:
    request = random_request(random.Random(8_000 + seed))
    request = request.model_copy(update={"objective": "bubble"})
    best = solve_in_mode(request, "optimal")
    oracle = solve_in_mode(request, "exhaustive")
    assert (best is None) == (oracle is None)
    if best is None or oracle is None:
        return
    got, want = best.plan.prediction, oracle.plan.prediction
    assert got.bubble_fraction == pytest.approx(want.bubble_fraction, rel=1e-9, abs=1e-12)
    assert got.step_time_s == pytest.approx(want.step_time_s, rel=1e-9)
    assert best.search.status == "OPTIMAL"


def test_top_k_returns_k_other_configurations_with_their_difference() -> None:
    req = gpt_request(search={"time_limit_s": 30, "top_k": 3})
    result = search(req, clock=time.monotonic)
    assert len(result.alternatives) == 3
    assert result.search.alternatives_note is None
    chosen = result.plan
    keys = {
        (a.tp, a.pp, a.dp, a.vpp, a.schedule, a.micro_batch_size, a.zero_stage)
        for a in (chosen, *result.alternatives)
    }
    assert len(keys) == 4  # each differs from the chosen one and from the others
    for alt in result.alternatives:
        assert alt.prediction.feasible
        assert alt.prediction.step_time_s >= chosen.prediction.step_time_s * (1 - 1e-9)
        assert alt.why and alt.why[0].startswith("Differs from the chosen plan in ")
    times = [a.prediction.step_time_s for a in result.alternatives]
    assert times == sorted(times)


def test_without_alternatives_the_sweep_scores_no_configuration_that_cannot_win() -> None:
    """top_k = 0 (objective time): nothing reads the best plan of a family, so the sweep
    scores no heuristic partition for a configuration whose floor reaches the incumbent
    (with top_k it does, for the alternatives); the plan and its proof are the same."""
    none = run_search(gpt_request(search={"time_limit_s": 30, "top_k": 0}))
    some = run_search(gpt_request(search={"time_limit_s": 30, "top_k": 3}))
    assert none.status == some.status == "OPTIMAL"
    assert none.best is not None and some.best is not None
    assert none.best[1].score.step_time_s == some.best[1].score.step_time_s
    assert len(none.entries) == len(some.entries)
    scored = [e for e in none.entries if e.config.family in none.families]
    assert len(scored) < len([e for e in some.entries if e.config.family in some.families])


def test_top_k_says_why_when_fewer_configurations_fit() -> None:
    # one degree, one schedule, one micro-batch size and one ZeRO stage: two configurations
    req = gpt_request(
        constraints={
            "memory_cap_gib": 76,
            "tp": [8],
            "pp": [8],
            "micro_batch_sizes": [1],
            "zero_stages": [1],
            "schedules": ["1f1b", "gpipe"],
        },
        search={"time_limit_s": 30, "top_k": 5},
    )
    result = search(req, clock=time.monotonic)
    assert len(result.alternatives) == 1
    note = result.search.alternatives_note
    assert note is not None and note.startswith("1 of 5: only 1 other configuration")


def test_a_zero_bubble_of_pp_1_is_proven_before_any_pipeline_is_swept() -> None:
    # pp = 1 groups come first in the sweep; with a zero-bubble plan among them, the sweep
    # stops for its proof, and every pp > 1 group is then settled without PartitionInputs.
    req = gpt_request(
        constraints={"memory_cap_gib": 76, "micro_batch_sizes": [1, 2]}, objective="bubble"
    )
    out = run_search(req, clock=time.monotonic)
    assert out.status == "OPTIMAL" and out.best is not None
    assert out.best[1].score.bubble_fraction == 0.0 and out.best[0].config.pp == 1
    assert out.entries and all(e.config.pp == 1 for e in out.entries)
    assert out.group_time_pruned > 0  # the pipelines, settled by the proven zero bubble
