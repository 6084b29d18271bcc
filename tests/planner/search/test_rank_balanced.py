"""The rank-balanced hints (hints.rank_balanced): every rank holds the same number of the
largest run's layers (within one), its chunks as even as they can be, every stage non-empty;
and on 529.6B's winning configuration they reach the plan that the stage-balanced hints and
the hill climb miss."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from bench.megatron_table1 import DEFAULT_CASES, load_cases
from bench.search_speed import request_for
from planner.cost import PartitionInputs, balanced_bounds, partition_inputs, resolve_costs
from planner.search.exact import Scored, improve_config
from planner.search.hints import balanced, hint_partitions, quick_partition, rank_balanced, repaired
from planner.search.model import layer_runs
from planner.search.partition import score
from planner.search.space import enumerate_configs
from planner.specs.base import RecomputeMode, ScheduleName

from .cases import uniform_gpt_inputs

MODES: tuple[RecomputeMode, ...] = ("none", "selective", "full")


@pytest.mark.parametrize("seed", range(40))
def test_every_rank_holds_the_same_blocks_within_one(seed: int) -> None:
    rng = random.Random(7300 + seed)
    schedule: ScheduleName = rng.choice(["zbv", "interleaved-1f1b"])
    pp = rng.randint(2, 6)
    vpp = 2 if schedule == "zbv" else rng.randint(2, 4)
    blocks = rng.randint(pp * vpp - 2, 5 * pp * vpp)
    inputs = uniform_gpt_inputs(rng, schedule, pp, vpp, blocks)
    splits = rank_balanced(inputs)
    assert splits, "some split exists: at least as many layers as stages"
    # the levelled split (hints._levelled) gives the ranks of the end layers fewer blocks
    levelled = _levelled_counts(inputs, blocks, pp)
    for bounds in splits:
        if _rank_blocks(inputs, bounds, pp) == levelled:
            continue
        assert bounds[0] == 0 and bounds[-1] == inputs.num_layers
        assert all(a < b for a, b in itertools.pairwise(bounds)), bounds  # no empty stage
        counts = [b - a for a, b in itertools.pairwise(bounds)]
        # blocks per stage: the first and last stage also hold the embedding and the head
        held = [c - (s == 0) - (s == len(counts) - 1) for s, c in enumerate(counts)]
        per_rank = [0] * pp
        chunks: list[list[int]] = [[] for _ in range(pp)]
        for s, r in enumerate(inputs.stage_rank):
            per_rank[r] += held[s]
            chunks[r].append(held[s])
        assert sum(per_rank) == blocks
        assert max(per_rank) - min(per_rank) <= 1, per_rank
        assert all(max(c) - min(c) <= 1 for c in chunks), chunks
    # and they are among the hints
    hinted = {h.bounds for h in hint_partitions(inputs, MODES, None)}
    assert set(splits) <= hinted


def _rank_blocks(inputs: PartitionInputs, bounds: tuple[int, ...], pp: int) -> list[int]:
    counts = [b - a for a, b in itertools.pairwise(bounds)]
    held = [c - (s == 0) - (s == len(counts) - 1) for s, c in enumerate(counts)]
    per_rank = [0] * pp
    for s, r in enumerate(inputs.stage_rank):
        per_rank[r] += held[s]
    return per_rank


def _rank_work(inputs: PartitionInputs, counts: list[int]) -> float:
    """The largest rank work (fw + cheapest backward + weight pass) with `counts` blocks per
    rank and the embedding and head on the ranks of the first and last stage."""

    def work(i: int) -> float:
        return inputs.fw_s[i] + min(inputs.bw_input_s[i]) + inputs.bw_weight_s[i]

    ends = [0.0] * len(counts)
    ends[inputs.stage_rank[0]] += work(0)
    ends[inputs.stage_rank[-1]] += work(inputs.num_layers - 1)
    return max(e + n * work(1) for e, n in zip(ends, counts, strict=True))


def _levelled_counts(inputs: PartitionInputs, blocks: int, pp: int) -> list[int]:
    """Blocks per rank of least _rank_work, by moving one block between two ranks from the
    equal split while that lowers it (a local search, not the hint's water-filling)."""
    q, rem = divmod(blocks, pp)
    counts = [q + (r < rem) for r in range(pp)]
    improved = True
    while improved:
        improved = False
        for a, b in itertools.permutations(range(pp), 2):
            trial = counts.copy()
            trial[a] -= 1
            trial[b] += 1
            if trial[a] >= 0 and _rank_work(inputs, trial) < _rank_work(inputs, counts) - 1e-12:
                counts, improved = trial, True
    return counts


@pytest.mark.parametrize("seed", range(20))
def test_levelled_split_reaches_the_least_largest_rank_work(seed: int) -> None:
    rng = random.Random(9100 + seed)
    pp = rng.randint(2, 6)
    blocks = rng.randint(2 * pp, 5 * pp)
    inputs = uniform_gpt_inputs(rng, "zbv", pp, 2, blocks)
    want = _rank_work(inputs, _levelled_counts(inputs, blocks, pp))
    got = min(_rank_work(inputs, _rank_blocks(inputs, b, pp)) for b in rank_balanced(inputs))
    assert got <= want + 1e-12, (got, want)


def test_none_for_one_stage_per_rank() -> None:
    inputs = uniform_gpt_inputs(random.Random(1), "1f1b", 4, 1, 12)
    assert rank_balanced(inputs) == []
    assert layer_runs(inputs)[1].count == 12


@pytest.mark.skipif(not Path(DEFAULT_CASES).exists(), reason="../shared/cases is not here")
def test_529b_winner_is_reached_only_through_the_rank_balanced_hints() -> None:
    """529.6B's tp = 4 pp = 21 zbv (105 blocks, 42 stages): the stage-balanced hints give
    ranks 0 and 20 six blocks, and the hill climb from them stops over 15 % slower than the
    rank-balanced hint (five blocks per rank), which it cannot reach by one-boundary moves."""
    case = next(c for c in load_cases(DEFAULT_CASES) if c["name"] == "megatron-gpt-529.6b")
    req = request_for(case, 30)
    src = resolve_costs(req)
    n = len(src.layers)
    cfg = next(
        c
        for c in enumerate_configs(req, num_layers=n)
        if (c.tp, c.pp, c.schedule, c.micro_batch_size, c.zero_stage) == (4, 21, "zbv", 1, 1)
    )
    inputs = partition_inputs(req, cfg.candidate(), source=src)
    ranked = set(rank_balanced(inputs))
    extra = (*(lo for lo, _ in balanced_bounds(n, inputs.num_stages)), n)
    hints = hint_partitions(inputs, cfg.modes, extra)
    stage_only = tuple(h for h in hints if h.bounds not in ranked)
    assert len(stage_only) < len(hints)

    def best(found: list[Scored]) -> float:
        return min(sc.score.step_time_s for sc in found if sc.score.feasible)

    with_ranks = best(improve_config(inputs, modes=cfg.modes, hints=hints))
    without = best(improve_config(inputs, modes=cfg.modes, hints=stage_only))
    assert without > 1.15 * with_ranks, (without, with_ranks)


@pytest.mark.parametrize("seed", range(10))
def test_quick_partition_with_chunks_gives_every_rank_the_same_blocks(seed: int) -> None:
    # uniform blocks, several stages per rank: the ranks' block counts differ by at most one
    # (a stage-balanced split gives the ranks holding the embedding and the loss fewer)
    rng = random.Random(4400 + seed)
    pp = rng.randint(2, 6)
    for schedule, vpp in (("zbv", 2), ("interleaved-1f1b", 3)):
        blocks = rng.randint(pp * vpp, 4 * pp * vpp)
        inputs = uniform_gpt_inputs(rng, schedule, pp, vpp, blocks)
        per_rank = _rank_blocks(inputs, quick_partition(inputs, MODES).bounds, pp)
        assert sum(per_rank) == blocks and max(per_rank) - min(per_rank) <= 1, per_rank


@pytest.mark.skipif(not Path(DEFAULT_CASES).exists(), reason="../shared/cases is not here")
def test_529b_winner_quick_partition_beats_the_balanced_split() -> None:
    """The sweep's quick partition of 529.6B's tp = 4 pp = 21 zbv: rank-balanced, over 10 %
    faster than the stage-balanced split repaired (which gives ranks 0 and 20 six blocks)."""
    case = next(c for c in load_cases(DEFAULT_CASES) if c["name"] == "megatron-gpt-529.6b")
    req = request_for(case, 30)
    src = resolve_costs(req)
    cfg = next(
        c
        for c in enumerate_configs(req, num_layers=len(src.layers))
        if (c.tp, c.pp, c.schedule, c.micro_batch_size, c.zero_stage) == (4, 21, "zbv", 1, 1)
    )
    inputs = partition_inputs(req, cfg.candidate(), source=src)
    quick = score(inputs, quick_partition(inputs, cfg.modes))
    stage = score(inputs, repaired(inputs, balanced(inputs, "none").bounds, cfg.modes))
    assert quick.feasible and stage.feasible
    assert stage.step_time_s > 1.1 * quick.step_time_s, (stage.step_time_s, quick.step_time_s)
