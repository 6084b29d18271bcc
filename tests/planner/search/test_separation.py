"""solve_config's separation (separate_lp inside the probed domains, then probing again) still
finds the oracle's optimum and never proves a floor above it: in a hard proof (a second
call, with the paths an earlier call collected) and in a first call where the schedule is
small (exact.separate_solves), or where the LP floor is much nearer the bound than the
configuration's best partition (exact.floor_is_the_proof)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.schedules.simulate import num_actions
from planner.search import exact
from planner.search.exact import (
    ConfigResult,
    Known,
    Scored,
    floor_is_the_proof,
    separate_solves,
    solve_config,
)
from planner.search.exhaustive import exhaustive_config, scored_partitions
from planner.search.hints import hint_partitions
from planner.search.partition import schedule_of, score
from planner.search.paths import seed_cuts
from planner.search.tuning import TUNING

from .cases import THREE, three_mode_case


@pytest.mark.parametrize("seed", range(40))
def test_second_call_with_separation_matches_the_oracle(seed: int) -> None:
    _, inputs = three_mode_case(7700, seed)
    oracle = exhaustive_config(inputs, modes=THREE).best
    known = Known(paths=tuple(seed_cuts(schedule_of(inputs))))
    # a bound above the optimum (the oracle's + 10 %): the LP phases all run below it
    bound = None if oracle is None else oracle.score.step_time_s * 1.1
    hints = hint_partitions(inputs, THREE, None)
    res = solve_config(inputs, modes=THREE, known=known, bound_s=bound, hints=hints)
    _assert_matches(res, oracle)


@pytest.mark.parametrize("seed", range(40))
def test_first_call_with_separation_matches_the_oracle(seed: int) -> None:
    """A first call (no known paths) runs separate_lp too where the schedule is small
    (exact.separate_solves: these inputs' schedules all get solves) and still finds the
    oracle's optimum, never proving a floor above it."""
    _, inputs = three_mode_case(7700, seed)  # the inputs of the second-call test above
    assert separate_solves(inputs, TUNING, hard=False) > 0
    oracle = exhaustive_config(inputs, modes=THREE).best
    # a bound above the optimum and no hints: the phases before CP-SAT, separation among
    # them, run below it and prove the floors that the last assertion checks
    bound = None if oracle is None else oracle.score.step_time_s * 1.1
    res = solve_config(inputs, modes=THREE, bound_s=bound)
    _assert_matches(res, oracle)


def _assert_matches(res: ConfigResult, oracle: Scored | None) -> None:
    """The oracle's optimum, proven, and no floor above it (or nothing, where nothing fits)."""
    if oracle is None:
        assert res.best is None
        return
    assert res.status == "OPTIMAL" and res.best is not None
    assert res.best.score.step_time_s == pytest.approx(oracle.score.step_time_s, rel=1e-9)
    assert res.floor_s <= oracle.score.step_time_s * (1 + 1e-9)


def test_floor_is_the_proof_compares_the_two_gaps() -> None:
    """The first call's separation gets its hard budget only where the LP lies within
    lp_separate_far_within below the bound and the best partition at least lp_separate_far x
    as far above it."""
    _, inputs = three_mode_case(7700, 0)
    part = hint_partitions(inputs, THREE, None)[0]
    far, within = TUNING.lp_separate_far, TUNING.lp_separate_far_within

    def best_at(step_s: float) -> Scored:
        sc = score(inputs, part)
        return Scored(part, replace(sc, step_time_s=step_s))

    assert far > 0 and within > 0
    gap = 100.0 * within  # the LP at the edge of the window
    lp = 100.0 - gap
    assert floor_is_the_proof(lp, best_at(100.0 + far * gap), 100.0, TUNING)
    assert not floor_is_the_proof(lp, best_at(100.0 + 0.9 * far * gap), 100.0, TUNING)
    wider = 100.0 - 1.1 * gap  # outside the window, however far the best
    assert not floor_is_the_proof(wider, best_at(1e9), 100.0, TUNING)
    assert not floor_is_the_proof(lp, best_at(100.0), 100.0, TUNING)  # its own bound
    assert not floor_is_the_proof(100.0, best_at(200.0), 100.0, TUNING)  # settled already
    assert not floor_is_the_proof(lp, None, 100.0, TUNING)
    never = replace(TUNING, lp_separate_far=0.0)
    assert not floor_is_the_proof(lp, best_at(1e9), 100.0, never)


def test_far_first_call_separation_matches_the_oracle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first call whose own separation budget is one solve, its only hint the slowest
    partition that fits, no LP rounds (they would find better ones), the LP's window wide open
    (these small cases' LP lies up to 11 % below), its bound just above the oracle's optimum:
    where that hint lies far enough above the bound for the LP's gap below it, separate_lp
    gets lp_separate_solves (checked to happen), and every case still finds the oracle's
    optimum, its floor at most the optimum (fails if those solves prove a floor 1 % too
    high)."""
    budgets: list[int] = []
    inner = exact.separate_lp

    def counted(*args: object, **kwargs: object) -> object:
        budgets.append(args[4])  # type: ignore[arg-type]
        return inner(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(exact, "separate_lp", counted)
    for seed in range(40):
        _, inputs = three_mode_case(7700, seed)
        oracle = exhaustive_config(inputs, modes=THREE).best
        if oracle is None:
            continue
        fits = [sc for sc in scored_partitions(inputs, modes=THREE) if sc.score.feasible]
        slowest = max(fits, key=lambda sc: sc.score.step_time_s)
        one = num_actions(schedule_of(inputs)) + inputs.num_stages * inputs.num_layers
        tuning = replace(TUNING, lp_action_budget=one, lp_rounds=0, lp_separate_far_within=1.0)
        assert separate_solves(inputs, tuning, hard=False) == 1
        bound = oracle.score.step_time_s * (1 + 1e-3)
        res = solve_config(
            inputs,
            modes=THREE,
            bound_s=bound,
            known=Known(scored_hints=(slowest,)),
            tuning=tuning,
        )
        _assert_matches(res, oracle)
    assert TUNING.lp_separate_solves in budgets  # the criterion ran somewhere
