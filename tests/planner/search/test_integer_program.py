"""The integer program of the cutting-plane phase (planner.search.cutlp.CutLP(integer=True)).

Its rows are path cuts, per-rank post and memory over whole layer counts; every real partition
is a feasible point, so "infeasible under a cap" is a proof that no partition's step time is
below the cap. Checked against the exhaustive optimum on GPT-shaped inputs (where its solutions
are partitions) and on the heterogeneous random exactness set (where they may not be)."""

from __future__ import annotations

import random

import pytest

from planner.search.cutlp import CutLP
from planner.search.exact import solve_config
from planner.search.exhaustive import exhaustive_config
from planner.specs.base import RecomputeMode
from tests.planner.search.test_integer_floor import SCHEDULES, gpt_inputs, path_cuts
from tests.planner.search.test_recompute_curve import three_mode_inputs

THREE: tuple[RecomputeMode, ...] = ("none", "selective", "full")


@pytest.mark.parametrize("seed", range(40))
def test_the_optimum_is_never_cut_off(seed: int) -> None:
    rng = random.Random(11_000 + seed)
    schedule, vpp = SCHEDULES[seed % len(SCHEDULES)]
    inputs = three_mode_inputs(rng, schedule, vpp)
    best = exhaustive_config(inputs, modes=THREE).best
    scores = (best.score,) if best is not None else ()
    cuts = path_cuts(inputs, rng, random_partitions=6, scores=scores)
    ip = CutLP(inputs, THREE, integer=True)
    for cut in cuts:
        ip.add_cut(cut)
    if best is None:
        return
    step = best.score.step_time_s
    # the optimum itself satisfies every row: not infeasible at its own step time
    point = ip.solve_integer(step * (1 + 1e-6), time_limit_s=30)
    assert point.status == "feasible"
    # a GPT's solution is a partition: contiguous, non-empty stages, one mode per layer
    part = point.partition
    assert part is not None
    assert part.bounds[0] == 0 and part.bounds[-1] == inputs.num_layers
    assert all(a < b for a, b in zip(part.bounds, part.bounds[1:], strict=False))
    assert len(part.modes) == inputs.num_layers


@pytest.mark.parametrize("seed", range(24))
def test_a_settled_configuration_has_no_better_partition(seed: int) -> None:
    """solve_config with a bound: when the cutting planes (integer program first) settle it as
    BOUNDED, the exhaustive optimum is no better than the bound; OPTIMAL equals it."""
    rng = random.Random(12_000 + seed)
    schedule, vpp = SCHEDULES[seed % len(SCHEDULES)]
    inputs = gpt_inputs(rng, schedule, vpp)
    best = exhaustive_config(inputs, modes=THREE).best
    if best is None:
        return
    step = best.score.step_time_s
    for factor in (0.995, 1.0, 1.01):
        bound = step * factor
        res = solve_config(
            inputs, modes=THREE, bound_s=bound, time_limit_s=30, workers=1, neighbours=False
        )
        if res.status == "BOUNDED":
            assert step >= bound * (1 - 1e-9)
        else:
            assert res.status == "OPTIMAL" and res.best is not None
            assert res.best.score.step_time_s == pytest.approx(step, rel=1e-9)
