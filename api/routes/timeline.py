"""/v1/plans/{id}/timeline.svg: the plan's simulated pipeline timeline."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from api.deps import PrincipalDep, SessionDep
from api.limits import MAX_SCHEDULE_ACTIONS
from api.problems import ProblemError
from api.schemas.problem import problem_responses
from api.store import plans as plan_store
from api.timeline import plan_timeline_svg
from planner.plan import PlanResult

router = APIRouter(prefix="/v1", tags=["plans"])


@router.get(
    "/plans/{plan_id}/timeline.svg",
    response_model=None,
    responses={
        200: {
            "content": {"image/svg+xml": {"schema": {"type": "string"}}},
            "description": "SVG timeline, one row per pipeline rank",
        },
        **problem_responses(404),
    },
    summary="The plan's pipeline timeline as SVG",
)
def timeline(plan_id: str, principal: PrincipalDep, session: SessionDep) -> Response:
    row = plan_store.get_plan(session, tenant=principal.tenant, plan_id=plan_id)
    if row is None:
        raise ProblemError(404, "Not found", f"no plan {plan_id!r}")
    plan = PlanResult.model_validate(row.result).plan
    if plan.num_microbatches * plan.pp * plan.vpp > MAX_SCHEDULE_ACTIONS:
        raise ProblemError(422, "Timeline too large", "too many actions to draw")
    return Response(plan_timeline_svg(plan), media_type="image/svg+xml")
