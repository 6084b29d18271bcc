"""The stage-split hill climbing (improve_config's climb, heuristic_phase's polished one) only
moves to feasible partitions that the simulator scores strictly faster, and the exact loop's
answer does not depend on it."""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest

from planner.cost import MODE_INDEX, PartitionInputs
from planner.schedules.ir import stage_to_rank
from planner.search.exact import (
    Scored,
    SolveLimits,
    heuristic_phase,
    improve_config,
    mode_moves,
    rank_shifts,
    solve_config,
)
from planner.search.exhaustive import exhaustive_config
from planner.search.hints import quick_partition
from planner.search.partition import Partition, score
from planner.search.tuning import TUNING
from planner.specs.base import ScheduleName

from .cases import MODES, THREE, collector, gpt_case, mixed_case, pipeline_inputs


@pytest.mark.parametrize("seed", range(15))
def test_descend_improves_strictly_and_keeps_the_optimum(seed: int) -> None:
    _, inputs = gpt_case(4100, seed)
    start = quick_partition(inputs, MODES)
    # the hint scored, then the partitions the climb moved through
    first, *climb = improve_config(inputs, modes=MODES, hints=(start,))
    assert first.partition == start
    prev = first.score.step_time_s if first.score.feasible else float("inf")
    for step in climb:
        again = score(inputs, step.partition)  # re-scored independently
        assert again.feasible
        assert again.step_time_s == step.score.step_time_s < prev
        prev = step.score.step_time_s
    oracle = exhaustive_config(inputs, modes=MODES).best
    got = solve_config(inputs, modes=MODES, hints=(start,), limits=SolveLimits(workers=1)).best
    assert (oracle is None) == (got is None)
    if oracle is not None and got is not None:
        assert got.score.step_time_s == pytest.approx(oracle.score.step_time_s, rel=1e-9)


def test_improve_config_climbs_only_from_hints_near_the_bound() -> None:
    """With a bound (the incumbent), the climb runs from a best hint at most
    tuning.descend_within above it and not from one further off; without one it always runs."""
    climbed = 0
    for seed in range(30):
        _, inputs = gpt_case(4200, seed)
        start = quick_partition(inputs, MODES)
        free = improve_config(inputs, modes=MODES, hints=(start,))
        if len(free) < 2:  # infeasible, or no move improves it: nothing to tell apart
            continue
        climbed += 1
        hint = free[0].score.step_time_s
        near = improve_config(
            inputs, modes=MODES, hints=(start,), bound_s=hint / (1 + TUNING.descend_within)
        )
        assert [sc.partition for sc in near] == [sc.partition for sc in free]
        far = hint / (1 + TUNING.descend_within) / 1.001
        assert [
            sc.partition for sc in improve_config(inputs, modes=MODES, hints=(start,), bound_s=far)
        ] == [start]
    assert climbed >= 3  # the cases exercise the climb (4 of these 30 seeds climb)


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
    moves = rank_shifts(start, rank_of)
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
    assert rank_shifts(Partition((0, 2, 4), ("none",) * 4), (0, 1)) == []  # one chunk each


@pytest.mark.parametrize("seed", range(20))
def test_mode_moves_change_one_rank_by_one_mode_per_layer(seed: int) -> None:
    """Each mode move keeps the split; the layers it changes lie on one rank, each moves one
    mode, at most TUNING.mode_lighter of them lighter (all in one stage) and the rest heavier."""
    rng, inputs = mixed_case(41_000, seed)
    order = sorted(THREE, key=lambda m: MODE_INDEX[m])
    n = inputs.num_layers
    cuts = sorted(rng.sample(range(1, n), inputs.num_stages - 1))
    start = Partition((0, *cuts, n), tuple(rng.choice(THREE) for _ in range(n)))
    stage = [s for s in range(inputs.num_stages) for _ in start.stage_layers(s)]
    moves = mode_moves(start, inputs.stage_rank, THREE)
    assert moves or all(m == "none" for m in start.modes)  # something to lighten: moves
    for move in moves:
        assert move.bounds == start.bounds and move.modes != start.modes
        diff = {
            i: order.index(move.modes[i]) - order.index(start.modes[i])
            for i in range(n)
            if move.modes[i] != start.modes[i]
        }
        assert set(diff.values()) <= {-1, 1}
        assert len({inputs.stage_rank[stage[i]] for i in diff}) == 1
        lighter = [i for i, d in diff.items() if d == -1]
        assert 1 <= len(lighter) <= TUNING.mode_lighter and len({stage[i] for i in lighter}) == 1


def _memory_bound_pipeline(rng: random.Random) -> PartitionInputs:
    """A GPT-shaped zbv or interleaved pipeline (3-4 ranks, 2 chunks each, 12-40 equal
    blocks) whose cap forces recompute on every rank: where the polish's moves matter."""
    schedule: ScheduleName = rng.choice(["zbv", "interleaved-1f1b"])
    pp, vpp = rng.choice([3, 4]), 2
    blocks = rng.randint(3, 5) * pp * vpp // 2 * 2
    n, m = blocks + 2, rng.choice([2 * pp, 4 * pp])
    f, b, w, a = (rng.uniform(0.5, 1.0), rng.uniform(0.5, 1.0), rng.uniform(0.4, 0.8), 1.5)
    act = ((0.1,) * 3, *([(a, a * rng.uniform(0.3, 0.6), a * 0.1)] * blocks), (0.5,) * 3)
    bw_in = ((0.1,) * 3, *([(b, b * rng.uniform(1.02, 1.1), b * 1.4)] * blocks), (0.5,) * 3)
    inputs = pipeline_inputs(
        schedule,
        pp,
        vpp,
        m,
        fw=(0.1, *([f] * blocks), 0.5),
        bw_input=bw_in,
        bw_weight=(0.05, *([w] * blocks), 0.3),
        p2p=(0.01,) * n,
        act=act,
        static=(1.0,) * n,
        post=(0.0,) * n,
        cap=0.0,  # set below, from the in-flight counts
        modes=THREE,
    )
    total = sum(x[0] * max(inputs.inflight) for x in act) + n
    return dataclasses.replace(inputs, cap_bytes=1.0 + total / pp * rng.uniform(0.3, 0.7))


def _polished(inputs: PartitionInputs, first: Scored) -> list[Scored]:
    """The partitions the polished climb from `first` moves through: heuristic_phase with
    `polish` (what solve_config runs for a new incumbent), after the hint it considers."""
    col = collector(inputs, [])
    heuristic_phase(col, THREE, "any", (first,), descend=False, polish=True, time_left=None)
    return col.result.evaluated[1:]


def test_polish_finds_partitions_the_plain_climb_misses() -> None:
    """The polished climb moves strictly downhill to feasible partitions like the plain
    climb, and on memory-bound pipelines often ends faster than it (8 of 40 here: the moves
    are not dead code). Optimality does not depend on it (solve_config's proof does not)."""
    better = tried = 0
    for seed in range(40):
        inputs = _memory_bound_pipeline(random.Random(43_000 + seed))
        start = quick_partition(inputs, THREE)
        first = Scored(start, score(inputs, start))
        if not first.score.feasible:
            continue
        tried += 1
        plain = min(
            improve_config(inputs, modes=THREE, hints=(start,)), key=lambda sc: sc.score.step_time_s
        )
        prev = first.score.step_time_s
        for step in _polished(inputs, first):
            again = score(inputs, step.partition)
            assert again.feasible and again.step_time_s == step.score.step_time_s < prev
            prev = step.score.step_time_s
        better += prev < plain.score.step_time_s * (1 - 1e-12)
    assert tried >= 30 and better >= 3, (better, tried)
