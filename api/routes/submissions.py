"""/v1/plans/{id}/submissions and /v1/submissions: send a plan to a cluster scheduler, follow
it, cancel it (docs/submissions.md)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.deps import PrincipalDep, StateDep, in_session
from api.idempotent import expiry_of, replay_or_refuse
from api.present import decode_cursor, encode_cursor
from api.problems import ProblemError, problem_body
from api.schemas.problem import problem_responses
from api.schemas.submissions import SubmissionListPublic, SubmissionPublic
from api.state import AppState
from api.store import idempotency
from api.store import submissions as submission_store
from api.store.keys import Principal
from api.store.submissions import SubmissionFilters
from api.store.tables import SubmissionRow
from api.submissions.service import SubmissionCreate, cancel_submission, create_submission
from api.submissions.states import submission_document
from planner.errors import SpecError, UnsupportedPlanError

router = APIRouter(prefix="/v1", tags=["submissions"])

_LOCATION = {"Location": {"description": "the submission's URL", "schema": {"type": "string"}}}
_RETRY = {
    "Retry-After": {
        "description": "seconds until a retry may succeed",
        "schema": {"type": "string"},
    }
}
State = Literal["PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"]


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    out = problem_responses(*codes)
    if 503 in out:
        out[503] = {**out[503], "headers": _RETRY}
    return out


def fingerprint(plan_id: str, body: SubmissionCreate) -> str:
    """What an Idempotency-Key is bound to: the plan and the body, with defaults filled in."""
    doc = {"plan_id": plan_id, "body": body.model_dump(mode="json")}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _problem_document(exc: BaseException) -> dict[str, Any] | None:
    """The stored answer to a request that failed on the client's side (4xx, not 503)."""
    if isinstance(exc, ProblemError) and exc.status < 500:
        return problem_body(exc.status, exc.title, exc.detail, kind=exc.kind, **exc.extra)
    if isinstance(exc, SpecError):
        errors = [{"field": exc.field, "message": exc.reason, "value": exc.value}]
        return problem_body(422, "Invalid request", str(exc), kind="validation", errors=errors)
    if isinstance(exc, UnsupportedPlanError):
        return problem_body(
            422,
            "Plan cannot be expressed",
            str(exc),
            kind="unsupported-plan",
            framework=exc.framework,
            reasons=exc.reasons,
        )
    return None


def _forget(state: AppState, tenant: str, key: str) -> None:
    with state.sessions() as session:
        idempotency.abandon(session, tenant=tenant, key=key)
        session.commit()


def _remember(state: AppState, tenant: str, key: str, doc: dict[str, Any]) -> None:
    with state.sessions() as session:
        idempotency.complete(
            session, tenant=tenant, key=key, status=doc["status"], body=doc, headers={}
        )
        session.commit()


def _created(row: SubmissionRow) -> JSONResponse:
    return JSONResponse(
        submission_document(row), status_code=201, headers={"Location": f"/v1/submissions/{row.id}"}
    )


@router.post(
    "/plans/{plan_id}/submissions",
    status_code=201,
    response_model=None,
    responses={
        201: {"model": SubmissionPublic, "description": "submitted", "headers": _LOCATION},
        **_responses(403, 404, 409, 422, 503),
    },
    summary="Submit a stored plan to a cluster scheduler (Slurm, Kubernetes)",
)
async def create(
    plan_id: str,
    body: SubmissionCreate,
    request: Request,
    principal: PrincipalDep,
    state: StateDep,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=200)] = None,
) -> JSONResponse:
    report_url = state.settings.submission_report_url or str(request.base_url).rstrip("/")
    tenant = principal.tenant
    if idempotency_key is None:
        row = await run_in_threadpool(
            create_submission, state, principal, plan_id, body, report_url=report_url
        )
        return _created(row)
    key = idempotency_key
    # a reservation outlives any honest attempt (the scheduler's command timeout, twice):
    # older, it belonged to a process that died, and the key is free again
    stale_after_s = 2 * state.submitters.config.slurm_command_timeout_s + 60.0
    claim = await run_in_threadpool(
        idempotency.begin,
        state.sessions,
        tenant=tenant,
        key=key,
        fingerprint=fingerprint(plan_id, body),
        stale_after_s=stale_after_s,
        expiry=expiry_of(state.settings),
    )
    replayed = replay_or_refuse(claim)
    if replayed is not None:
        return replayed

    def record(session: Session, row: SubmissionRow) -> None:
        headers = {"Location": f"/v1/submissions/{row.id}"}
        doc = submission_document(row)
        idempotency.complete(session, tenant=tenant, key=key, status=201, body=doc, headers=headers)

    try:
        row = await run_in_threadpool(
            create_submission, state, principal, plan_id, body, report_url=report_url, record=record
        )
    except BaseException as exc:
        doc = _problem_document(exc)
        if doc is not None:
            await run_in_threadpool(_remember, state, tenant, key, doc)
        else:  # 503 or our own failure: nothing was recorded, the client may retry
            await run_in_threadpool(_forget, state, tenant, key)
        raise
    return _created(row)


def _get(session: Session, principal: Principal, submission_id: str) -> SubmissionRow:
    row = submission_store.get_submission(
        session, tenant=principal.tenant, submission_id=submission_id
    )
    if row is None:
        raise ProblemError(404, "Not found", f"no submission {submission_id!r}")
    return row


@router.get(
    "/submissions/{submission_id}",
    response_model=None,
    responses={200: {"model": SubmissionPublic}, **_responses(404)},
    summary="One submission, as the poller last saw it",
)
async def read(submission_id: str, principal: PrincipalDep, state: StateDep) -> JSONResponse:
    row = await in_session(state, lambda s: _get(s, principal, submission_id))
    return JSONResponse(submission_document(row))


@router.delete(
    "/submissions/{submission_id}",
    response_model=None,
    responses={200: {"model": SubmissionPublic}, **_responses(404, 503)},
    summary="Cancel a submission (scancel / delete the Kubernetes job)",
)
async def cancel(submission_id: str, principal: PrincipalDep, state: StateDep) -> JSONResponse:
    row = await run_in_threadpool(cancel_submission, state, principal, submission_id)
    return JSONResponse(submission_document(row))


@router.get(
    "/submissions",
    response_model=None,
    responses={200: {"model": SubmissionListPublic}, **_responses(422)},
    summary="Submissions, newest first: filter by plan, state, backend, creation time",
)
async def list_all(
    principal: PrincipalDep,
    state: StateDep,
    plan_id: Annotated[str | None, Query(max_length=64)] = None,
    state_: Annotated[State | None, Query(alias="state")] = None,
    backend: Literal["slurm", "kubernetes"] | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    page_size: Annotated[int, Query(ge=1, le=200)] = 50,
    page_token: Annotated[str | None, Query(max_length=1000)] = None,
) -> JSONResponse:
    filters = SubmissionFilters(
        plan_id=plan_id,
        state=state_,
        backend=backend,
        created_after=created_after,
        created_before=created_before,
    )
    after = decode_cursor(page_token, sort="-created_at", filters=filters) if page_token else None
    page = await in_session(
        state,
        lambda s: submission_store.list_submissions(
            s, tenant=principal.tenant, filters=filters, page_size=page_size, after=after
        ),
    )
    token = encode_cursor(page.next_cursor, filters=filters) if page.next_cursor else None
    return JSONResponse(
        {"data": [submission_document(r) for r in page.rows], "next_page_token": token}
    )
