"""hints.balanced: the contiguous split whose largest stage work is the least possible."""

from __future__ import annotations

import itertools
import random

import pytest

from planner.search.hints import balanced

from .cases import MODES, pipeline_inputs


def _least_largest(weights: list[float], stages: int) -> float:
    """The least largest part over every contiguous split into non-empty parts (brute force)."""
    n = len(weights)
    best = float("inf")
    for cuts in itertools.combinations(range(1, n), stages - 1):
        bounds = (0, *cuts, n)
        best = min(best, max(sum(weights[a:b]) for a, b in itertools.pairwise(bounds)))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_balanced_split_reaches_the_least_largest_stage_work(seed: int) -> None:
    rng = random.Random(7300 + seed)
    pp, vpp = rng.choice([(1, 1), (2, 1), (3, 1), (2, 2), (4, 1), (3, 2)])
    n = rng.randint(pp * vpp, 12)
    # equal layers now and then: ties between splits of the same largest part
    pool = [rng.uniform(0.1, 2.0) for _ in range(rng.choice([1, 2, n]))]
    fw = tuple(rng.choice(pool) for _ in range(n))
    bw = tuple(2 * f for f in fw)
    inputs = pipeline_inputs(
        "1f1b" if vpp == 1 else "interleaved-1f1b",
        pp,
        vpp,
        2 * pp,
        fw=fw,
        bw_input=tuple((b, b, 1.3 * b) for b in bw),
        bw_weight=tuple(0.5 * f for f in fw),
        p2p=(0.0,) * n,
        act=((1.0, 1.0, 0.3),) * n,
        static=(1.0,) * n,
        post=(0.0,) * n,
        cap=1e9,
        modes=MODES,
    )
    part = balanced(inputs, "none")
    weights = [f + b + 0.5 * f for f, b in zip(fw, bw, strict=True)]
    got = max(sum(weights[a:b]) for a, b in itertools.pairwise(part.bounds))
    assert len(part.bounds) == pp * vpp + 1 and all(
        a < b for a, b in itertools.pairwise(part.bounds)
    )
    want = _least_largest(weights, pp * vpp)
    assert got <= want * (1 + 1e-9), (got, want, part.bounds)
