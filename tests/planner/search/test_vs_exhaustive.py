"""The optimal mode (CP-SAT + path cuts) agrees with the exhaustive oracle on random requests."""

from __future__ import annotations

import random

import pytest

from planner.errors import InfeasibleError
from planner.plan import PlanResult
from planner.specs import PlanRequest

from .random_requests import random_request

CASES = 24  # the full >= 200 run lives in bench/solver_vs_exhaustive.py


def _solve(request: PlanRequest, mode: str) -> PlanResult | None:
    from planner.search import search

    req = request.model_copy(update={"search": request.search.model_copy(update={"mode": mode})})
    try:
        return search(req)
    except InfeasibleError:
        return None


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(CASES))
def test_optimal_equals_exhaustive(seed: int) -> None:
    request = random_request(random.Random(7_000 + seed))
    best = _solve(request, "optimal")
    oracle = _solve(request, "exhaustive")
    assert (best is None) == (oracle is None), (best, oracle)
    if best is not None and oracle is not None:
        got, want = best.plan.prediction.step_time_s, oracle.plan.prediction.step_time_s
        assert got == pytest.approx(want, rel=1e-9)
        assert best.plan.prediction.feasible
        assert best.search.status == "OPTIMAL"


def test_the_random_set_mixes_feasible_and_infeasible() -> None:
    outcomes = [_solve(random_request(random.Random(7_000 + s)), "optimal") for s in range(CASES)]
    assert any(o is None for o in outcomes)
    assert any(o is not None for o in outcomes)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "torchtitan"])
@pytest.mark.parametrize("seed", range(6))
def test_framework_limits_agree_with_exhaustive(framework: str, seed: int) -> None:
    # Framework capabilities narrow schedules, ZeRO, recompute mixing and the stage split.
    request = random_request(random.Random(9_000 + seed))
    cons = request.constraints.model_copy(
        update={"framework": framework, "schedules": None, "zero_stages": None}
    )
    request = request.model_copy(update={"constraints": cons})
    best = _solve(request, "optimal")
    oracle = _solve(request, "exhaustive")
    assert (best is None) == (oracle is None)
    if best is not None and oracle is not None:
        got, want = best.plan.prediction.step_time_s, oracle.plan.prediction.step_time_s
        assert got == pytest.approx(want, rel=1e-9)
