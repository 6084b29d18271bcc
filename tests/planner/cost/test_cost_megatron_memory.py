"""Megatron-LM's Table 1 (../shared/cases/megatron_table1.json): memory sanity and accuracy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.megatron_table1 import (
    DEFAULT_CASES,
    case_candidate,
    case_request,
    load_cases,
    rows,
    summary,
)
from planner.cost import evaluate
from planner.specs import Candidate

GIB = 1024**3

pytestmark = pytest.mark.skipif(
    not Path(DEFAULT_CASES).exists(), reason="../shared/cases is not next to this checkout"
)


def cases() -> list[dict[str, Any]]:
    return load_cases(DEFAULT_CASES) if Path(DEFAULT_CASES).exists() else []


@pytest.mark.slow
@pytest.mark.parametrize("case", cases(), ids=lambda c: c["name"])
def test_every_published_configuration_fits_in_80_gb(case: dict[str, Any]) -> None:
    pred = evaluate(case_request(case), case_candidate(case))
    assert pred.feasible, f"{case['name']}: peak {pred.peak_memory_bytes / GIB:.1f} GiB"
    assert pred.peak_memory_bytes < 80e9
    # and the prediction is not trivially small: params + optimizer of a rank's share alone
    m = case["model"]
    cfg = case["published_config"]
    params_per_gpu = 12 * m["num_layers"] * m["hidden_size"] ** 2 / (cfg["tp"] * cfg["pp"])
    assert pred.peak_memory_bytes > 16 * params_per_gpu


def test_145b_on_one_gpu_per_replica_is_infeasible_with_margin_in_gib() -> None:
    case = next(c for c in cases() if c["name"] == "megatron-gpt-145.6b")
    req = case_request(case)
    # dp = 1536 does not divide the published global batch 2304; use 2 micro-batches per rank
    req = req.model_copy(
        update={"training": req.training.model_copy(update={"global_batch_size": 3072})}
    )
    pred = evaluate(req, Candidate(tp=1, pp=1, dp=1536, schedule="1f1b", recompute="full"))
    assert not pred.feasible
    margin_gib = pred.margin_bytes / GIB
    # 16 bytes per parameter (ZeRO paper, mixed-precision Adam) of ~145.6e9 parameters alone
    # exceed 80 GiB by about 2,100 GiB
    assert margin_gib < 80 - 16 * 145.6e9 / GIB
    assert margin_gib > -1.2 * 16 * 145.6e9 / GIB


@pytest.mark.slow
def test_table1_throughput_within_the_issue_goal() -> None:
    # issue 17 (the shape-aware model): mean |error| <= 3 %, max <= 8 % of the published
    # TFLOP/s per GPU (issue 2 asked for 5 % / 10 %)
    table = rows(DEFAULT_CASES)
    stats = summary(table)
    assert stats["rows"] == 10
    assert stats["mean_abs_error"] <= 0.03, table
    assert stats["max_abs_error"] <= 0.08, table
    # weak scaling: the predicted step time follows the paper's derived seconds per iteration
    for r in table:
        assert r["predicted_step_time_s"] == pytest.approx(r["published_step_time_s"], rel=0.1)
