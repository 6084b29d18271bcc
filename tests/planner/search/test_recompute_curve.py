"""The memory-forced recompute of the whole-layer floors is exact over whole layers: checked
against every mode assignment, and the floors built on it stay below the exhaustive optimum
when all three recompute modes differ."""

from __future__ import annotations

import itertools
import random

import pytest

from planner.search.bounds import (
    cut_floor_s,
    integer_curve,
    integer_rank_floors_s,
    least_recompute,
    mode_options,
    time_floor_s,
    water_fill,
)
from planner.search.exhaustive import exhaustive_config

from .cases import THREE, path_cuts, three_mode_case


def brute_force(need: float, levels: tuple[int, ...], modes: list[tuple[float, float]]) -> float:
    """Every assignment of a mode (or the base, saving nothing) to every layer."""
    best = float("inf")
    for choice in itertools.product(range(len(modes) + 1), repeat=len(levels)):
        saved = cost = 0.0
        for level, k in zip(levels, choice, strict=True):
            if k:
                saved += level * modes[k - 1][0]
                cost += modes[k - 1][1]
        if saved >= need * (1 - 1e-12):
            best = min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(200))
def test_least_recompute_equals_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    levels = tuple(sorted((rng.randint(1, 6) for _ in range(rng.randint(1, 6))), reverse=True))
    raw = tuple((rng.uniform(0.1, 3.0), rng.uniform(0.0, 2.0)) for _ in range(rng.randint(1, 2)))
    options = mode_options(raw)
    most = sum(levels) * max(d for d, _ in raw)
    need = rng.uniform(-1.0, most * 1.1)
    expected = brute_force(need, levels, list(raw))
    prefix = list(itertools.accumulate(levels, initial=0))
    got = least_recompute(need, prefix, len(levels), options)
    if expected == float("inf"):
        assert got == float("inf")
    else:
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", range(100))
def test_recompute_curve_is_nondecreasing_and_brute_force(seed: int) -> None:
    """The water-filling that uses the curve reads it lazily and needs it nondecreasing in x
    (bounds._Curve): check both that and each value against every mode assignment."""
    rng = random.Random(7000 + seed)
    fixed = tuple(sorted((rng.randint(2, 6) for _ in range(rng.randint(0, 3))), reverse=True))
    least = rng.randint(1, min(fixed, default=6))
    raw = tuple((rng.uniform(0.1, 3.0), rng.uniform(0.0, 2.0)) for _ in range(rng.randint(1, 2)))
    per_free = rng.uniform(max(d for d, _ in raw) * least, 4.0 * least * 3.0)
    need0 = rng.uniform(-10.0, 10.0)
    top = rng.randint(0, 6)
    curve = integer_curve(need0, per_free, fixed, least, mode_options(raw), top, 0)
    values = [curve[x] for x in range(len(curve))]
    assert len(values) == top + 1
    assert all(a <= b for a, b in itertools.pairwise(values))
    for x, got in enumerate(values):
        expected = brute_force(need0 + x * per_free, (*fixed, *([least] * x)), list(raw))
        if expected == float("inf"):
            assert got == float("inf")
        else:
            assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", range(40))
def test_three_mode_floors_never_exceed_the_optimum(seed: int) -> None:
    _, inputs = three_mode_case(4000, seed)
    best = exhaustive_config(inputs, modes=THREE).best
    if best is None:
        return
    step = best.score.step_time_s
    floors = integer_rank_floors_s(inputs, per_stage=True)
    assert floors is not None
    assert floors[0] + floors[1] <= step * (1 + 1e-12)
    assert time_floor_s(inputs) <= step * (1 + 1e-12)
    floor = cut_floor_s(inputs, path_cuts(inputs, scores=(best.score,)))
    assert floor is not None and floor <= step * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(200))
def test_water_filling_from_a_warm_start_gives_the_plain_greedys_value(seed: int) -> None:
    """bounds.water_fill with an envelope (levels >= base + slope x) starts each rank at its
    steps below a threshold: the same value as the greedy from zero, ties and all."""
    rng = random.Random(9100 + seed)
    pp = rng.randint(1, 6)
    size = rng.randint(1, 40)
    slope = rng.choice([0.5, 1.0, 2.0])
    base = [float(rng.randint(0, 20)) for _ in range(pp)]
    levels = []
    for r in range(pp):
        extra, values = 0.0, []
        for x in range(size):
            extra += rng.choice([0.0, 0.0, 0.0, slope, rng.uniform(0, 3)])  # ties are common
            values.append(base[r] + slope * x + extra)
        levels.append(values)
    total = rng.randint(0, pp * (size - 1))
    plain = water_fill(levels, total)
    assert water_fill(levels, total, (base, slope)) == plain
    assert water_fill(levels, total, ([b - 1.0 for b in base], slope)) == plain  # loose
