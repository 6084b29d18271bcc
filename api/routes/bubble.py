"""/v1/bubble: the pipeline-bubble calculator (simulated, with the closed form beside it)."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import PrincipalDep
from api.limits import MAX_SCHEDULE_ACTIONS
from api.problems import ProblemError
from api.schemas.problem import problem_responses
from planner.bubble import BubbleRequest, BubbleResult, bubble_calc

router = APIRouter(prefix="/v1", tags=["bubble"])


@router.post(
    "/bubble",
    response_model=BubbleResult,
    responses=problem_responses(422),
    summary="Bubble fraction and in-flight micro-batches of a schedule",
)
def bubble(body: BubbleRequest, principal: PrincipalDep) -> BubbleResult:
    vpp = body.vpp or 1
    actions = body.pp * vpp * body.num_microbatches
    if actions > MAX_SCHEDULE_ACTIONS:
        raise ProblemError(
            422,
            "Request too large",
            f"pp*vpp*num_microbatches={actions} exceeds {MAX_SCHEDULE_ACTIONS}",
            kind="validation",
            errors=[
                {
                    "field": "body.num_microbatches",
                    "message": "too many actions",
                    "value": body.num_microbatches,
                }
            ],
        )
    return bubble_calc(body)
