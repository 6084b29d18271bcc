"""bounds.restricted: the floors of a configuration that uses only some recompute modes (one
per configuration under a framework that cannot mix them) are computed on its modes' times and
bytes; each stays at or below that configuration's exhaustive optimum, and with full
recompute alone it counts the recompute the least over all modes leaves out."""

from __future__ import annotations

import pytest

from planner.search.bounds import memory_floor_bytes, restricted, time_floor_s
from planner.search.exhaustive import exhaustive_config
from planner.specs.base import RecomputeMode

from .cases import mixed_case

SETS: tuple[tuple[RecomputeMode, ...], ...] = (
    ("none",),
    ("selective",),
    ("full",),
    ("selective", "full"),
)


@pytest.mark.parametrize("seed", range(40))
def test_restricted_floors_never_exceed_the_configurations_optimum(seed: int) -> None:
    _, inputs = mixed_case(42_000, seed)
    for modes in SETS:
        seen = restricted(inputs, modes)
        best = exhaustive_config(inputs, modes=modes).best
        if best is None:
            continue
        assert time_floor_s(seen) <= best.score.step_time_s * (1 + 1e-9), modes
        assert memory_floor_bytes(seen) <= best.score.peak_memory_bytes * (1 + 1e-9), modes


def test_full_recompute_alone_raises_the_time_floor() -> None:
    """Over random inputs whose full recompute costs time in every layer, the floor of uniform
    full is never below the floor over all modes, and above it in most cases (where the busy
    terms bind rather than a memory-forced recompute that already costs as much)."""
    higher = total = 0
    for seed in range(40):
        _, inputs = mixed_case(43_000, seed)
        if any(b[2] <= b[0] for b in inputs.bw_input_s):
            continue
        total += 1
        full, every = time_floor_s(restricted(inputs, ("full",))), time_floor_s(inputs)
        assert full >= every
        higher += full > every * (1 + 1e-9)
        assert restricted(inputs, ("none", "selective", "full")) is inputs
    assert total >= 20
    assert higher >= total // 2, (higher, total)
