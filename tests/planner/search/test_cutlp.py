"""The cutting-plane LP: rounding its fractional split always gives a valid split, and the LP
kept between solves gives the same floor as one built with all the cuts at once."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable

import pytest

from planner.search.cutlp import CutLP, PoolPolicy, rounded_bounds
from planner.search.domains import counted_run
from planner.search.exact import separate_lp
from planner.search.exhaustive import exhaustive_config
from planner.search.partition import durations_of, schedule_of, score
from planner.search.paths import PathCut, critical_path, seed_cuts

from .cases import (
    MODES,
    THREE,
    gpt_case,
    random_partition,
    solved_case,
    three_mode_case,
)


@pytest.mark.parametrize("seed", range(100))
def test_rounded_bounds_are_a_valid_split(seed: int) -> None:
    rng = random.Random(seed)
    n_st = rng.randint(1, 12)
    n = rng.randint(n_st, 40)
    weights = [rng.random() + (5.0 if rng.random() < 0.2 else 0.0) for _ in range(n_st)]
    layers = tuple(w * n / sum(weights) for w in weights)
    bounds = rounded_bounds(layers, n)
    assert bounds[0] == 0 and bounds[-1] == n and len(bounds) == n_st + 1
    assert all(a < b for a, b in itertools.pairwise(bounds))


@pytest.mark.parametrize("seed", range(30))
def test_incremental_lp_floor_is_a_floor_and_matches_a_fresh_one(seed: int) -> None:
    rng, inputs = gpt_case(500, seed)
    sched = schedule_of(inputs)
    cuts = seed_cuts(sched)
    lp = CutLP(inputs, MODES)
    for cut in cuts:
        lp.add_cut(cut)
    first = lp.solve()
    for _ in range(4):  # cuts added after a solve, as the cutting-plane phase does
        part = random_partition(rng, inputs)
        cut = critical_path(sched, durations_of(score(inputs, part)))[1]
        cuts.append(cut)
        lp.add_cut(cut)
    later = lp.solve()
    fresh = CutLP(inputs, MODES)
    for cut in cuts:
        fresh.add_cut(cut)
    again = fresh.solve()
    best = exhaustive_config(inputs, modes=MODES).best
    if best is None:
        return  # nothing fits: the LP may say anything (or be infeasible)
    assert first is not None and later is not None and again is not None
    assert first.value_s <= later.value_s * (1 + 1e-9)
    assert later.value_s == pytest.approx(again.value_s, rel=1e-7)
    assert later.value_s <= best.score.step_time_s * (1 + 1e-6)


@pytest.mark.parametrize("seed", range(30))
def test_lp_memory_rows_cut_off_no_partition_that_fits(seed: int) -> None:
    """Three recompute modes and caps that force recompute (the CP-SAT rows' cases,
    test_transient_rows): the LP's floor stays at or below the oracle's optimum (a memory row
    that charged more than the scorer, e.g. the recompute transient in full, would cut off
    the optimum)."""
    _, inputs = three_mode_case(4300, seed)
    lp = CutLP(inputs, THREE, cuts=seed_cuts(schedule_of(inputs)))
    floor = lp.solve()
    best = exhaustive_config(inputs, modes=THREE).best
    assert floor is not None
    if best is None:
        return
    assert floor.value_s <= best.score.step_time_s * (1 + 1e-6)


@pytest.mark.parametrize("seed", range(30))
def test_lp_point_durations_give_every_cut_its_row_value(seed: int) -> None:
    """LpPoint.durations are the optimum's stage durations: every cut's length under them is
    at most T (LpPoint.makespan_s), the longest equals T, and T + P is the LP's value. A
    duration built from the wrong terms (the input-grad time in bw_s twice, the weight
    gradient left out, the overhead or p2p missed) breaks one of these."""
    rng, inputs = three_mode_case(7100, seed)
    sched = schedule_of(inputs)
    cuts = seed_cuts(sched)
    for _ in range(3):
        part = random_partition(rng, inputs)
        cuts.append(critical_path(sched, durations_of(score(inputs, part)))[1])
    lp = CutLP(inputs, THREE, cuts=cuts)
    point = lp.solve()
    assert point is not None
    if point.value_s == float("inf"):
        return  # nothing fits the memory rows
    assert point.durations is not None
    lengths = [cut.length_s(point.durations) for cut in cuts]
    assert max(lengths) == pytest.approx(point.makespan_s, rel=1e-6, abs=1e-12)
    assert point.makespan_s <= point.value_s * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(40))
def test_separated_lp_floor_stays_below_the_optimum(seed: int) -> None:
    """separate_lp adds the critical paths of the LP optimum's own durations: its values rise
    (never fall), stay at or below the exhaustive optimum, and it stops only where no path
    of the last optimum's durations is longer than T (or its solves are spent)."""
    _, inputs = three_mode_case(7300, seed)
    sched = schedule_of(inputs)
    lp = CutLP(inputs, THREE, cuts=seed_cuts(sched))
    first = lp.solve()
    assert first is not None
    best = exhaustive_config(inputs, modes=THREE).best
    if first.value_s == float("inf") or best is None:
        return
    floors: list[float] = []
    added: list[PathCut] = []
    point = separate_lp(
        lp, first, lambda cut: added.append(cut) is None, math.inf, 500, proven=floors.append
    )
    assert point is not None and point.durations is not None
    assert point.value_s >= first.value_s * (1 - 1e-9)
    assert all(a <= b * (1 + 1e-9) for a, b in itertools.pairwise(floors))
    assert point.value_s <= best.score.step_time_s * (1 + 1e-6)
    if len(added) < 500:  # converged: no path of its durations is longer than T
        length, _ = critical_path(sched, point.durations)
        assert length <= point.makespan_s * (1 + 1e-4) + 1e-12


