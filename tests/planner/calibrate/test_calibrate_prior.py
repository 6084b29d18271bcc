"""The calibration's prior (planner.calibrate.prior): exact observations are fitted freely,
scatter around the prior leaves it where it is, a real shift moves it, and constants the
observations cannot determine are refused or held with the reason."""

from __future__ import annotations

import math

import pytest

from planner.calibrate import NotDetermined, Observation, calibrate
from planner.calibrate.document import Measured
from planner.catalog.efficiency import DEFAULT_EFFICIENCY, Efficiency
from planner.cost import evaluate
from planner.specs import Candidate, ClusterSpec, ModelArch, PlanRequest, TrainingSpec

GPT = ModelArch(
    family="gpt", num_layers=16, hidden_size=4096, num_attention_heads=32, vocab_size=51200
)
CANDIDATES = (
    (8, Candidate(tp=8, pp=1, dp=1, micro_batch_size=1, recompute="full")),
    (8, Candidate(tp=2, pp=2, dp=2, micro_batch_size=2)),
    (16, Candidate(tp=8, pp=1, dp=2, micro_batch_size=4, recompute="full")),
    (16, Candidate(tp=4, pp=4, dp=1, micro_batch_size=1, recompute="full")),
    (4, Candidate(tp=1, pp=1, dp=4, micro_batch_size=8, recompute="full")),
    (8, Candidate(tp=1, pp=8, dp=1, micro_batch_size=1, recompute="full")),
)


def _request(num_gpus: int) -> PlanRequest:
    return PlanRequest(
        model=GPT,
        cluster=ClusterSpec(gpu="A100", num_gpus=num_gpus),
        training=TrainingSpec(global_batch_size=64, seq_length=2048),
    )


def _observations(truth: Efficiency, scatter: tuple[float, ...]) -> list[Observation]:
    """Step times the model gives under `truth`, each times exp(scatter[i])."""
    return [
        Observation(
            request=_request(n),
            candidate=c,
            measured=Measured(
                step_time_s=evaluate(_request(n), c, efficiency=truth).step_time_s * math.exp(e)
            ),
            source=f"synthetic {i}",
        )
        for i, ((n, c), e) in enumerate(zip(CANDIDATES, scatter, strict=True))
    ]


NO_SCATTER = (0.0,) * len(CANDIDATES)
# +-3 % with mean zero: what a model's structural error looks like run to run
SCATTER = (0.03, -0.03, 0.02, -0.02, 0.01, -0.01)


def test_exact_observations_are_fitted_without_the_prior() -> None:
    truth = DEFAULT_EFFICIENCY.replace(matmul_fraction=0.5)
    cal = calibrate(_observations(truth, NO_SCATTER), names=("matmul_fraction",))
    assert cal.prior_weight == 0.0
    assert cal.constants["matmul_fraction"] == pytest.approx(0.5, rel=1e-3)
    assert cal.held == {}
    # linearised leave-one-out: small, not zero (the roofline makes log time not quite linear)
    assert cal.loo_rms["0"] < 0.01 < 0.1 < cal.loo_rms["inf"]


def test_scatter_around_the_prior_leaves_it_held() -> None:
    obs = _observations(DEFAULT_EFFICIENCY, SCATTER)
    cal = calibrate(obs, names=("matmul_fraction",))
    assert cal.prior_weight is None  # infinite: held
    assert cal.constants["matmul_fraction"] == DEFAULT_EFFICIENCY.matmul_fraction
    assert "one standard error" in cal.held["matmul_fraction"]
    # plain least squares chases the scatter instead
    free = calibrate(obs, names=("matmul_fraction",), prior_weight=0.0)
    assert free.constants["matmul_fraction"] != DEFAULT_EFFICIENCY.matmul_fraction


def test_a_real_shift_moves_the_constant_through_the_prior() -> None:
    truth = DEFAULT_EFFICIENCY.replace(matmul_fraction=0.45)  # 31 % below the prior
    cal = calibrate(_observations(truth, SCATTER), names=("matmul_fraction",))
    assert cal.prior_weight is not None and cal.held == {}
    assert cal.constants["matmul_fraction"] == pytest.approx(0.45, rel=0.05)
    assert cal.loo_rms[f"{cal.prior_weight:g}"] < cal.loo_rms["inf"] / 3


def test_an_unexercised_constant_is_refused_or_held_with_its_reason() -> None:
    request = _request(1).model_copy(
        update={"training": TrainingSpec(global_batch_size=8, seq_length=2048)}
    )
    obs = [
        Observation(
            request=request,
            candidate=Candidate(tp=1, pp=1, dp=1, micro_batch_size=b, recompute="full"),
            measured=Measured(step_time_s=t),
            source=f"one GPU, mbs {b}",
        )
        for b, t in ((1, 2.0), (2, 1.9), (4, 1.85))
    ]
    names = ("matmul_fraction", "link_fraction")
    with pytest.raises(NotDetermined, match="link_fraction is not determined"):
        calibrate(obs, names=names)
    cal = calibrate(obs, names=names, hold_undetermined=True)
    assert set(cal.held) == {"link_fraction"} and cal.fitted == ("matmul_fraction",)
    assert "do not exercise it" in cal.held["link_fraction"]
    assert cal.constants["link_fraction"] == DEFAULT_EFFICIENCY.link_fraction


def test_a_fixed_prior_weight_pulls_toward_the_start() -> None:
    truth = DEFAULT_EFFICIENCY.replace(matmul_fraction=0.45)
    obs = _observations(truth, NO_SCATTER)
    values = [
        calibrate(obs, names=("matmul_fraction",), prior_weight=w).constants["matmul_fraction"]
        for w in (0.0, 4.0, 64.0)
    ]
    assert values[0] == pytest.approx(0.45, rel=1e-3)
    assert values[0] < values[1] < values[2] < DEFAULT_EFFICIENCY.matmul_fraction
    with pytest.raises(ValueError, match="prior_weight"):
        calibrate(obs, names=("matmul_fraction",), prior_weight=-1.0)


def test_one_observation_has_nothing_to_cross_validate_with() -> None:
    truth = DEFAULT_EFFICIENCY.replace(matmul_fraction=0.5)
    cal = calibrate(_observations(truth, NO_SCATTER)[:1], names=("matmul_fraction",))
    assert cal.prior_weight == 0.0 and cal.loo_rms == {}  # plain least squares, n = k
    assert cal.constants["matmul_fraction"] == pytest.approx(0.5, rel=1e-3)
    assert cal.ranges == {}
