"""Observations and calibration documents (the JSON that `meshplan calibrate` reads and writes).

An observation is one measured run of one fixed configuration:
`{"request": <PlanRequest>, "candidate": <Candidate>, "measured": {"step_time_s": ...,
"peak_memory_gib": ... (optional)}, "source": "..."}` -- a stored RunReport of a plan is one too
(its plan's request and candidate, its measured step time).

A calibration is `{"id", "gpu", "scope": {free-form: framework, version, cluster}, "constants":
{name: value}, "fitted": [names], "ranges": {name: [lo, hi]}, "observations": [...],
"fit": [per observation: predicted before, after, measured]}`. Its id is a content hash of the
GPU, the constants and the observations (the same fit gives the same id; no clock in the core).
`PlanRequest.calibration` (a CalibrationRef: id + constants) makes a plan use it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence

from pydantic import Field, model_validator

from planner.calibrate.fit import FitResult, fit_constants
from planner.catalog.efficiency import CONSTANT_NAMES, Efficiency
from planner.cost import evaluate
from planner.plan import Plan
from planner.runreport import RunReport
from planner.specs.base import Frozen
from planner.specs.request import CalibrationRef, Candidate, PlanRequest


class Measured(Frozen):
    step_time_s: float = Field(gt=0)
    peak_memory_gib: float | None = Field(default=None, gt=0)


class Observation(Frozen):
    request: PlanRequest
    candidate: Candidate
    measured: Measured
    source: str = Field(default="", max_length=2000)
    run_id: str | None = Field(
        default=None, max_length=200, description="the stored run it came from (the service)"
    )


class ObservationFit(Frozen):
    """One observation's predicted step time before and after the fit, and what was measured."""

    source: str
    measured_step_time_s: float
    predicted_before_s: float
    predicted_after_s: float

    @property
    def error_before(self) -> float:
        return self.predicted_before_s / self.measured_step_time_s - 1

    @property
    def error_after(self) -> float:
        return self.predicted_after_s / self.measured_step_time_s - 1


class Calibration(Frozen):
    id: str
    gpu: str
    scope: dict[str, str] = {}
    constants: dict[str, float]
    fitted: tuple[str, ...]
    ranges: dict[str, tuple[float, float]] = {}
    observations: tuple[Observation, ...]
    fit: tuple[ObservationFit, ...]
    prior_weight: float | None = Field(
        default=0.0,
        description="w of the prior toward the start constants (planner.calibrate.fit), chosen "
        "by leave-one-out cross-validation; null: infinite (every constant held at its start)",
    )
    held: dict[str, str] = Field(
        default_factory=dict, description="constants kept at their start value, and why"
    )
    loo_rms: dict[str, float] = Field(
        default_factory=dict,
        description="leave-one-out RMS log step-time error per prior weight tried",
    )

    @model_validator(mode="after")
    def _check(self) -> Calibration:
        Efficiency.from_dict(self.constants)
        bad = [n for n in self.fitted if n not in CONSTANT_NAMES]
        if bad:
            raise ValueError(f"fitted: unknown constants {bad}; known: {list(CONSTANT_NAMES)}")
        return self

    @property
    def efficiency(self) -> Efficiency:
        return Efficiency.from_dict(self.constants)

    def ref(self) -> CalibrationRef:
        """What a PlanRequest carries to be planned with this calibration."""
        return CalibrationRef(id=self.id, constants=self.constants)

    @property
    def summary(self) -> dict[str, object]:
        """The document without its observations (what lists show)."""
        return self.model_dump(mode="json", exclude={"observations"})


GIB = 1024**3


def observation_from_run(request: PlanRequest, plan: Plan, report: RunReport) -> Observation:
    """A measured run of a plan as an observation: the plan's request and configuration, the
    run's median step time and its largest per-rank peak memory."""
    peak = max((s.peak_memory_bytes for s in report.stages), default=0.0)
    return Observation(
        request=request,
        candidate=plan.candidate(),
        measured=Measured(
            step_time_s=report.step_time_s, peak_memory_gib=peak / GIB if peak > 0 else None
        ),
        source=f"run of plan {report.plan_id or '?'} on {report.device} ({report.backend})",
    )


def _gpu_of(observations: Sequence[Observation]) -> str:
    gpus = sorted({o.request.cluster.device.name for o in observations})
    if len(gpus) != 1:
        raise ValueError(f"observations must share one GPU type to calibrate it; got {gpus}")
    return gpus[0]


def predict_all(observations: Sequence[Observation], eff: Efficiency) -> list[float]:
    """The cost model's step time of each observation's configuration under `eff`."""
    return [evaluate(o.request, o.candidate, efficiency=eff).step_time_s for o in observations]


def calibrate(
    observations: Sequence[Observation],
    *,
    names: Sequence[str] = CONSTANT_NAMES,
    scope: dict[str, str] | None = None,
    start: Efficiency | None = None,
    prior_weight: float | None = None,
    hold_undetermined: bool = False,
) -> Calibration:
    """Fit `names` to the observations (planner.calibrate.fit) and wrap the result: toward
    `start` with `prior_weight` (None: cross-validated; 0: plain least squares); a constant
    the observations cannot determine refuses (NotDetermined) or, with `hold_undetermined`,
    keeps its start value and is named in `held`.

    Raises ValueError (observations on several GPUs, bad names) and NotDetermined.
    """
    if not observations:
        raise ValueError("no observations to calibrate on")
    gpu = _gpu_of(observations)
    measured = [o.measured.step_time_s for o in observations]
    result: FitResult = fit_constants(
        lambda eff: predict_all(observations, eff),
        measured,
        names=names,
        start=start,
        prior_weight=prior_weight,
        hold_undetermined=hold_undetermined,
    )
    constants = result.constants.as_dict()
    fits = tuple(
        ObservationFit(
            source=o.source,
            measured_step_time_s=m,
            predicted_before_s=m * math.exp(rb),
            predicted_after_s=m * math.exp(ra),
        )
        for o, m, rb, ra in zip(
            observations, measured, result.residuals_before, result.residuals_after, strict=True
        )
    )
    digest = hashlib.sha256(
        json.dumps(
            {
                "gpu": gpu,
                "constants": constants,
                "observations": [o.model_dump(mode="json") for o in observations],
            },
            sort_keys=True,
        ).encode()
    ).hexdigest()[:16]
    return Calibration(
        id=f"cal-{digest}",
        gpu=gpu,
        scope=dict(scope or {}),
        constants=constants,
        fitted=result.fitted,
        ranges=result.ranges,
        observations=tuple(observations),
        fit=fits,
        prior_weight=None if math.isinf(result.prior_weight) else result.prior_weight,
        held=result.held,
        loo_rms={f"{w:g}": round(e, 6) for w, e in result.loo_rms.items()},
    )
