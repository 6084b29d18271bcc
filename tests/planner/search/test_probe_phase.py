"""The probing phase (planner.search.exact.probe_phase): count domains proven with the cut
LP. The exhaustive optimum must lie inside the domains returned for any bound it beats, and
"closed" only where nothing beats the bound; solve_config (probing, then CP-SAT given the
domains) finds the exhaustive optimum."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from planner.search.cutlp import CutLP, LpPoint
from planner.search.domains import counted_run
from planner.search.exact import SolveLimits, probe_phase, solve_config
from planner.search.exhaustive import exhaustive_config
from planner.search.model import layer_runs

from .cases import THREE, inside, mixed_case, run_counts, solved_case


@pytest.mark.parametrize("seed", range(60))
def test_probing_keeps_every_better_partition_inside_its_domains(seed: int) -> None:
    case = solved_case(21_000, seed)
    if case is None:
        return
    inputs, step = case.inputs, case.best.score.step_time_s
    for bound in (step * 1.02, step * 1.001, step * (1 - 1e-4)):
        got = probe_phase(CutLP(inputs, THREE, cuts=case.cuts), lambda b=bound: b)  # type: ignore[misc]
        closed, domains = got.closed, got.domains
        if step >= bound:
            continue  # nothing to keep: closing is right, any domains are
        assert not closed, "closed, yet the optimum beats the bound"
        if domains is not None:
            assert inside(run_counts(inputs, case.best.partition), domains)


@pytest.mark.parametrize("seed", range(20))
def test_solve_config_with_probing_finds_the_exhaustive_optimum(seed: int) -> None:
    _, inputs = mixed_case(22_000, seed)
    oracle = exhaustive_config(inputs, modes=THREE).best
    got = solve_config(inputs, modes=THREE, limits=SolveLimits(workers=1)).best
    assert (oracle is None) == (got is None)
    if oracle is not None and got is not None:
        assert got.score.step_time_s == pytest.approx(oracle.score.step_time_s, rel=1e-9)


def test_probing_cut_short_is_not_a_fixed_point() -> None:
    """`probed` is set only where a round shrank nothing with solves to spare: probing
    stopped by its time share or solve cap must be resumed by a later call (solve_config's
    `probed`), not taken as done."""
    reached = stopped = 0
    for seed in range(30):
        case = solved_case(24_000, seed)
        if case is None:
            continue
        inputs, cuts = case.inputs, case.cuts
        bound = case.best.score.step_time_s * 1.02  # the optimum beats it: never closed
        full = probe_phase(CutLP(inputs, THREE, cuts=cuts), lambda b=bound: b)  # type: ignore[misc]
        assert not full.closed and full.solves > 0
        reached += full.probed
        budget = iter([1.0, 1.0, 0.0])  # the share's start, one solve, then out of time

        def time_left(it: Iterator[float] = budget) -> float:
            return next(it, 0.0)

        short = probe_phase(CutLP(inputs, THREE, cuts=cuts), lambda b=bound: b, time_left)  # type: ignore[misc]
        assert not short.probed
        stopped += 1
    assert reached >= 10 and stopped >= 10, (reached, stopped)


def _plain_solves(lp: CutLP, bound: float, total: int, size: int) -> int:
    """LP solves of probing with every side solved (probe_phase's rounds without its skipped
    sides), for the comparison below."""
    return _plain(lp, bound, total, size)[0]


def _plain_closes(lp: CutLP, bound: float, total: int, size: int) -> bool:
    """Whether probing with every side solved closes the LP's region at `bound`."""
    return _plain(lp, bound, total, size)[1]


