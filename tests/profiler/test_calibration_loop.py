"""The calibration loop on CPU, for real (bench/calibration_loop_cpu.py, small): profile the
tiny GPT, run six configurations with the reference runner on gloo, fit on half the runs and
predict the other half. The analytic cost model's held-out error falls; the profile-based
plans use none of the four constants enough to determine them, and the fit says so."""

from __future__ import annotations

import pytest

from bench.calibration_loop_cpu import CONFIGS, loop

pytestmark = pytest.mark.slow


def test_held_out_error_falls_and_what_cannot_be_determined_is_held() -> None:
    out = loop(layers=2, steps=3, warmup=1, configs=CONFIGS[:6])
    analytic = out["analytic"]
    assert len(analytic["held_out"]) == 3 and len(analytic["fit_errors"]) == 3
    assert "matmul_fraction" in analytic["fitted"], analytic["held"]
    assert analytic["after"]["mean_abs_error"] < analytic["before"]["mean_abs_error"], analytic
    # a profile's layer times are measured: no GEMM or kernel constant enters its plans
    profile = out["profile"]
    for name in ("matmul_fraction", "kernel_overhead_s"):
        assert "do not exercise it" in profile["held"][name], profile["held"]
    assert set(profile["fitted"]) | set(profile["held"]) == {
        "matmul_fraction",
        "hbm_fraction",
        "kernel_overhead_s",
        "link_fraction",
    }
