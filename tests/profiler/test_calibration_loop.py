"""The calibration loop on CPU, for real (bench/calibration_loop_cpu.py, small): profile the
tiny GPT, run six configurations with the reference runner on gloo, fit on half the runs and
predict the other half. What holds whatever this machine's load does to the measured times:
the fit never makes its own runs worse in its objective (squared log error; the start is a
candidate of the regularised fit), every constant is fitted or held with its reason, and the
profile-based plans use none of the four constants enough to determine them. Whether the
held-out half improves depends on how steady the measured times were; the bench prints it."""

from __future__ import annotations

import math

import pytest

from bench.calibration_loop_cpu import CONFIGS, loop

CONSTANTS = ("matmul_fraction", "hbm_fraction", "kernel_overhead_s", "link_fraction")

pytestmark = pytest.mark.slow


def test_the_fit_never_worsens_its_own_runs_and_names_what_it_holds() -> None:
    out = loop(layers=2, steps=3, warmup=1, configs=CONFIGS[:6])
    analytic = out["analytic"]
    assert len(analytic["held_out"]) == 3 and len(analytic["fit_errors"]) == 3
    assert set(analytic["fitted"]) | set(analytic["held"]) == set(CONSTANTS), analytic
    assert all(analytic["held"].values()), analytic["held"]  # each with its reason

    def sq_log(key: str) -> float:
        return sum(math.log1p(f[key]) ** 2 for f in analytic["fit_errors"])

    assert sq_log("after") <= sq_log("before") + 1e-9, analytic["fit_errors"]
    # a profile's layer times are measured: no GEMM or kernel constant enters its plans
    profile = out["profile"]
    for name in ("matmul_fraction", "kernel_overhead_s"):
        assert "do not exercise it" in profile["held"][name], profile["held"]
    assert set(profile["fitted"]) | set(profile["held"]) == set(CONSTANTS)
