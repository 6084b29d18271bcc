"""The stage-split hill climbing (exact._descend) only moves to feasible partitions that the
simulator scores strictly faster, and the exact loop's answer does not depend on it."""

from __future__ import annotations

import itertools
import random

import pytest

from planner.schedules.ir import stage_to_rank
from planner.search.exact import Scored, _descend, _rank_shifts, solve_config
from planner.search.exhaustive import exhaustive_config
from planner.search.hints import quick_partition
from planner.search.partition import Partition, score
from planner.specs.base import ScheduleName
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


@pytest.mark.parametrize(
    ("schedule", "pp", "vpp"), [("zbv", 2, 2), ("zbv", 5, 2), ("interleaved-1f1b", 4, 3)]
)
def test_rank_shifts_keep_every_rank_total_and_move_one_layer_per_rank(
    schedule: ScheduleName, pp: int, vpp: int
) -> None:
    """Each move takes one layer from a chunk of some ranks to the next or previous chunk of
    the same ranks: rank totals are unchanged, every stage keeps a layer, and the counts
    change by exactly -1 and +1 on each moved rank, on stages one chunk apart."""
    rank_of = tuple(stage_to_rank(s, pp=pp, schedule=schedule) for s in range(pp * vpp))
    chunk = {
        s: sorted(t for t in range(pp * vpp) if rank_of[t] == rank_of[s]).index(s)
        for s in range(pp * vpp)
    }
    rng = random.Random(pp * 10 + vpp)
    counts = [rng.randint(1, 4) for _ in rank_of]
    start = Partition(tuple(itertools.accumulate(counts, initial=0)), ("none",) * sum(counts))
    moves = _rank_shifts(start, rank_of)
    assert moves, "a split with layers to spare has shifts"
    for move in moves:
        new = [move.bounds[s + 1] - move.bounds[s] for s in range(len(counts))]
        assert min(new) >= 1 and move.bounds[-1] == start.bounds[-1]
        for r in range(pp):
            stages = [s for s in range(len(counts)) if rank_of[s] == r]
            assert sum(new[s] for s in stages) == sum(counts[s] for s in stages)
            changed = {s: new[s] - counts[s] for s in stages if new[s] != counts[s]}
            if changed:
                assert sorted(changed.values()) == [-1, 1]
                a, b = changed
                assert abs(chunk[a] - chunk[b]) == 1
    assert _rank_shifts(Partition((0, 2, 4), ("none",) * 4), (0, 1)) == []  # one chunk each
