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
    session: Session, *, tenant: str, run_ids: list[str], field: str = "body.run_ids"
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
            raise _unknown(f"{field}[{i}]", run_id, "no stored run of this tenant")
        request = PlanRequest.model_validate(core_document(plan.request))
        result = PlanResult.model_validate(plan.result)
        obs = observation_from_run(request, result.plan, RunReport.model_validate(run.report))
        out.append(obs.model_copy(update={"run_id": run.id}))
    return out


def run_ids_of(
    session: Session, *, tenant: str, plan_ids: list[str], submission_ids: list[str]
) -> list[str]:
    """The stored runs of these plans (POST /v1/plans/{id}/runs) and those these submissions'
    jobs reported, in that order, each once; 422 naming an unknown plan or submission."""
    from api.store import runs as run_store
    from api.store.submissions import get_submission

    ids: list[str] = []
    for i, plan_id in enumerate(plan_ids):
        if plan_store.get_plan(session, tenant=tenant, plan_id=plan_id) is None:
            raise _unknown(f"body.plan_ids[{i}]", plan_id, "no stored plan of this tenant")
        ids += [r.id for r in run_store.list_runs(session, tenant=tenant, plan_id=plan_id)]
    for i, sid in enumerate(submission_ids):
        sub = get_submission(session, tenant=tenant, submission_id=sid)
        if sub is None:
            raise _unknown(f"body.submission_ids[{i}]", sid, "no submission of this tenant")
        ids += list(sub.run_ids)
    return list(dict.fromkeys(ids))


def plan_calibration_view(
    session: Session, *, tenant: str, row: plan_store.StoredPlan
) -> dict[str, Any]:
    """What the plan page's calibration section shows (templates/_calibration.html): the
    cost-model version and calibration the plan was made with, and each measured run's step
    time against the plan's prediction (before) and against the prediction under the newest
    stored calibration that folded in a run of this plan (after)."""
    from api.store import runs as run_store
    from api.store.calibrations import list_calibrations
    from planner.cost import evaluate

    runs = run_store.list_runs(session, tenant=tenant, plan_id=row.id)
    result = PlanResult.model_validate(row.result)
    predicted = result.plan.prediction.step_time_s
    ids = {r.id for r in runs}
    cal = None
    if ids:
        stored, _ = list_calibrations(session, tenant=tenant, page_size=200, after=None)
        for c in stored:
            if c.gpu == row.gpu and any(o.get("run_id") in ids for o in c.body["observations"]):
                cal = Calibration.model_validate(c.body)
                break
    after = None
    if cal is not None:
        request = PlanRequest.model_validate(core_document(row.request))
        after = evaluate(request, result.plan.candidate(), efficiency=cal.efficiency).step_time_s
    rows = []
    for r in runs:
        measured = float(r.report["step_time_s"])
        rows.append(
            {
                "id": r.id,
                "measured_s": measured,
                "predicted_before_s": predicted,
                "error_before": predicted / measured - 1,
                "predicted_after_s": after,
                "error_after": None if after is None else after / measured - 1,
            }
        )
    return {
        "cost_model_version": row.cost_model_version or "unknown",
        "calibration_id": row.calibration_id,
        "loop_calibration": None
        if cal is None
        else {"id": cal.id, "constants": cal.constants, "fitted": list(cal.fitted)},
        "runs": rows,
    }


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
