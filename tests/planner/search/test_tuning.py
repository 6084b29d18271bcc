"""SearchTuning: validated on construction, passed down by run_search, never changes what is
proven (only how soon)."""

from __future__ import annotations

import random

import pytest

from planner.search import run_search
from planner.search.tuning import SearchTuning
from planner.specs.request import PlanRequest

from .random_requests import random_request, solve_in_mode

# every optional phase off: the floors and CP-SAT alone must still prove the same optimum
BARE = SearchTuning(lp_rounds=0, probe_solves=0, branch_solves=0, descend_rounds=0)


def _proves_the_oracles_optimum(request: PlanRequest, tuning: SearchTuning) -> None:
    """run_search with `tuning` ends OPTIMAL at the exhaustive oracle's optimum (or finds
    nothing where the oracle finds nothing), and its Outcome carries the tuning it was given."""
    oracle = solve_in_mode(request, "exhaustive")
    out = run_search(request, tuning=tuning)
    assert out.tuning is tuning
    if oracle is None:
        assert out.best is None
        return
    assert out.best is not None and out.status == "OPTIMAL"
    got = out.best[1].score.step_time_s
    assert got == pytest.approx(oracle.plan.prediction.step_time_s, rel=1e-9)


def test_a_share_outside_0_to_1_is_refused_with_its_value() -> None:
    with pytest.raises(ValueError, match=r"SearchTuning.sweep_share = 1.5 is not a share"):
        SearchTuning(sweep_share=1.5)
    with pytest.raises(ValueError, match=r"SearchTuning.lp_rounds = -1 is negative"):
        SearchTuning(lp_rounds=-1)
    with pytest.raises(ValueError, match=r"SearchTuning.gap_check_share = 0.0 is not in"):
        SearchTuning(gap_check_share=0.0)  # each check waits its cost / the share


@pytest.mark.parametrize("seed", range(4))
def test_the_optimum_does_not_depend_on_the_tuning(seed: int) -> None:
    _proves_the_oracles_optimum(random_request(random.Random(7_100 + seed)), BARE)


# the cutting-plane rounds stop after their second solve wherever they are run
STALLING = SearchTuning(lp_stall=1.0, lp_stall_within=10.0)


@pytest.mark.parametrize("seed", range(4))
def test_the_optimum_does_not_depend_on_the_lp_stall(seed: int) -> None:
    _proves_the_oracles_optimum(random_request(random.Random(7_200 + seed)), STALLING)


# no branching in the incumbent's own configuration (the other configurations branch as usual):
# its proof is left to CP-SAT from the probing's domains
NO_OWN_BRANCHING = SearchTuning(branch_solves_own=0)


def test_the_own_branching_cap_is_a_count() -> None:
    with pytest.raises(ValueError, match=r"SearchTuning.branch_solves_own = -1 is negative"):
        SearchTuning(branch_solves_own=-1)


@pytest.mark.parametrize("seed", range(4))
def test_the_optimum_does_not_depend_on_the_own_branching_cap(seed: int) -> None:
    _proves_the_oracles_optimum(random_request(random.Random(7_300 + seed)), NO_OWN_BRANCHING)


# the far pass at once (driver._far_pass: every configuration more than 0 % behind the
# incumbent gets its cheap phases, then its proof) and separate_lp on every reopened one
FAR = SearchTuning(far_share=0.0, far_within=0.0)


@pytest.mark.parametrize("seed", range(8))
def test_the_far_pass_proves_the_same_optimum(seed: int) -> None:
    _proves_the_oracles_optimum(random_request(random.Random(7_400 + seed)), FAR)
