"""solve_config's hard-proof path (a second call, with the paths an earlier call collected:
separate_lp inside the probed domains, then probing again) still finds the oracle's optimum
and never proves a floor above it."""

from __future__ import annotations

import pytest

from planner.search.exact import Known, solve_config
from planner.search.exhaustive import exhaustive_config
from planner.search.hints import hint_partitions
from planner.search.partition import schedule_of
from planner.search.paths import seed_cuts

from .cases import THREE, three_mode_case


@pytest.mark.parametrize("seed", range(40))
def test_second_call_with_separation_matches_the_oracle(seed: int) -> None:
    _, inputs = three_mode_case(7700, seed)
    oracle = exhaustive_config(inputs, modes=THREE).best
    known = Known(paths=tuple(seed_cuts(schedule_of(inputs))))
    # a bound above the optimum (the oracle's + 10 %): the LP phases all run below it
    bound = None if oracle is None else oracle.score.step_time_s * 1.1
    hints = hint_partitions(inputs, THREE, None)
    res = solve_config(inputs, modes=THREE, known=known, bound_s=bound, hints=hints)
    if oracle is None:
        assert res.best is None
        return
    assert res.status == "OPTIMAL" and res.best is not None
    assert res.best.score.step_time_s == pytest.approx(oracle.score.step_time_s, rel=1e-9)
    assert res.floor_s <= oracle.score.step_time_s * (1 + 1e-9)