def _keep(added: list[PathCut]) -> Callable[[PathCut], bool]:
    def keep(cut: PathCut) -> bool:
        added.append(cut)
        return True

    return keep


@pytest.mark.parametrize("seed", range(30))
def test_in_out_separation_ends_at_kelleys_floor(seed: int) -> None:
    """separate_lp with a real partition's durations as its core (in-out separation: the
    configuration's best) converges where Kelley's method does (no path of the last
    optimum's durations longer than T: the same fractional optimum), never above the
    exhaustive optimum, and adds paths besides the optimum's own critical paths."""
    _, inputs = gpt_case(7300, seed)
    best = exhaustive_config(inputs, modes=MODES).best
    if best is None:
        return
    sched = schedule_of(inputs)
    core = durations_of(score(inputs, best.partition))
    values, cuts = [], []
    for share in (0.0, 0.5):
        lp = CutLP(inputs, MODES, cuts=seed_cuts(sched))
        first = lp.solve()
        assert first is not None
        if first.value_s == float("inf"):
            return
        added: list[PathCut] = []
        point = separate_lp(lp, first, _keep(added), math.inf, 500, core=core, core_share=share)
        assert point is not None and point.durations is not None and len(added) < 500
        assert point.value_s <= best.score.step_time_s * (1 + 1e-6)
        length, _ = critical_path(sched, point.durations)
        assert length <= point.makespan_s * (1 + 1e-4) + 1e-12
        values.append(point.value_s)
        cuts.append(added)
    assert values[1] == pytest.approx(values[0], rel=1e-4)
    if seed in (3, 29):  # where the mixed durations' critical path is another one
        assert cuts[1] != cuts[0]


def test_rejected_glop_parameters_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parameter string GLOP does not parse is an error, not GLOP's defaults in silence."""
    import planner.search.cutlp as cutlp

    monkeypatch.setattr(cutlp, "CUT_LP_PARAMETERS", "use_scaling: flase")
    _, inputs = gpt_case(7300, 0)
    with pytest.raises(ValueError, match="GLOP rejects"):
        CutLP(inputs, MODES)


@pytest.mark.parametrize("seed", range(10))
def test_an_unscaled_solve_stopped_by_its_limit_is_solved_scaled(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """An unscaled solve that does not converge within its iteration limit (here 1) is not a
    failed LP: the CutLP solves it again with scaling, and on every later solve, to the same
    optimum as a CutLP that was scaled from the start."""
    import planner.search.cutlp as cutlp

    rng, inputs = gpt_case(500, seed)
    sched = schedule_of(inputs)
    scaled = cutlp.GLOP_PARAMETERS
    cuts = seed_cuts(sched) + [
        critical_path(sched, durations_of(score(inputs, random_partition(rng, inputs))))[1]
        for _ in range(3)
    ]
    values: dict[str, list[float]] = {}
    for name, parameters in (
        ("scaled", scaled),
        ("limited", f"{scaled} max_number_of_iterations: 1"),
    ):
        monkeypatch.setattr(cutlp, "CUT_LP_PARAMETERS", parameters)
        lp = CutLP(inputs, MODES)
        values[name] = []
        for cut in cuts:  # a solve after each added row, as the cutting-plane phase does
            lp.add_cut(cut)
            point = lp.solve()
            assert point is not None
            values[name].append(point.value_s)
    assert values["limited"] == pytest.approx(values["scaled"], rel=1e-7)


@pytest.mark.parametrize("seed", range(40))
def test_a_pool_that_drops_its_slack_rows_keeps_the_floor_of_every_cut(seed: int) -> None:
    """A CutLP that drops every row not tight at its last solve (PoolPolicy(keep_solves=1,
    compact_rows=0)) solves to the floor of the LP holding every row, through cuts added
    between solves and count bounds moved (as the probing and branching phases do)."""
    case = solved_case(520, seed, random_partitions=20)
    if case is None:
        return
    inputs, cuts = case.inputs, case.cuts
    eager = PoolPolicy(keep_solves=1, compact_rows=0)
    held = CutLP(inputs, THREE, cuts=cuts[:2], pool=PoolPolicy(compact_rows=10**9))
    dropping = CutLP(inputs, THREE, cuts=cuts[:2], pool=eager)
    rng = random.Random(seed)
    run = counted_run(inputs)
    for lp in (held, dropping):
        lp.count_run(run)
    free = [(0, inputs.num_layers)] * (inputs.pp + inputs.num_stages)
    for k, cut in enumerate(cuts[2:]):
        bounds = free
        if k % 3 == 2:  # a count domain around one rank's count, then free again
            r = rng.randrange(inputs.pp)
            lo = rng.randint(0, inputs.num_layers // inputs.pp)
            bounds = [*free[:r], (lo, lo + 1), *free[r + 1 :]]
        for lp in (held, dropping):
            lp.add_cut(cut)
            lp.set_count_bounds(tuple(bounds))
        want, got = held.solve(), dropping.solve()
        assert (want is None) == (got is None)
        if want is None or got is None:
            continue
        assert got.value_s == pytest.approx(want.value_s, rel=1e-6, abs=1e-12), (k, cut)
        if bounds is free:  # a floor of every partition
            assert got.value_s <= case.best.score.step_time_s * (1 + 1e-6)
