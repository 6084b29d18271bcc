"""driver.start_domains: the count domains an interim solve proved are reused only by solves
against a bound at or below its own (they hold only the partitions better than that bound)."""

from __future__ import annotations

import pytest

from planner.search.cutlp import CutLP
from planner.search.driver import start_domains
from planner.search.exact import Known, SolveLimits, probe_phase, solve_config
from planner.search.outcome import Entry

from .cases import THREE, inside, run_counts, solved_case


def test_interim_domains_are_kept_for_lower_bounds_only() -> None:
    exact = ((0, 9), (0, 9))
    interim = ((2, 3), (5, 6))
    entry = Entry(None, None, 0.0, 0.0, known_domains=exact, probed=True)  # type: ignore[arg-type]
    entry.interim_domains, entry.interim_bound_s, entry.interim_probed = interim, 10.0, True
    assert start_domains(entry, 10.5) == (exact, True)  # a higher bound: not those
    assert start_domains(entry, None) == (exact, True)
    assert start_domains(entry, 10.0) == (interim, True)
    assert start_domains(entry, 9.0) == (interim, False)  # not probed at this bound


def test_a_solve_from_the_kept_domains_finds_the_optimum() -> None:
    """Domains probed against an interim bound below a configuration's optimum may leave its
    optimal partition out (where probing closed: every partition); a later solve against a
    bound above the optimum starts from start_domains and must still find it, and one
    against the interim bound or below may start from them (every partition better than
    that lies inside)."""
    excluded = 0
    for seed in range(40):
        case = solved_case(25_000, seed)
        if case is None:
            continue
        inputs, step = case.inputs, case.best.score.step_time_s
        interim = step * (1 - 1e-2)
        probe = probe_phase(CutLP(inputs, THREE, cuts=case.cuts), lambda b=interim: b)  # type: ignore[misc]
        if probe.domains is None:
            continue
        excluded += not inside(run_counts(inputs, case.best.partition), probe.domains)
        entry = Entry(None, inputs, 0.0, 0.0)  # type: ignore[arg-type]
        entry.interim_domains, entry.interim_bound_s = probe.domains, interim
        entry.interim_probed = probe.probed
        assert start_domains(entry, interim * 0.999)[0] == probe.domains
        domains, probed = start_domains(entry, step * 1.02)
        got = solve_config(
            inputs,
            modes=THREE,
            bound_s=step * 1.02,
            known=Known(paths=tuple(case.cuts), domains=domains, probed=probed),
            limits=SolveLimits(workers=1),
        )
        assert got.best is not None
        assert got.best.score.step_time_s == pytest.approx(step, rel=1e-9), seed
    assert excluded >= 3, excluded
