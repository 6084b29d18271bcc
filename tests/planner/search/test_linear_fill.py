"""bounds.linear_fill (water-filling linear levels from the fractional water level) against the
step-by-step greedy of bounds.water_fill on the same levels, many with ties."""

from __future__ import annotations

import random

import pytest

from planner.search.bounds import linear_fill, water_fill


@pytest.mark.parametrize("seed", range(300))
def test_linear_fill_equals_the_greedy(seed: int) -> None:
    rng = random.Random(31_000 + seed)
    pp = rng.randint(1, 12)
    total = rng.randint(0, 60)
    if seed % 2:  # whole numbers: many equal steps
        slope = float(rng.randint(0, 3))
        base = [float(rng.randint(0, 10)) for _ in range(pp)]
    else:
        slope = rng.uniform(0.0, 2.0)
        base = [rng.uniform(0.0, 30.0) for _ in range(pp)]
    levels = [lambda x, b=b: b + slope * x for b in base]
    explicit = [[f(x) for x in range(total + 1)] for f in levels]
    assert linear_fill(levels, slope, total) == water_fill(explicit, total)
