"""Calibrations in the service: observations from stored runs, and a plan request's
`calibration: {"id": ...}` resolved to the stored document's constants."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from api.problems import ProblemError
from api.schemas.plans import core_document
from api.store import plans as plan_store
from api.store.calibrations import get_calibration, get_run
from planner.calibrate import Calibration, Observation, observation_from_run
from planner.plan import PlanResult
from planner.runreport import RunReport
from planner.specs import PlanRequest


def _unknown(field: str, value: str, message: str) -> ProblemError:
    return ProblemError(
        422,
        "Unknown reference",
        f"{field}={value!r}: {message}",
        kind="validation",
        errors=[{"field": field, "message": message, "value": value}],
    )


def observations_from_runs(
    session: Session, *, tenant: str, run_ids: list[str]
) -> list[Observation]:
    """Each stored run (and the plan it ran) as an observation; 422 naming an unknown id."""
    out = []
    for i, run_id in enumerate(run_ids):
        run = get_run(session, tenant=tenant, run_id=run_id)
        plan = (
            None
            if run is None
            else plan_store.get_plan(session, tenant=tenant, plan_id=run.plan_id)
        )
        if run is None or plan is None:
            raise _unknown(f"body.run_ids[{i}]", run_id, "no stored run of this tenant")
        request = PlanRequest.model_validate(core_document(plan.request))
        result = PlanResult.model_validate(plan.result)
        out.append(observation_from_run(request, result.plan, RunReport.model_validate(run.report)))
    return out


def resolve_calibration(session: Session, *, tenant: str, request: PlanRequest) -> PlanRequest:
    """The request with a stored calibration's constants filled in (when named by id only)."""
    ref = request.calibration
    if ref is None or ref.constants is not None:
        return request
    row = get_calibration(session, tenant=tenant, calibration_id=ref.id)
    if row is None:
        raise _unknown("body.calibration.id", ref.id, "no stored calibration of this tenant")
    gpu = request.cluster.device.name
    if row.gpu != gpu:
        raise _unknown("body.calibration.id", ref.id, f"calibrated for {row.gpu}, not {gpu}")
    cal = Calibration.model_validate(row.body)
    return request.model_copy(update={"calibration": cal.ref()})


def summary(row_body: dict[str, Any], created_at: str) -> dict[str, Any]:
    """A stored document without its observations, with when it was stored."""
    return {
        **{k: v for k, v in row_body.items() if k != "observations"},
        "num_observations": len(row_body.get("observations", ())),
        "created_at": created_at,
    }
