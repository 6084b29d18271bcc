"""The pruning floors and the path cuts are lower bounds: checked against the simulator."""

from __future__ import annotations

import random

import pytest

from planner.cost import partition_inputs, resolve_costs
from planner.schedules import Schedule, StageDurations, generate, simulate
from planner.schedules.simulate import compiled_rows
from planner.schedules.validate import KIND_INDEX, execution_order
from planner.search.bounds import (
    group_memory_floor_bytes,
    group_time_floor_s,
    memory_floor_bytes,
    time_floor_s,
)
from planner.search.exhaustive import exhaustive_config
from planner.search.paths import critical_path, rank_chain, seed_cuts, through_rank_paths
from planner.search.space import enumerate_configs
from planner.specs.base import ScheduleName

from .cases import lp_floor
from .random_requests import random_request

SCHEDULES = [
    ("gpipe", 1),
    ("1f1b", 1),
    ("zb-h1", 1),
    ("interleaved-1f1b", 2),
    ("zbv", 2),
    ("zb-h1", 2),
]


@pytest.mark.parametrize("seed", range(60))
def test_every_path_cut_is_below_the_simulated_makespan(seed: int) -> None:
    rng = random.Random(seed)
    name, vpp = SCHEDULES[seed % len(SCHEDULES)]
    pp = rng.choice([2, 3, 4])
    m = rng.choice([pp, 2 * pp, 8])
    if name == "interleaved-1f1b" and m % max(1, m // pp):
        m = pp
    sched = generate(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
    n = pp * vpp
    w = tuple(rng.uniform(0, 1) for _ in range(n))
    d = StageDurations(
        fw_s=tuple(rng.uniform(0.1, 2) for _ in range(n)),
        bw_s=tuple(x + rng.uniform(0.1, 2) for x in w),
        w_s=w,
        p2p_s=tuple(rng.uniform(0, 0.3) for _ in range(n)),
    )
    makespan = simulate(sched, d).step_time_s
    mine, crit = critical_path(sched, d)
    assert mine == pytest.approx(makespan, rel=1e-12)
    assert crit.length_s(d) == pytest.approx(makespan, rel=1e-12)  # the critical path is tight
    cuts = seed_cuts(sched)
    assert all(c.length_s(d) <= makespan * (1 + 1e-12) for c in cuts)


@pytest.mark.parametrize("seed", range(12))
def test_floors_never_exceed_a_configurations_optimum(seed: int) -> None:
    req = random_request(random.Random(500 + seed))
    src = resolve_costs(req)
    for cfg in enumerate_configs(req, num_layers=len(src.layers)):
        try:
            inputs = partition_inputs(req, cfg.candidate(), source=src)
        except ValueError:
            continue
        best = exhaustive_config(inputs, modes=cfg.modes).best
        if best is None:
            continue
        step = best.score.step_time_s
        peak = best.score.peak_memory_bytes
        assert time_floor_s(inputs) <= step * (1 + 1e-12)
        assert group_time_floor_s(inputs) <= step * (1 + 1e-12)
        assert memory_floor_bytes(inputs) <= peak * (1 + 1e-12)
        assert group_memory_floor_bytes(inputs) <= peak * (1 + 1e-12)
        sched = generate(
            inputs.schedule, pp=inputs.pp, vpp=inputs.vpp, num_microbatches=inputs.num_microbatches
        )
        seeds = seed_cuts(sched)
        lp = lp_floor(inputs, cfg.modes, seeds)
        assert lp is None or lp <= step * (1 + 1e-9)


Op = tuple[int, int, int, int, int, int, int]


def simulator_ops(sched: Schedule) -> list[Op]:
    """The simulator's compiled rows, the table the path search walks, as (rank, stage, kind,
    dep, boundary, dep, boundary) per action in topological order (lag slot 0 is "none": -1;
    slot b + 1 is boundary b)."""
    n_st = sched.num_stages
    return [
        (rank, slot % n_st, slot // n_st, d1, l1 - 1, d2, l2 - 1)
        for rank, slot, d1, l1, d2, l2 in compiled_rows(sched)[0]
    ]


def validator_ops(sched: Schedule) -> list[Op]:
    """The same table from the validator's dependency rule (execution_order)."""
    order = execution_order(sched)
    position = {cell: i for i, cell in enumerate(order.cells)}
    ops = []
    for rank, step in order.cells:
        a = sched.orders[rank][step]
        deps = [(position[d.cell], d.boundary) for d in order.deps[(rank, step)]]
        deps += [(-1, -1)] * (2 - len(deps))
        (d1, b1), (d2, b2) = deps
        ops.append((rank, a.stage, KIND_INDEX[a.kind], d1, b1, d2, b2))
    return ops


@pytest.mark.parametrize(("name", "vpp"), SCHEDULES)
def test_reused_simulator_table_matches_the_validators_dependencies(name: str, vpp: int) -> None:
    sched = generate(name, pp=3, vpp=vpp, num_microbatches=6)  # type: ignore[arg-type]
    assert simulator_ops(sched) == validator_ops(sched)


@pytest.mark.parametrize(
    ("name", "pp", "vpp", "m"),
    [("zbv", 4, 2, 12), ("interleaved-1f1b", 3, 4, 9), ("zb-h1", 4, 1, 6), ("1f1b", 5, 1, 3)],
)
def test_seed_cuts_read_the_same_from_codes_and_from_actions(
    name: ScheduleName, pp: int, vpp: int, m: int
) -> None:
    """A generated schedule's rank chains are counted from its codes; the same schedule
    given as plain Action tuples (Schedule(orders=...)) gives the same cuts."""
    generated = generate(name, pp=pp, vpp=vpp, num_microbatches=m)
    plain = Schedule(name, pp, vpp, m, tuple(tuple(order) for order in generated.orders))
    assert seed_cuts(generated) == seed_cuts(plain)
    assert [rank_chain(generated, r) for r in range(pp)] == [
        rank_chain(plain, r) for r in range(pp)
    ]


SEED_SCHEDULES = [
    (name, pp, vpp, m)
    for name, vpps in (
        ("gpipe", (1,)),
        ("1f1b", (1,)),
        ("interleaved-1f1b", (2, 3, 4)),
        ("zb-h1", (1, 2, 3)),
        ("zbv", (2,)),
    )
    for vpp in vpps
    for pp in (1, 2, 3, 4, 7, 8)
    for m in (1, 2, 3, 5, 8, 12, 16, 32)
    if not (name in ("interleaved-1f1b", "zb-h1") and m % max(1, m // pp))
]


@pytest.mark.parametrize(("name", "pp", "vpp", "m"), SEED_SCHEDULES)
def test_seed_cuts_are_the_rank_chains_then_the_through_rank_paths(
    name: ScheduleName, pp: int, vpp: int, m: int
) -> None:
    """seed_cuts (the C kernel's walks where it is built, kernel.seed_paths) gives exactly
    the pure-Python walks' cuts, in their order: every rank's chain, then the fill/drain
    paths of through_rank_paths."""
    sched = generate(name, pp=pp, vpp=vpp, num_microbatches=m)
    chains = [rank_chain(sched, r) for r in range(pp)]
    assert seed_cuts(sched) == [*chains, *through_rank_paths(sched)]


@pytest.mark.parametrize(("pp", "m"), [(2, 2), (3, 5), (4, 8), (5, 3), (6, 12)])
def test_through_rank_paths_give_1f1b_its_makespan_with_uniform_stages(pp: int, m: int) -> None:
    """With equal stages 1F1B's makespan is a fill/drain path through one rank (the
    docstring's claim): the best seed cut reaches the simulated makespan exactly, and every
    through-rank cut holds all of its rank's actions."""
    sched = generate("1f1b", pp=pp, vpp=1, num_microbatches=m)
    d = StageDurations(fw_s=(1.0,) * pp, bw_s=(2.0,) * pp, w_s=(0.5,) * pp, p2p_s=(0.0,) * pp)
    makespan = simulate(sched, d).step_time_s
    cuts = through_rank_paths(sched)
    assert max(c.length_s(d) for c in cuts) == pytest.approx(makespan, rel=1e-12)
    for rank in range(pp):
        own = rank_chain(sched, rank)
        for cut in cuts[2 * rank : 2 * rank + 2]:
            assert all(a >= b for a, b in zip(cut.f + cut.b, own.f + own.b, strict=True))
