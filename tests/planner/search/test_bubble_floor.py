"""Objective bubble's floors and proofs: the per-configuration bubble floor
(planner.search.bubble_floor) is never above the least bubble of any partition, is positive
where the schedule forces a bubble, and settles the configurations of a small bubble request
that cannot beat the incumbent's bubble, so the search ends OPTIMAL at once."""

from __future__ import annotations

import dataclasses
import random
import time

import pytest

from planner.cost import partition_inputs, resolve_costs
from planner.search.bubble_floor import bubble_floor
from planner.search.driver import entry_bubble_floor, run_search
from planner.search.exhaustive import scored_partitions
from planner.search.space import enumerate_configs
from planner.specs import PlanRequest
from planner.specs.base import ScheduleName

from .cases import THREE, pipeline_inputs, three_mode_case
from .random_requests import random_request, solve_in_mode

ROUNDS = 20


def _least_bubble(inputs: object, modes: tuple[str, ...]) -> float:
    """The least simulated bubble of every partition, whatever the cap (brute force)."""
    free = dataclasses.replace(inputs, cap_bytes=float("inf"))  # type: ignore[type-var]
    return min(sc.score.bubble_fraction for sc in scored_partitions(free, modes=modes))  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(40))
def test_floor_is_below_the_least_bubble_of_every_partition(seed: int) -> None:
    _, inputs = three_mode_case(4100, seed)
    floor = bubble_floor(inputs, THREE, rounds=ROUNDS)
    assert 0.0 <= floor <= _least_bubble(inputs, THREE) + 1e-12
    if inputs.pp > 1 and inputs.schedule in ("gpipe", "1f1b", "interleaved-1f1b"):
        # every stage does some work, and ranks past the first wait for the first forward
        assert floor > 0.0


def test_floor_on_random_requests_every_configuration() -> None:
    """Every configuration of 30 random small requests (the exactness bench's, 3-6
    heterogeneous layers, 1-16 GPUs): the floor is at most the least bubble of its
    partitions, and positive for 1F1B-shaped pipelines with pp > 1."""
    checked = positive = 0
    for seed in range(30):
        request = random_request(random.Random(seed))
        src = resolve_costs(request)
        for cfg in enumerate_configs(request, num_layers=len(src.layers)):
            inputs = partition_inputs(request, cfg.candidate(), source=src)
            floor = bubble_floor(inputs, cfg.modes, rounds=ROUNDS)
            assert floor <= _least_bubble(inputs, cfg.modes) + 1e-12, (seed, cfg)
            checked += 1
            positive += floor > 0
            if cfg.pp > 1 and cfg.schedule in ("gpipe", "1f1b"):
                assert floor > 0, (seed, cfg)
    assert checked > 200 and positive > 50


def _bench_case(seed: int, case: int) -> PlanRequest:
    """Case `case` of bench/solver_vs_exhaustive.py's seed `seed`, objective bubble."""
    request = random_request(random.Random(seed * 100_000 + case))
    return request.model_copy(update={"objective": "bubble"})


def test_bench_case_35_is_proven_in_a_fraction_of_a_second() -> None:
    """Seed 1, case 35 (6 layers, 8 A100s, an 8.3 GiB cap): no configuration reaches a 0 %
    bubble, and the best (interleaved, pp = 2) is proven once every other pipelined one's
    floor is above its bubble and the one-rank configuration is refuted
    (test_transient_rows.py). It ran to its limit (FEASIBLE at 15 s, bubble bound 0)."""
    base = _bench_case(1, 35)
    request = base.model_copy(
        update={"search": base.search.model_copy(update={"time_limit_s": 15})}
    )
    t0 = time.process_time()
    out = run_search(request, clock=time.process_time, cpu_clock=True)
    took = time.process_time() - t0
    assert out.status == "OPTIMAL"
    assert took < 3.0
    assert out.best is not None
    oracle = solve_in_mode(base, "exhaustive")
    assert oracle is not None
    want = oracle.plan.prediction
    got = out.best[1].score
    assert got.bubble_fraction == pytest.approx(want.bubble_fraction, abs=1e-9)
    assert got.step_time_s == pytest.approx(want.step_time_s, rel=1e-9)
    assert out.bubble_bound == pytest.approx(got.bubble_fraction)
    assert out.gap == 0.0
    # most pp > 1 configurations are settled by their floor, without a solve
    pruned = [e for e in out.entries if e.verdict == "pruned"]
    assert len(pruned) >= 10
    assert all(entry_bubble_floor(out, e) > got.bubble_fraction for e in pruned)


@pytest.mark.parametrize("seed", range(30))
def test_middle_stages_floor_at_the_least_middle_layer(seed: int) -> None:
    """A stage between the first and the last holds only middle layers (stages are
    contiguous runs, the first layer in stage 0, the last in stage S - 1), so the LP's floor
    of its durations is the least middle layer's, not a tiny first layer's (an embedding):
    still never above the least bubble, on pipelines of about one layer per stage with
    unequal middle layers, where that floor binds."""
    rng = random.Random(5300 + seed)
    schedule, vpp = [("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2), ("zb-h1", 1)][seed % 4]
    sched: ScheduleName = schedule  # type: ignore[assignment]
    pp = rng.choice([2, 3, 4])
    n = pp * vpp + rng.randint(1, 2)
    m = rng.choice([pp, 2 * pp]) if vpp == 1 else pp
    rows = [(rng.uniform(0.005, 0.02), rng.uniform(0.005, 0.02), 0.0)]  # an embedding
    rows += [
        (rng.uniform(0.3, 1.0), rng.uniform(0.5, 2.0), rng.uniform(0, 1)) for _ in range(n - 2)
    ]
    rows.append((rng.uniform(0.1, 1.5), rng.uniform(0.1, 2.0), rng.uniform(0, 0.5)))
    inputs = pipeline_inputs(
        sched,
        pp,
        vpp,
        m,
        fw=tuple(r[0] for r in rows),
        bw_input=tuple((r[1], r[1], r[1]) for r in rows),
        bw_weight=tuple(r[2] for r in rows),
        p2p=(0.0,) * n,
        act=((1.0, 1.0, 1.0),) * n,
        static=(1.0,) * n,
        post=(0.0,) * n,
        cap=1e9,
        modes=("none",),
    )
    floor = bubble_floor(inputs, ("none",), rounds=ROUNDS)
    assert 0.0 < floor <= _least_bubble(inputs, ("none",)) + 1e-12
