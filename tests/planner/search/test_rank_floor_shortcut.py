"""bounds.integer_rank_floors_s returns the plain (no-recompute) busy floor where no rank needs
recompute at its share of the plain optimum, without water-filling the recompute levels: its
values must equal the least max of the busy levels over every integer placement of the middle
layers (brute force over all placements here), on random GPT-shaped inputs whose caps make
some ranks recompute and others not."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from planner.cost import PartitionInputs
from planner.search.bounds import integer_rank_floors_s, rank_levels

from .cases import SCHEDULES, gpt_inputs, uniform_gpt_inputs


def _placements(total: int, ranks: int) -> Iterator[tuple[int, ...]]:
    """Every x >= 0 with len(x) == ranks and sum x == total."""
    for cuts in itertools.combinations(range(total + ranks - 1), ranks - 1):
        edges = (-1, *cuts, total + ranks - 1)
        yield tuple(edges[i + 1] - edges[i] - 1 for i in range(ranks))


def _brute_busy(inputs: PartitionInputs, per_stage: bool) -> tuple[float, bool]:
    """(least max busy level over every placement, whether the plain optimum's placements
    all need no recompute) of the rank levels."""
    levels = rank_levels(inputs, per_stage=per_stage)
    assert levels is not None
    wl = levels.whole
    best = min(
        max(f(x) for f, x in zip(levels.busy, xs, strict=True))
        for xs in _placements(wl.free, inputs.pp)
    )
    recompute = any(curve[wl.free] != 0.0 for curve in wl.extra)
    return best, recompute


def _cases() -> Iterator[tuple[int, PartitionInputs]]:
    for seed in range(60):
        rng = random.Random(4400 + seed)
        schedule, vpp = SCHEDULES[seed % len(SCHEDULES)]
        if seed % 2:
            yield seed, gpt_inputs(rng, schedule, vpp)
        else:
            pp = 2 if schedule in ("interleaved-1f1b", "zbv") else rng.choice([2, 3])
            yield seed, uniform_gpt_inputs(rng, schedule, pp, vpp, rng.randint(pp * vpp, 10))


def test_busy_floor_is_the_least_max_over_placements() -> None:
    kinds = set()
    for (_seed, inputs), per_stage in itertools.product(_cases(), (True, False)):
        floors = integer_rank_floors_s(inputs, per_stage=per_stage)
        assert floors is not None
        best, recompute = _brute_busy(inputs, per_stage)
        assert floors[0] == best
        plain = integer_rank_floors_s(inputs, per_stage=per_stage, enough_s=0.0)
        assert plain is not None
        kinds.add((recompute, floors[0] == plain[0]))
    # the cases reach all three: no recompute, recompute that the plain share avoids, and
    # recompute that raises the floor
    assert (False, True) in kinds and (True, True) in kinds and (True, False) in kinds
