"""An `Idempotency-Key` claim as HTTP: the stored response of a completed request, or the
problem that a reused or still-running key is (plans and submissions answer alike)."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from api.problems import ProblemError
from api.schemas.problem import PROBLEM_JSON
from api.settings import Settings
from api.store.idempotency import Claim, Expiry


def expiry_of(settings: Settings) -> Expiry:
    """How long the service remembers an Idempotency-Key (`idempotency_ttl_s`)."""
    return Expiry(
        ttl_s=settings.idempotency_ttl_s, purge_interval_s=settings.idempotency_purge_interval_s
    )


def replay_or_refuse(claim: Claim) -> JSONResponse | None:
    """None for a new key (the caller does the work); the stored response, marked
    `Idempotent-Replayed`, for a completed one; 422 for a key reused with another body, 409 for
    one whose request is still running."""
    if claim.outcome == "mismatch":
        raise ProblemError(
            422,
            "Idempotency-Key reused",
            "this Idempotency-Key was used with a different body",
            kind="idempotency-mismatch",
        )
    if claim.outcome == "in_flight":
        raise ProblemError(
            409,
            "Request in flight",
            "a request with this Idempotency-Key is still running",
            kind="idempotency-in-flight",
        )
    if claim.outcome != "replay" or claim.row is None:
        return None
    row = claim.row
    status_code = row.response_status or 200
    return JSONResponse(
        row.response_body or {},
        status_code=status_code,
        headers={**(row.response_headers or {}), "Idempotent-Replayed": "true"},
        media_type=PROBLEM_JSON if status_code >= 400 else "application/json",
    )
