"""/v1/jobs/{id}: the state of a search started with `Prefer: respond-async`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.deps import PrincipalDep, SessionDep
from api.problems import ProblemError
from api.schemas.plans import JobPublic
from api.schemas.problem import problem_responses
from api.store.jobs import get_job
from api.store.tables import JobRow

router = APIRouter(prefix="/v1", tags=["jobs"])


def job_document(job: JobRow) -> dict[str, Any]:
    return {
        "id": job.id,
        "status": job.status,
        "progress": job.progress,
        "progress_detail": job.progress_detail,
        "created_at": job.created_at.isoformat(),
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "plan_id": job.plan_id,
        "plan_url": f"/v1/plans/{job.plan_id}" if job.plan_id else None,
        "error": job.error,
    }


@router.get(
    "/jobs/{job_id}",
    response_model=None,
    responses={200: {"model": JobPublic}, **problem_responses(404)},
    summary="Poll a search job",
)
def read_job(job_id: str, principal: PrincipalDep, session: SessionDep) -> JSONResponse:
    job = get_job(session, tenant=principal.tenant, job_id=job_id)
    if job is None:
        raise ProblemError(404, "Not found", f"no job {job_id!r}")
    headers = {"Retry-After": "1"} if job.status == "running" else None
    return JSONResponse(job_document(job), headers=headers)
