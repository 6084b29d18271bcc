"""/healthz (the process answers), /readyz (the database answers), /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from api.deps import StateDep
from api.outage import POLICY
from api.problems import problem_response
from api.schemas.problem import problem_responses
from api.store.db import ping

router = APIRouter(tags=["operations"])

_STATUS = {
    "application/json": {
        "schema": {
            "type": "object",
            "properties": {"status": {"type": "string"}},
            "required": ["status"],
        }
    }
}


@router.get(
    "/healthz", response_model=None, responses={200: {"content": _STATUS, "description": "alive"}}
)
async def healthz() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@router.get(
    "/readyz",
    response_model=None,
    responses={
        200: {"content": _STATUS, "description": "database reachable"},
        **problem_responses(503),
    },
)
async def readyz(state: StateDep) -> Response:
    try:
        await run_in_threadpool(ping, state.engine)
    except SQLAlchemyError as exc:
        return problem_response(
            503,
            "Database unreachable",
            type(exc).__name__,
            kind="database-unavailable",
            headers={"Retry-After": str(POLICY.retry_after_s)},
        )
    return JSONResponse({"status": "ready"})


@router.get(
    "/metrics",
    response_model=None,
    responses={
        200: {
            "content": {"text/plain": {"schema": {"type": "string"}}},
            "description": "Prometheus text format",
        }
    },
)
async def metrics(state: StateDep) -> Response:
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
