"""The optimal mode agrees with the exhaustive oracle on small context-parallel and MoE
requests (the full run: bench/solver_vs_exhaustive.py --kinds cp,moe)."""

from __future__ import annotations

import random

import pytest

from planner.search.space import enumerate_configs

from .random_folded import random_folded_request
from .random_requests import assert_agrees_with_exhaustive

SAMPLE = 3  # per kind


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cp", "moe"])
@pytest.mark.parametrize("seed", range(SAMPLE))
def test_optimal_equals_exhaustive_with_cp_and_experts(kind: str, seed: int) -> None:
    assert_agrees_with_exhaustive(random_folded_request(random.Random(f"{kind}-0-{seed}"), kind))


@pytest.mark.parametrize("kind", ["cp", "moe"])
def test_the_sample_searches_the_folded_degrees(kind: str) -> None:
    # the oracle sees cp > 1 (and for MoE ep > 1) configurations in every sampled request
    for seed in range(SAMPLE):
        req = random_folded_request(random.Random(f"{kind}-0-{seed}"), kind)
        configs = enumerate_configs(req, num_layers=req.arch.num_layers + 2)  # type: ignore[union-attr]
        assert any(c.cp > 1 for c in configs)
        assert kind == "cp" or any(c.ep > 1 for c in configs)
