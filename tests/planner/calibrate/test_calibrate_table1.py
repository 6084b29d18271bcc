"""Calibration on Megatron-LM's Table 1 (Narayanan et al. 2021): the five smallest rows
predict the five largest within the shipped defaults' error, every row left out in turn is
predicted within the issue's bound, and the five smallest rows' evidence is what holds the
constant (bench/calibrate.py --split / --loo; docs/cost-model.md §5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.calibrate import leave_one_out, split_fit, table1_observations
from bench.megatron_table1 import DEFAULT_CASES
from planner.catalog.efficiency import DEFAULT_EFFICIENCY

pytestmark = pytest.mark.skipif(
    not Path(DEFAULT_CASES).exists(), reason="../shared/cases is not next to this checkout"
)

FIT = ["matmul_fraction", "hbm_fraction", "link_fraction"]


def test_split_five_smallest_predict_the_five_largest_within_the_defaults_error() -> None:
    obs = table1_observations()
    for names in (["matmul_fraction"], FIT):
        out = split_fit(obs, names)
        fitted, default = out["fitted_on_small"], out["default"]
        assert fitted["mean_abs_error"] <= default["mean_abs_error"] + 1e-4, out
        assert fitted["max_abs_error"] <= default["max_abs_error"] + 1e-4, out
        # the small rows scatter around the prior by more than a shift would remove: held
        assert set(out["held"]) == set(names), out
        assert out["loo_rms"]["0"] > out["loo_rms"]["1"] > 0.03, out
    # plain least squares on the small rows carries their bias to the large ones
    free = split_fit(obs, ["matmul_fraction"], prior_weight=0.0)
    assert free["fitted_on_small"]["mean_abs_error"] > out["default"]["mean_abs_error"] + 0.02
    assert free["constants"]["matmul_fraction"] > DEFAULT_EFFICIENCY.matmul_fraction


def test_leave_one_out_over_all_ten_rows_within_the_issue_bound() -> None:
    out = leave_one_out(table1_observations(), ["matmul_fraction"], prior_weight=0.0)
    assert out["loo"]["mean_abs_error"] <= 0.03, out
    assert out["loo"]["max_abs_error"] <= 0.08, out
    assert len(out["rows"]) == 10


def test_the_small_rows_weigh_the_constants_otherwise_than_the_large() -> None:
    """Why the five smallest rows are a poor guide to the five largest: GEMMs weigh less in
    their step and memory-bound work more, and their errors at the defaults (tp > 1, pp = 1:
    the wave-quantization bias, docs/cost-model.md §4) are no constant's."""
    out = split_fit(table1_observations(), ["matmul_fraction"])
    rows = list(out["sensitivity"].values())
    small, large = rows[:5], rows[5:]
    assert max(abs(r["matmul_fraction"]) for r in small) < min(
        abs(r["matmul_fraction"]) for r in large
    )
    assert min(abs(r["hbm_fraction"]) for r in small) > max(abs(r["hbm_fraction"]) for r in large)
    assert all(abs(r["kernel_overhead_s"]) < 0.01 for r in rows)  # micro-batch 1 everywhere
    errors = out["small_errors_default"]  # 1.7B (tp 1) and 39.1B (pp 2) fit; tp 2-8 at pp 1 do not
    assert max(abs(errors[0]), abs(errors[4])) < 0.02 < min(errors[1:4])
