"""Calibration (planner.calibrate): the fit recovers known constants, refuses what the data
cannot determine, and on Megatron-LM's Table 1 (Narayanan et al. 2021) the split
five-smallest -> five-largest is measured against the shipped defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.calibrate import split_fit, table1_observations
from bench.megatron_table1 import DEFAULT_CASES
from planner.calibrate import Measured, NotDetermined, Observation, calibrate, predict_all
from planner.catalog.efficiency import DEFAULT_EFFICIENCY, Efficiency
from planner.cost import evaluate
from planner.specs import Candidate, ClusterSpec, ModelArch, PlanRequest, TrainingSpec

needs_table1 = pytest.mark.skipif(
    not Path(DEFAULT_CASES).exists(), reason="../shared/cases is not next to this checkout"
)

GPT = ModelArch(
    family="gpt", num_layers=16, hidden_size=4096, num_attention_heads=32, vocab_size=51200
)


def _request(num_gpus: int, batch: int = 64) -> PlanRequest:
    return PlanRequest(
        model=GPT,
        cluster=ClusterSpec(gpu="A100", num_gpus=num_gpus),
        training=TrainingSpec(global_batch_size=batch, seq_length=2048),
    )


CANDIDATES = (
    (8, Candidate(tp=8, pp=1, dp=1, micro_batch_size=1, recompute="full")),
    (8, Candidate(tp=2, pp=2, dp=2, micro_batch_size=2)),
    (16, Candidate(tp=8, pp=1, dp=2, micro_batch_size=4, recompute="full")),
    (16, Candidate(tp=4, pp=4, dp=1, micro_batch_size=1, recompute="full")),
    (4, Candidate(tp=1, pp=1, dp=4, micro_batch_size=8, recompute="full")),
)


def _synthetic(truth: Efficiency) -> list[Observation]:
    """Observations whose 'measured' step times are the model's under `truth`."""
    return [
        Observation(
            request=_request(n),
            candidate=c,
            measured=Measured(step_time_s=evaluate(_request(n), c, efficiency=truth).step_time_s),
            source=f"synthetic {i}",
        )
        for i, (n, c) in enumerate(CANDIDATES)
    ]


def test_fit_recovers_the_constants_that_made_the_observations() -> None:
    truth = DEFAULT_EFFICIENCY.replace(matmul_fraction=0.55, link_fraction=0.7)
    cal = calibrate(_synthetic(truth), names=("matmul_fraction", "link_fraction"))
    assert cal.constants["matmul_fraction"] == pytest.approx(0.55, rel=1e-3)
    assert cal.constants["link_fraction"] == pytest.approx(0.7, rel=1e-3)
    assert all(abs(f.error_after) < 1e-4 for f in cal.fit)
    assert max(abs(f.error_before) for f in cal.fit) > 0.05  # the defaults were off
    lo, hi = cal.ranges["matmul_fraction"]
    assert lo <= 0.55 <= hi
    assert cal.gpu == "A100-SXM-80GB" and cal.id.startswith("cal-")
    # the same data give the same document id (content hash), and the request carries it
    assert calibrate(_synthetic(truth), names=("matmul_fraction", "link_fraction")).id == cal.id
    req = _request(8).model_copy(update={"calibration": cal.ref()})
    _, cand = CANDIDATES[0]
    assert evaluate(req, cand).step_time_s == pytest.approx(
        cal.fit[0].measured_step_time_s, rel=1e-4
    )


def test_refuses_more_constants_than_observations() -> None:
    obs = _synthetic(DEFAULT_EFFICIENCY)[:1]
    with pytest.raises(NotDetermined, match="1 observation"):
        calibrate(obs, names=("matmul_fraction", "link_fraction"))


def test_refuses_a_constant_the_observations_do_not_exercise() -> None:
    # one GPU: no collective, no p2p -- nothing depends on link_fraction
    req = _request(1, batch=8)
    cand = Candidate(tp=1, pp=1, dp=1, micro_batch_size=1, recompute="full")
    obs = [
        Observation(request=req, candidate=cand, measured=Measured(step_time_s=t), source=str(t))
        for t in (1.0, 1.1)
    ]
    with pytest.raises(NotDetermined, match="link_fraction is not determined"):
        calibrate(obs, names=("link_fraction",))


def test_refuses_observations_on_two_gpu_types() -> None:
    obs = _synthetic(DEFAULT_EFFICIENCY)[:1]
    h100 = obs[0].model_copy(
        update={
            "request": obs[0].request.model_copy(
                update={"cluster": ClusterSpec(gpu="H100", num_gpus=8)}
            )
        }
    )
    with pytest.raises(ValueError, match="one GPU type"):
        calibrate([obs[0], h100], names=("matmul_fraction",))


@pytest.mark.slow
@needs_table1
def test_table1_refit_on_all_rows_reproduces_the_shipped_matmul_fraction() -> None:
    obs = table1_observations()
    cal = calibrate(obs, names=("matmul_fraction",))
    # bench/calibrate.py fits three constants on all ten rows; two sit at their bound 1.0, so
    # fitting the third alone lands on the shipped value
    assert cal.constants["matmul_fraction"] == pytest.approx(
        DEFAULT_EFFICIENCY.matmul_fraction, abs=0.01
    )


@pytest.mark.slow
@needs_table1
def test_table1_all_four_constants_from_five_rows_is_refused() -> None:
    with pytest.raises(NotDetermined):
        calibrate(table1_observations()[:5])


@pytest.mark.slow
@needs_table1
def test_table1_split_five_smallest_predict_the_five_largest() -> None:
    out = split_fit(table1_observations(), ["matmul_fraction"])
    fitted, default = out["fitted_on_small"], out["default"]
    # Fitted on the five smallest rows alone, the five largest stay within the issue's
    # Table-1 bounds for a calibrated model (mean 5 %, max 10 %) ...
    assert fitted["mean_abs_error"] <= 0.05, out
    assert fitted["max_abs_error"] <= 0.10, out
    # ... and the fit on the small rows moves the large rows' predictions the way the small
    # rows' own errors say: it does not make them worse than the uncalibrated start by more
    # than the gap measured today (docs/cost-model.md §5 records both numbers).
    assert fitted["mean_abs_error"] <= default["mean_abs_error"] + 0.03, out
    assert predict_all(table1_observations()[:1], DEFAULT_EFFICIENCY)[0] > 0
