"""/v1/plans/{id}/runs: measured runs of a plan, set against its prediction."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from api.deps import PrincipalDep, SessionDep
from api.fidelity import compare
from api.problems import ProblemError
from api.schemas.problem import problem_responses
from api.store import plans as plan_store
from api.store import runs as run_store
from api.store.plans import StoredPlan
from api.store.tables import RunRow, SubmissionRow
from api.submissions.tokens import ReporterDep
from planner.plan import PlanResult
from planner.runreport import RunReport

router = APIRouter(prefix="/v1", tags=["runs"])


class RunPublic(BaseModel):
    id: str
    plan_id: str
    created_at: str
    report: RunReport
    comparison: dict[str, Any]


class RunListPublic(BaseModel):
    plan_id: str
    data: list[RunPublic]


def _plan(session: Any, tenant: str, plan_id: str) -> StoredPlan:
    row = plan_store.get_plan(session, tenant=tenant, plan_id=plan_id)
    if row is None:
        raise ProblemError(404, "Not found", f"no plan {plan_id!r}")
    return row


def run_document(plan: StoredPlan, run: RunRow) -> dict[str, Any]:
    prediction = PlanResult.model_validate(plan.result).plan.prediction
    report = RunReport.model_validate(run.report)
    return {
        "id": run.id,
        "plan_id": plan.id,
        "created_at": run.created_at.isoformat(),
        "report": run.report,
        "comparison": compare(prediction, report),
    }


@router.post(
    "/plans/{plan_id}/runs",
    status_code=201,
    response_model=None,
    responses={201: {"model": RunPublic}, **problem_responses(403, 404, 422)},
    summary="Report a measured run of a plan (an API key, or a submission's report token)",
)
def create_run(
    plan_id: str, body: RunReport, reporter: ReporterDep, session: SessionDep
) -> JSONResponse:
    tenant = reporter.principal.tenant
    plan = _plan(session, tenant, plan_id)
    doc = body.model_copy(update={"plan_id": plan_id}).model_dump(mode="json")
    run = run_store.insert_run(session, tenant=tenant, plan_id=plan_id, report=doc)
    if reporter.submission_id is not None:  # the run of a submitted job: listed on it
        submission = session.get(SubmissionRow, reporter.submission_id, with_for_update=True)
        if submission is not None:
            submission.run_ids = [*submission.run_ids, run.id]
    return JSONResponse(
        run_document(plan, run), status_code=201, headers={"Location": f"/v1/plans/{plan_id}/runs"}
    )


@router.get(
    "/plans/{plan_id}/runs",
    response_model=None,
    responses={200: {"model": RunListPublic}, **problem_responses(404)},
    summary="Measured runs of a plan against its prediction",
)
def list_runs(plan_id: str, principal: PrincipalDep, session: SessionDep) -> JSONResponse:
    plan = _plan(session, principal.tenant, plan_id)
    runs = run_store.list_runs(session, tenant=principal.tenant, plan_id=plan_id)
    return JSONResponse({"plan_id": plan_id, "data": [run_document(plan, r) for r in runs]})
