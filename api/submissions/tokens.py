"""Report tokens: what a submitted job posts its RunReport with.

A token (`mpr_` + 256 random bits) is made for one submission and stored only as its sha256.
It authenticates exactly one operation, `POST /v1/plans/{its plan}/runs`, for the
submission's tenant, while the job is open and for `submission_token_grace_s` after it ends;
everywhere else it is an unknown key (it is not an API key).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials
from starlette.concurrency import run_in_threadpool

from api.auth import bearer, require_principal
from api.problems import ProblemError
from api.state import AppState
from api.store import submissions as submission_store
from api.store.keys import Principal
from api.store.submissions import OPEN_STATES
from api.store.tables import SubmissionRow, utcnow

TOKEN_PREFIX = "mpr_"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_valid(row: SubmissionRow, now: datetime) -> bool:
    """Open jobs' tokens are valid; a finished job's until its `token_expires_at`."""
    if row.state in OPEN_STATES:
        return True
    return row.token_expires_at is not None and now < row.token_expires_at


@dataclass(frozen=True)
class Reporter:
    """Who posts a run: a tenant's key, or a submission's report token."""

    principal: Principal
    submission_id: str | None = None


def _lookup(state: AppState, token: str) -> SubmissionRow | None:
    with state.sessions() as session:
        return submission_store.by_token_hash(session, token_hash=token_hash(token))


async def require_reporter(
    plan_id: str,
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Reporter:
    """The caller of `POST /v1/plans/{plan_id}/runs`: an API key as anywhere, or a report
    token made for this plan (401 when unknown or expired, 403 for another plan)."""
    key = creds.credentials if creds is not None else None
    if key is None or not key.startswith(TOKEN_PREFIX):
        return Reporter(principal=await require_principal(request, creds))
    state: AppState = request.app.state.meshplan
    row = await run_in_threadpool(_lookup, state, key)
    if row is None or not token_valid(row, utcnow()):
        raise ProblemError(
            401,
            "Unauthorized",
            "unknown report token" if row is None else "this report token expired with its job",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if row.plan_id != plan_id:
        raise ProblemError(
            403,
            "Forbidden",
            f"this report token may only post runs of plan {row.plan_id!r}, not {plan_id!r}",
        )
    principal = Principal(tenant=row.tenant, admin=False, key_id=None)
    return Reporter(principal=principal, submission_id=row.id)


ReporterDep = Annotated[Reporter, Depends(require_reporter)]
