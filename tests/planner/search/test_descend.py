"""The stage-split hill climbing (exact._descend) only moves to feasible partitions that the
simulator scores strictly faster, and the exact loop's answer does not depend on it."""

from __future__ import annotations

import random

import pytest

from planner.search.exact import Scored, _descend, solve_config
from planner.search.exhaustive import exhaustive_config
from planner.search.hints import quick_partition
from planner.search.partition import score
from tests.planner.search.test_integer_floor import MODES, SCHEDULES, gpt_inputs


@pytest.mark.parametrize("seed", range(15))
def test_descend_improves_strictly_and_keeps_the_optimum(seed: int) -> None:
    rng = random.Random(4100 + seed)
    schedule, vpp = SCHEDULES[seed % len(SCHEDULES)]
    inputs = gpt_inputs(rng, schedule, vpp)
    start = quick_partition(inputs, MODES)
    first = Scored(start, score(inputs, start))
    prev = first.score.step_time_s if first.score.feasible else float("inf")
    for step in _descend(inputs, first, MODES):
        again = score(inputs, step.partition)  # re-scored independently
        assert again.feasible
        assert again.step_time_s == step.score.step_time_s < prev
        prev = step.score.step_time_s
    oracle = exhaustive_config(inputs, modes=MODES).best
    got = solve_config(inputs, modes=MODES, hints=(start,), workers=1).best
    assert (oracle is None) == (got is None)
    if oracle is not None and got is not None:
        assert got.score.step_time_s == pytest.approx(oracle.score.step_time_s, rel=1e-9)
