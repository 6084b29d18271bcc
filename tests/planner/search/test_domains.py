"""Count domains from the whole-layer floors (planner.search.domains): every partition whose
simulated step time is below the limit must have its block counts inside them (checked on every
partition of small random cases), and empty domains only where no partition is below it."""

from __future__ import annotations

from planner.search.domains import intersect, is_empty, whole_layer_domains
from planner.search.exhaustive import scored_partitions

from .cases import THREE, inside, mixed_case, run_counts


def test_every_partition_below_the_limit_lies_inside_the_domains() -> None:
    shrunk = checked = 0
    for seed in range(80):
        _, inputs = mixed_case(23_000, seed)
        scored = [
            (sc.score.step_time_s, run_counts(inputs, sc.partition))
            for sc in scored_partitions(inputs, modes=THREE)
            if sc.score.feasible
        ]
        if not scored or inputs.pp < 2:
            continue
        best = min(step for step, _ in scored)
        for factor in (0.999, 1.0, 1.0005, 1.01, 1.05):
            limit = best * factor
            domains = whole_layer_domains(inputs, limit)
            if domains is None:
                continue  # not GPT-shaped: no domains claimed
            checked += 1
            below = [counts for step, counts in scored if step < limit]
            assert all(inside(counts, domains) for counts in below)
            if is_empty(domains):
                assert not below
            free = [counts for _, counts in scored]
            if any(not inside(counts, domains) for counts in free):
                shrunk += 1  # the domains cut off some partition: not vacuous
    assert checked >= 100
    assert shrunk >= checked // 2, (shrunk, checked)


def test_intersect_keeps_what_both_allow() -> None:
    assert intersect(((0, 5), (2, 9)), ((1, 7), (0, 4))) == ((1, 5), (2, 4))
    assert intersect(None, ((1, 2),)) == ((1, 2),)
    assert intersect(((1, 2),), None) == ((1, 2),)
    assert is_empty(intersect(((0, 1),), ((2, 3),)))
    assert not is_empty(None)
