"""The whole-layer rank floors (bounds.integer_rank_floors_s) never exceed a configuration's
optimum: checked against the exhaustive oracle on GPT-shaped inputs (first layer, identical
middle layers, last layer) built directly, for every schedule kind."""

from __future__ import annotations

import random

import pytest

from planner.cost import PartitionInputs, PartitionScore
from planner.schedules import generate, peak_inflight, rank_held_points
from planner.schedules.ir import stage_to_rank
from planner.search.bounds import (
    cut_floor_s,
    group_time_floor_s,
    integer_rank_floors_s,
    time_floor_s,
)
from planner.search.exhaustive import exhaustive_config
from planner.search.partition import Partition, durations_of, schedule_of, score
from planner.search.paths import PathCut, critical_path, seed_cuts
from planner.specs.base import RecomputeMode, ScheduleName

SCHEDULES: list[tuple[ScheduleName, int]] = [
    ("gpipe", 1),
    ("1f1b", 1),
    ("zb-h1", 1),
    ("interleaved-1f1b", 2),
    ("zbv", 2),
]
MODES: tuple[RecomputeMode, ...] = ("none", "full")


def pipeline_inputs(
    schedule: ScheduleName,
    pp: int,
    vpp: int,
    m: int,
    *,
    fw: tuple[float, ...],
    bw_input: tuple[tuple[float, float, float], ...],
    bw_weight: tuple[float, ...],
    p2p: tuple[float, ...],
    act: tuple[tuple[float, float, float], ...],
    static: tuple[float, ...],
    post: tuple[float, ...],
    cap: float,
    modes: tuple[RecomputeMode, ...],
    fixed: float = 1.0,
) -> PartitionInputs:
    """PartitionInputs of the given per-layer numbers on a real schedule: its in-flight
    counts, held points and stage ranks come from planner.schedules (the tests' one
    constructor)."""
    sched = generate(schedule, pp=pp, vpp=vpp, num_microbatches=m)
    return PartitionInputs(
        schedule=schedule,
        pp=pp,
        vpp=vpp,
        num_microbatches=m,
        layer_names=tuple(f"l{i}" for i in range(len(fw))),
        fw_s=fw,
        bw_input_s=bw_input,
        bw_weight_s=bw_weight,
        p2p_s=p2p,
        activation_bytes=act,
        static_bytes=static,
        post_s=post,
        inflight=peak_inflight(sched),
        stage_rank=tuple(stage_to_rank(s, pp=pp, schedule=schedule) for s in range(pp * vpp)),
        fixed_bytes=fixed,
        cap_bytes=cap,
        allowed_modes=modes,
        held_points=rank_held_points(sched),
    )


def gpt_inputs(rng: random.Random, schedule: ScheduleName, vpp: int) -> PartitionInputs:
    pp = rng.choice([1, 2, 3]) if schedule not in ("interleaved-1f1b", "zbv") else 2
    n = rng.randint(max(3, pp * vpp), 7)
    m = rng.choice([pp, 2 * pp, 4])
    if schedule == "interleaved-1f1b" and m % max(1, m // pp):
        m = pp

    def layer() -> tuple[float, tuple[float, float, float], float, float, float]:
        bw = rng.uniform(0.1, 2.0)
        return (
            rng.uniform(0.1, 2.0),
            (bw, bw, bw * 1.3),
            rng.uniform(0, 1),
            rng.uniform(0, 0.5),
            rng.uniform(0, 3.0),
        )

    ends = [layer(), layer()]
    block = layer()
    rows = [ends[0], *([block] * (n - 2)), ends[1]]
    act = tuple((a, a, a * 0.3) for a in (rng.uniform(1, 4) for _ in range(n)))
    act = (act[0], *([act[1]] * (n - 2)), act[-1])
    static = (rng.uniform(1, 5), *([rng.uniform(1, 5)] * (n - 2)), rng.uniform(1, 5))
    return pipeline_inputs(
        schedule,
        pp,
        vpp,
        m,
        fw=tuple(r[0] for r in rows),
        bw_input=tuple(r[1] for r in rows),
        bw_weight=tuple(r[2] for r in rows),
        p2p=tuple(r[3] for r in rows),
        act=act,
        static=static,
        post=tuple(r[4] for r in rows),
        cap=rng.choice([1e9, 30.0, 60.0]),
        modes=MODES,
    )


def random_partition(rng: random.Random, inputs: PartitionInputs) -> Partition:
    """Random stage boundaries and a random recompute mode per layer."""
    n, n_st = inputs.num_layers, inputs.num_stages
    bounds = (0, *sorted(rng.sample(range(1, n), n_st - 1)), n)
    return Partition(bounds, tuple(rng.choice(MODES) for _ in range(n)))


def path_cuts(
    inputs: PartitionInputs,
    rng: random.Random | None = None,
    random_partitions: int = 0,
    scores: tuple[PartitionScore, ...] = (),
) -> list[PathCut]:
    """What the search collects: the seed cuts, then the critical paths of `random_partitions`
    random partitions and of the partitions scored in `scores` (every path is a valid cut for
    every partition)."""
    sched = schedule_of(inputs)
    cuts = seed_cuts(sched)
    assert rng is not None or not random_partitions
    picked = [score(inputs, random_partition(rng, inputs)) for _ in range(random_partitions)]  # type: ignore[arg-type]
    cuts += [critical_path(sched, durations_of(sc))[1] for sc in (*picked, *scores)]
    return cuts


@pytest.mark.parametrize("seed", range(40))
def test_integer_rank_floors_never_exceed_the_optimum(seed: int) -> None:
    rng = random.Random(9000 + seed)
    schedule, vpp = SCHEDULES[seed % len(SCHEDULES)]
    inputs = gpt_inputs(rng, schedule, vpp)
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
    rng = random.Random(7000 + seed)
    schedule, vpp = SCHEDULES[seed % len(SCHEDULES)]
    inputs = gpt_inputs(rng, schedule, vpp)
    result = exhaustive_config(inputs, modes=MODES)
    if result.best is None:
        return
    step = result.best.score.step_time_s
    cuts = path_cuts(inputs, rng, random_partitions=5, scores=(result.best.score,))
    floor = cut_floor_s(inputs, cuts)
    assert floor is not None
    assert floor <= step * (1 + 1e-12)
    assert floor >= integer_rank_floors_s(inputs, per_stage=True)[1]  # type: ignore[index]
