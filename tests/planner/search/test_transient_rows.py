"""The CP-SAT model's memory rows charge the recompute transient (planner.search.model):
a configuration whose every recompute assignment fits only without it is refuted at once."""

from __future__ import annotations

import dataclasses
import random

import pytest

from planner.cost import partition_inputs, resolve_costs
from planner.search.exact import SolveLimits, solve_config
from planner.search.exhaustive import exhaustive_config, scored_partitions
from planner.search.space import enumerate_configs

from .cases import THREE, three_mode_case
from .random_requests import random_request


def test_a_fit_broken_only_by_the_transient_is_refuted_in_one_solve() -> None:
    """Case 35's one-rank configuration (tp 2, dp 4): every recompute assignment whose saved
    activations fit the cap holds a recomputed layer whose transient (act(none) - act(mode),
    charged in the backward) breaks it. The memory rows charge that transient, so CP-SAT
    refutes the configuration at once; without it the model let every such assignment
    through, to be cut off by one no-good each."""
    request = random_request(random.Random(100_000 + 35))  # the exactness bench's seed 1, case 35
    src = resolve_costs(request)
    (cfg,) = [
        c
        for c in enumerate_configs(request, num_layers=len(src.layers))
        if c.pp == 1 and c.micro_batch_size == 1 and c.zero_stage == 1
    ]
    inputs = partition_inputs(request, cfg.candidate(), source=src)
    free = dataclasses.replace(inputs, recompute_transient=False)
    fits_without = [sc for sc in scored_partitions(free, modes=cfg.modes) if sc.score.feasible]
    assert fits_without  # the transient is what breaks them
    assert not [sc for sc in scored_partitions(inputs, modes=cfg.modes) if sc.score.feasible]
    res = solve_config(inputs, modes=cfg.modes, limits=SolveLimits(time_limit_s=30.0, workers=1))
    assert res.status == "INFEASIBLE"
    assert res.solver_calls <= 2


@pytest.mark.parametrize("seed", range(30))
def test_the_transient_rows_cut_off_no_partition_that_fits(seed: int) -> None:
    """Three recompute modes, caps that force recompute in many cases, every schedule: the
    solver's optimum is the oracle's (a row that charged more than the scorer would cut off
    a partition that fits, and the solver would then prove a slower one or none)."""
    _, inputs = three_mode_case(4300, seed)
    want = exhaustive_config(inputs, modes=THREE).best
    got = solve_config(inputs, modes=THREE, limits=SolveLimits(time_limit_s=60.0, workers=1))
    assert got.status == ("OPTIMAL" if want is not None else "INFEASIBLE")
    if want is not None:
        assert got.best is not None
        assert got.best.score.step_time_s == pytest.approx(want.score.step_time_s, rel=1e-9)
