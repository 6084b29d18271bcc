"""Count domains from the whole-layer floors (planner.search.domains): every partition whose
simulated step time is below the limit must have its block counts inside them (checked on every
partition of small random cases), and empty domains only where no partition is below it."""

from __future__ import annotations

from collections.abc import Iterator

from planner.cost import PartitionInputs
from planner.search.domains import intersect, is_empty, rank_count_vectors, whole_layer_domains

from .cases import Counted, feasible_counts, inside, mixed_case


def _counted_cases(base: int) -> Iterator[tuple[int, PartitionInputs, Counted]]:
    """(seed, inputs, feasible_counts) of mixed_case(base, seed), seeds 0-79, where pp >= 2
    and some partition fits."""
    for seed in range(80):
        _, inputs = mixed_case(base, seed)
        if inputs.pp < 2:
            continue
        scored = feasible_counts(inputs)
        if scored:
            yield seed, inputs, scored


def test_every_partition_below_the_limit_lies_inside_the_domains() -> None:
    shrunk = checked = 0
    for _, inputs, scored in _counted_cases(23_000):
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


def test_every_partition_below_the_limit_has_its_rank_vector_listed() -> None:
    """rank_count_vectors: each partition below the limit inside the domains has its per-rank
    counts among the vectors (checked on every partition, inside the whole-layer domains and
    inside free ones), and the floor drops some vector that the domains allow (not
    vacuous)."""
    checked = dropped = 0
    for seed, inputs, scored in _counted_cases(24_000):
        best = min(step for step, _ in scored)
        free = tuple((0, inputs.num_layers) for _ in range(inputs.pp + inputs.num_stages))
        for factor in (1.0, 1.0005, 1.01, 1.05, 1.2):
            limit = best * factor
            for domains in (whole_layer_domains(inputs, limit) or free, free):
                vectors = rank_count_vectors(inputs, domains, limit, 10_000)
                if vectors is None:
                    continue
                checked += 1
                listed = set(vectors)
                for step, counts in scored:
                    if step < limit and inside(counts, domains):
                        assert tuple(counts[: inputs.pp]) in listed, (seed, factor, counts)
                allowed = {
                    tuple(counts[: inputs.pp]) for _, counts in scored if inside(counts, domains)
                }
                dropped += bool(allowed - listed)
    assert checked >= 100
    assert dropped >= checked // 5, (dropped, checked)


def test_too_many_vectors_are_not_listed() -> None:
    for seed in range(1, 40, 2):
        _, inputs = mixed_case(24_000, seed)
        if inputs.pp < 2:
            continue
        free = tuple((0, inputs.num_layers) for _ in range(inputs.pp + inputs.num_stages))
        vectors = rank_count_vectors(inputs, free, float("inf"), 10_000)
        assert vectors is not None and len(vectors) == len(set(vectors))
        if len(vectors) > 1:
            assert rank_count_vectors(inputs, free, float("inf"), len(vectors) - 1) is None
            return
    raise AssertionError("no case with two vectors")
