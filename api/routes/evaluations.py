"""/v1/evaluations: the prediction for one fixed candidate (what-if)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from api.deps import PrincipalDep, StateDep
from api.limits import check_candidate_size, check_request
from api.planning import normalise
from api.schemas.plans import PlanCreate
from api.schemas.problem import problem_responses
from planner.cost import check_candidate, evaluate
from planner.plan import Prediction
from planner.specs import Candidate

router = APIRouter(prefix="/v1", tags=["evaluations"])


class EvaluationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request: PlanCreate
    candidate: Candidate


class EvaluationPublic(BaseModel):
    candidate: Candidate
    prediction: Prediction


@router.post(
    "/evaluations",
    response_model=EvaluationPublic,
    responses=problem_responses(422),
    summary="Predict step time, bubble and memory of a fixed candidate",
)
def create_evaluation(
    body: EvaluationCreate, principal: PrincipalDep, state: StateDep
) -> EvaluationPublic:
    request = normalise(state, principal.tenant, body.request).request
    check_request(request, prefix="request.")
    check_candidate_size(request, body.candidate)
    candidate = check_candidate(request, body.candidate)
    return EvaluationPublic(candidate=candidate, prediction=evaluate(request, candidate))
