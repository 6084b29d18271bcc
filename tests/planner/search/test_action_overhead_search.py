"""With a nonzero per-action overhead (ModelProfile.action_overhead_s) the search stays exact:
the optimal mode equals the exhaustive oracle, the cut and LP floors stay below the optimum,
and a partition's own critical path bounds it tightly in the CP-SAT model."""

from __future__ import annotations

import dataclasses
import random

import pytest

from planner.search.bounds import cut_floor_s
from planner.search.exact import SolveLimits, horizon_s, solve_config
from planner.search.exhaustive import exhaustive_config
from planner.search.model import HORIZON_UNITS, PartitionModel
from planner.search.partition import durations_of, schedule_of, score
from planner.search.paths import critical_path
from planner.specs.model import ActionOverhead

from .cases import MODES, gpt_case, lp_floor, path_cuts, random_partition
from .random_requests import assert_agrees_with_exhaustive, random_request


def random_overhead(rng: random.Random, scale: float) -> ActionOverhead:
    return ActionOverhead(
        f_s=rng.uniform(0.05, 1.0) * scale,
        b_s=rng.uniform(0.05, 1.0) * scale,
        i_s=rng.uniform(0.05, 1.0) * scale,
        w_s=rng.uniform(0.05, 1.0) * scale,
    )


@pytest.mark.parametrize("seed", range(8))
def test_optimal_equals_exhaustive_with_overhead(seed: int) -> None:
    rng = random.Random(31_000 + seed)
    request = random_request(rng)
    profile = request.profile
    assert profile is not None
    # layer times are 0.5-2 x 1e-2 s: overheads of the same order change the optimum
    overhead = random_overhead(rng, 1e-2)
    profile = profile.model_copy(update={"action_overhead_s": overhead})
    assert_agrees_with_exhaustive(
        request.model_copy(update={"model": request.model.model_copy(update={"profile": profile})})
    )


@pytest.mark.parametrize("seed", range(15))
def test_config_solve_and_floors_with_overhead(seed: int) -> None:
    rng, base = gpt_case(32_000, seed)
    inputs = dataclasses.replace(base, action_overhead=random_overhead(rng, 1.0))
    oracle = exhaustive_config(inputs, modes=MODES).best
    got = solve_config(inputs, modes=MODES, limits=SolveLimits(time_limit_s=60, workers=1)).best
    assert (got is None) == (oracle is None)
    if oracle is None or got is None:
        return
    step = oracle.score.step_time_s
    assert got.score.step_time_s == pytest.approx(step, rel=1e-9)
    cuts = path_cuts(inputs, scores=(oracle.score,))
    floor = cut_floor_s(inputs, cuts)
    assert floor is not None and floor <= step * (1 + 1e-12)
    plain = cut_floor_s(base, cuts)
    assert plain is not None and floor > plain  # the overhead raises the floor
    lp = lp_floor(inputs, MODES, cuts)
    assert lp is None or lp <= step * (1 + 1e-6)


@pytest.mark.parametrize("seed", range(10))
def test_a_partitions_critical_path_bounds_it_tightly(seed: int) -> None:
    """After adding the critical path of a partition, the model's bound for that partition
    is its simulated step time, up to the floor rounding of each coefficient (one unit each):
    without the overhead's constant it would fall short by the path's overhead."""
    rng, base = gpt_case(33_000, seed)
    inputs = dataclasses.replace(base, action_overhead=random_overhead(rng, 1.0))
    n, n_st = inputs.num_layers, inputs.num_stages
    part = random_partition(rng, inputs)
    sc = score(inputs, part)
    model = PartitionModel(
        inputs, modes=MODES, horizon_s=horizon_s(inputs), reference_s=sc.step_time_s
    )
    _, cut = critical_path(schedule_of(inputs), durations_of(sc))
    assert cut.length_s(inputs.overhead_durations) > 0
    model.add_path_cut(cut)
    bound = model.lower_bound_units(part)
    exact = sc.step_time_s * model.scale
    assert bound <= exact
    assert bound >= exact - (4 * n + 2 * n_st + 2)  # rounding only
    assert model.top > HORIZON_UNITS  # T's domain holds the bound
