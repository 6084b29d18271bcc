"""Dominance between configurations that differ only in their one recompute mode (a framework
that cannot mix modes gets one configuration per mode): dominance.mark_dominated may drop one
only when another has, for every split, a partition at least as fast that fits wherever it
fits — checked here against the exhaustive optimum of both."""

from __future__ import annotations

import pytest

from planner.cost import PartitionInputs
from planner.search.dominance import mark_dominated
from planner.search.exhaustive import exhaustive_config
from planner.search.outcome import Entry
from planner.search.space import Config
from planner.specs.base import RecomputeMode

from .cases import gpt_case

MODES: tuple[RecomputeMode, ...] = ("none", "selective", "full")


def _entries(inputs: PartitionInputs) -> list[Entry]:
    out = []
    for mode in MODES:
        cfg = Config(
            tp=1,
            pp=inputs.pp,
            dp=1,
            vpp=inputs.vpp,
            schedule=inputs.schedule,  # type: ignore[arg-type]
            micro_batch_size=1,
            num_microbatches=inputs.num_microbatches,
            zero_stage=1,
            sequence_parallel=False,
            modes=(mode,),
        )
        out.append(Entry(cfg, inputs, 0.0, 0.0))
    return out


def _optimum(inputs: PartitionInputs, mode: RecomputeMode) -> float:
    best = exhaustive_config(inputs, modes=(mode,)).best
    return best.score.step_time_s if best is not None else float("inf")


@pytest.mark.parametrize("seed", range(24))
def test_a_dropped_mode_is_never_better_than_every_kept_one(seed: int) -> None:
    _, base = gpt_case(41_000, seed)
    # selective: the bytes of none (a flash-attention profile) or a real saving, and a cost
    saves = seed % 2 == 0
    act = tuple((a[0], a[0] * (0.6 if saves else 1.0), a[2]) for a in base.activation_bytes)
    bw = tuple((b[0], b[0] * 1.1, b[2]) for b in base.bw_input_s)
    inputs = PartitionInputs(**{**base.__dict__, "activation_bytes": act, "bw_input_s": bw})
    entries = _entries(inputs)
    mark_dominated(entries)
    kept = [e for e in entries if e.verdict == "pending"]
    assert kept
    best_kept = min(_optimum(inputs, e.config.modes[0]) for e in kept)
    for e in entries:
        if e.verdict == "dominated":
            assert _optimum(inputs, e.config.modes[0]) >= best_kept * (1 - 1e-12)
    dropped = {e.config.modes[0] for e in entries if e.verdict == "dominated"}
    # selective that saves nothing and costs more is never needed; one that saves is kept,
    # and so is full (it saves the most bytes)
    assert ("selective" in dropped) == (not saves)
    assert "full" not in dropped and "none" not in dropped
