"""The cutting-plane LP: rounding its fractional split always gives a valid split, and the LP
kept between solves gives the same floor as one built with all the cuts at once."""

from __future__ import annotations

import itertools
import random

import pytest

from planner.search.cutlp import CutLP, rounded_bounds
from planner.search.exhaustive import exhaustive_config
from planner.search.partition import durations_of, schedule_of, score
from planner.search.paths import critical_path, seed_cuts

from .cases import MODES, SCHEDULES, THREE, gpt_inputs, random_partition, three_mode_inputs


@pytest.mark.parametrize("seed", range(100))
def test_rounded_bounds_are_a_valid_split(seed: int) -> None:
    rng = random.Random(seed)
    n_st = rng.randint(1, 12)
    n = rng.randint(n_st, 40)
    weights = [rng.random() + (5.0 if rng.random() < 0.2 else 0.0) for _ in range(n_st)]
    layers = tuple(w * n / sum(weights) for w in weights)
    bounds = rounded_bounds(layers, n)
    assert bounds[0] == 0 and bounds[-1] == n and len(bounds) == n_st + 1
    assert all(a < b for a, b in itertools.pairwise(bounds))


@pytest.mark.parametrize("seed", range(30))
def test_incremental_lp_floor_is_a_floor_and_matches_a_fresh_one(seed: int) -> None:
    rng = random.Random(500 + seed)
    schedule, vpp = SCHEDULES[seed % len(SCHEDULES)]
    inputs = gpt_inputs(rng, schedule, vpp)
    sched = schedule_of(inputs)
    cuts = seed_cuts(sched)
    lp = CutLP(inputs, MODES)
    for cut in cuts:
        lp.add_cut(cut)
    first = lp.solve()
    for _ in range(4):  # cuts added after a solve, as the cutting-plane phase does
        part = random_partition(rng, inputs)
        cut = critical_path(sched, durations_of(score(inputs, part)))[1]
        cuts.append(cut)
        lp.add_cut(cut)
    later = lp.solve()
    fresh = CutLP(inputs, MODES)
    for cut in cuts:
        fresh.add_cut(cut)
    again = fresh.solve()
    best = exhaustive_config(inputs, modes=MODES).best
    if best is None:
        return  # nothing fits: the LP may say anything (or be infeasible)
    assert first is not None and later is not None and again is not None
    assert first.value_s <= later.value_s * (1 + 1e-9)
    assert later.value_s == pytest.approx(again.value_s, rel=1e-7)
    assert later.value_s <= best.score.step_time_s * (1 + 1e-6)


@pytest.mark.parametrize("seed", range(30))
def test_lp_memory_rows_cut_off_no_partition_that_fits(seed: int) -> None:
    """Three recompute modes and caps that force recompute (the CP-SAT rows' cases,
    test_transient_rows): the LP's floor stays at or below the oracle's optimum (a memory row
    that charged more than the scorer, e.g. the recompute transient in full, would cut off
    the optimum)."""
    rng = random.Random(4300 + seed)
    schedule, vpp = SCHEDULES[seed % len(SCHEDULES)]
    inputs = three_mode_inputs(rng, schedule, vpp)
    lp = CutLP(inputs, THREE, cuts=seed_cuts(schedule_of(inputs)))
    floor = lp.solve()
    best = exhaustive_config(inputs, modes=THREE).best
    assert floor is not None
    if best is None:
        return
    assert floor.value_s <= best.score.step_time_s * (1 + 1e-6)
