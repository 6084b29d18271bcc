"""score_split's per-layer sums in C (planner/cost/_sums.c) against the Python loop: the same
floats, bit for bit, on random partitions of random inputs; bad tables are refused."""

from __future__ import annotations

from array import array

import pytest

from planner.cost import score as score_module
from planner.cost.score import _stage_sums, stage_sums_python
from planner.specs.base import RecomputeMode
from tests.planner.search.cases import mixed_case

MODES: tuple[RecomputeMode, ...] = ("none", "selective", "full")

pytestmark = pytest.mark.skipif(score_module._sums is None, reason="C sums not built")


@pytest.mark.parametrize("seed", range(40))
def test_c_sums_equal_the_python_loop(seed: int) -> None:
    rng, inputs = mixed_case(24_000, seed)
    n, n_st = inputs.num_layers, inputs.num_stages
    for _ in range(10):
        cuts = sorted(rng.sample(range(1, n), n_st - 1))
        bounds = (0, *cuts, n)
        modes = tuple(rng.choice(MODES) for _ in range(n))
        c = _stage_sums(inputs, bounds, modes)
        py = stage_sums_python(inputs, bounds, modes)
        assert [list(v) for v in c] == [list(v) for v in py]


def test_c_sums_refuse_bad_tables() -> None:
    _, inputs = mixed_case(24_000, 1)
    n, n_st, pp = inputs.num_layers, inputs.num_stages, inputs.pp
    layers, ranks, inflight = score_module._tables(inputs)
    assert score_module._sums is not None
    sums = score_module._sums.sums
    out = array("d", bytes(8 * (5 * n_st + 2 * pp)))
    good = array("i", [0, *range(n - n_st + 1, n), n])
    with pytest.raises(ValueError, match="mode"):
        sums(layers, bytes([3] * n), good, ranks, inflight, pp, 0.0, 0.0, 0.0, 0.0, out)
    with pytest.raises(ValueError, match="bounds"):
        sums(
            layers,
            bytes(n),
            array("i", [0] * (n_st + 1)),
            ranks,
            inflight,
            pp,
            0.0,
            0.0,
            0.0,
            0.0,
            out,
        )
    with pytest.raises(ValueError, match="size"):
        sums(layers, bytes(n), good, ranks, inflight, pp, 0.0, 0.0, 0.0, 0.0, array("d"))