def _plain(lp: CutLP, bound: float, total: int, size: int) -> tuple[int, bool]:
    """(LP solves, closed) of probing with every side solved."""
    import math

    dom = [(0, total)] * size
    solves = 0

    def closes(domains: list[tuple[int, int]]) -> tuple[bool, LpPoint | None]:
        nonlocal solves
        lp.set_count_bounds(tuple(domains))
        point = lp.solve()
        solves += 1
        return (point is not None and point.reaches(bound)), point

    while True:
        shut, point = closes(dom)
        if shut or point is None:
            return solves, shut
        values = (*point.rank_counts, *point.run_stage_counts)
        shrunk = False
        for k, c in enumerate(values):
            lo, hi = dom[k]
            up = min(hi, max(lo, math.floor(c + 1e-9))) + 1
            if up <= hi and closes([*dom[:k], (up, hi), *dom[k + 1 :]])[0]:
                dom[k] = lo, hi = (lo, up - 1)
                shrunk = True
            down = max(lo, min(hi, math.ceil(c - 1e-9))) - 1
            if down >= lo and closes([*dom[:k], (lo, down), *dom[k + 1 :]])[0]:
                dom[k] = (down + 1, hi)
                shrunk = True
            if dom[k][0] > dom[k][1]:
                return solves, True
        if not shrunk:
            return solves, False


def test_probing_skips_sides_yet_keeps_every_better_partition() -> None:
    """probe_phase leaves a side unsolved where an earlier probe's optimum lies there below
    the bound: it still never closes a configuration whose optimum beats the bound, keeps
    that optimum inside its domains, and spends fewer LP solves than probing every side."""
    compared = tuned_solves = plain_solves = 0
    for seed in range(30):
        case = solved_case(25_000, seed)
        if case is None:
            continue
        inputs, cuts, step = case.inputs, case.cuts, case.best.score.step_time_s
        total = layer_runs(inputs)[counted_run(inputs)].count
        for bound in (step * 1.02, step * 1.001):
            got = probe_phase(CutLP(inputs, THREE, cuts=cuts), lambda b=bound: b)  # type: ignore[misc]
            assert not got.closed, "closed, yet the optimum beats the bound"
            if got.domains is not None:
                assert inside(run_counts(inputs, case.best.partition), got.domains)
            plain = CutLP(inputs, THREE, cuts=cuts)
            plain.count_run(counted_run(inputs))
            tuned_solves += got.solves
            plain_solves += _plain_solves(plain, bound, total, inputs.pp + inputs.num_stages)
            compared += 1
    assert compared >= 20 and tuned_solves < plain_solves, (compared, tuned_solves, plain_solves)


def _closing_cases() -> Iterator[tuple[CutLP, float, CutLP]]:
    """Random cases probed at bounds below their optimum (so probing may close them): the
    probed LP, the bound and a fresh LP of the same cuts for the plain probing."""
    for seed in range(40):
        case = solved_case(26_000, seed)
        if case is None:
            continue
        inputs, cuts = case.inputs, case.cuts
        for scale in (0.995, 0.98):
            plain = CutLP(inputs, THREE, cuts=cuts)
            plain.count_run(counted_run(inputs))
            yield CutLP(inputs, THREE, cuts=cuts), case.best.score.step_time_s * scale, plain


def test_probing_stops_once_its_domains_hold_no_lp_point() -> None:
    """Where a side's LP is infeasible, the domains left may hold no LP point at all; then
    every later side is infeasible too, and probing every side closes them one solve at a
    time until a domain empties. probe_phase then solves the domains once instead: it
    closes wherever probing every side closes, and in fewer solves on most of them (one more
    where the domains still hold a point)."""
    closed = fewer = tuned_solves = plain_solves = 0
    for lp, bound, plain in _closing_cases():
        got = probe_phase(lp, lambda b=bound: b)  # type: ignore[misc]
        total = layer_runs(lp.inputs)[counted_run(lp.inputs)].count
        size = lp.inputs.pp + lp.inputs.num_stages
        solves, plain_closed = _plain(plain, bound, total, size)
        if not plain_closed:
            continue
        assert got.closed, "probing every side closes it, probe_phase not"
        closed += 1
        fewer += got.solves < solves
        tuned_solves += got.solves
        plain_solves += solves
    assert closed >= 10 and fewer >= closed // 2, (closed, fewer)
    assert tuned_solves < plain_solves * 0.8, (tuned_solves, plain_solves)
