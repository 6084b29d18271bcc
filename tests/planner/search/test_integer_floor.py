"""The whole-layer rank floors (bounds.integer_rank_floors_s) never exceed a configuration's
optimum: checked against the exhaustive oracle on GPT-shaped inputs (first layer, identical
middle layers, last layer) built directly, for every schedule kind."""

from __future__ import annotations

import random

import pytest

from planner.cost import PartitionInputs
from planner.search.bounds import (
    cut_floor_s,
    group_time_floor_s,
    integer_rank_floors_s,
    time_floor_s,
)
from planner.search.exhaustive import exhaustive_config

from .cases import MODES, gpt_case, gpt_inputs, path_cuts


@pytest.mark.parametrize("seed", range(40))
def test_integer_rank_floors_never_exceed_the_optimum(seed: int) -> None:
    _, inputs = gpt_case(9000, seed)
    floors = integer_rank_floors_s(inputs, per_stage=True)
    assert floors is not None  # GPT-shaped: the floor applies
    loose = integer_rank_floors_s(inputs, per_stage=False)
    assert loose is not None and loose[0] <= floors[0] and loose[1] <= floors[1]
    best = exhaustive_config(inputs, modes=MODES).best
    if best is None:
        return
    step = best.score.step_time_s
    assert floors[0] + floors[1] <= step * (1 + 1e-12)
    assert time_floor_s(inputs) <= step * (1 + 1e-12)
    assert group_time_floor_s(inputs) <= step * (1 + 1e-12)


def test_the_floor_counts_whole_layers() -> None:
    # 1F1B, pp = 2, 1 microbatch: first and last layer cost 0, three identical middle layers
    # of work 1 (fw 0.5 + bw 0.5): some rank holds two of them, so busy >= 2 (fractional: 1.5).
    inputs = PartitionInputs(
        schedule="1f1b",
        pp=2,
        vpp=1,
        num_microbatches=1,
        layer_names=("a", "b", "c", "d", "e"),
        fw_s=(0.0, 0.5, 0.5, 0.5, 0.0),
        bw_input_s=((0.0,) * 3, *([(0.5, 0.5, 0.5)] * 3), (0.0,) * 3),
        bw_weight_s=(0.0,) * 5,
        p2p_s=(0.0,) * 5,
        activation_bytes=((0.0,) * 3,) * 5,
        static_bytes=(0.0,) * 5,
        post_s=(0.0, 0.25, 0.25, 0.25, 0.0),
        inflight=(1, 1),
        stage_rank=(0, 1),
        fixed_bytes=0.0,
        cap_bytes=1.0,
        allowed_modes=("none",),
    )
    assert integer_rank_floors_s(inputs, per_stage=True) == pytest.approx((2.0, 0.5))
    assert exhaustive_config(inputs, modes=("none",)).best is not None


def test_heterogeneous_middle_layers_get_no_floor() -> None:
    inputs = gpt_inputs(random.Random(1), "1f1b", 1)
    fw = list(inputs.fw_s)
    fw[1] += 0.1
    other = PartitionInputs(**{**inputs.__dict__, "fw_s": tuple(fw)})
    assert integer_rank_floors_s(other, per_stage=True) is None


@pytest.mark.parametrize("seed", range(60))
def test_cut_floor_never_exceeds_the_optimum(seed: int) -> None:
    rng, inputs = gpt_case(7000, seed)
    result = exhaustive_config(inputs, modes=MODES)
    if result.best is None:
        return
    step = result.best.score.step_time_s
    cuts = path_cuts(inputs, rng, random_partitions=5, scores=(result.best.score,))
    floor = cut_floor_s(inputs, cuts)
    assert floor is not None
    assert floor <= step * (1 + 1e-12)
    assert floor >= integer_rank_floors_s(inputs, per_stage=True)[1]  # type: ignore[index]
