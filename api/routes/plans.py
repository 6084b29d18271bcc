"""/v1/plans: create (cached, idempotent, single-flight, optionally async), get, history."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import Row
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.deps import (
    LazyHeadersRoute,
    PrincipalDep,
    PrincipalRoute,
    StateDep,
    in_session,
    in_thread,
)
from api.doccache import CacheKey, Encoded
from api.idempotent import expiry_of, replay_or_refuse
from api.jsonbody import JSONBody, encode, encoded_response
from api.outage import is_outage, write_later
from api.planning import Outcome, Planner
from api.present import decode_cursor, encode_cursor, history_json, plan_document
from api.problems import ProblemError, field_problem, problem_document
from api.query import query_openapi, read_query
from api.replan import ReplanBody, calibration_choice, replan
from api.schemas.plans import JobPublic, PlanCreate, PlanListPublic, PlanPublic, PlanQuery
from api.schemas.problem import problem_responses
from api.state import AppState, app_state
from api.store import idempotency
from api.store import plans as plan_store
from api.store import submissions as submission_store
from api.store.keys import Principal
from api.store.plans import PlanFilters
from api.store.tables import SubmissionRow
from api.submissions.states import submission_document
from planner.specs import PlanRequest
from planner.specs.gpu_names import canonical_gpu

router = APIRouter(prefix="/v1", tags=["plans"])

_LOCATION = {"Location": {"description": "the plan's URL", "schema": {"type": "string"}}}
_JOB_LOCATION = {"Location": {"description": "the job's URL", "schema": {"type": "string"}}}


async def create_plan(
    body: PlanCreate,
    request: Request,
    principal: PrincipalDep,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=200)] = None,
    prefer: Annotated[str | None, Header()] = None,
) -> Response:
    state = app_state(request.app)  # the hot routes: one dependency node fewer than StateDep
    respond_async = prefer is not None and "respond-async" in prefer.lower()
    tenant = principal.tenant
    if idempotency_key is None:
        answer = await _create(state, principal, body, respond_async)
        return answer.response(state, request)
    claim = await run_in_threadpool(
        idempotency.begin,
        state.sessions,
        tenant=tenant,
        key=idempotency_key,
        fingerprint=body_fingerprint(body),
        stale_after_s=state.settings.max_time_limit_s + 60.0,
        expiry=expiry_of(state.settings),
    )
    replayed = replay_or_refuse(claim)
    if replayed is not None:
        return replayed
    try:
        answer = await _create(state, principal, body, respond_async)
    except BaseException as exc:
        problem = problem_document(exc)
        if problem["status"] < 500 and isinstance(exc, Exception):
            await _settle(
                lambda: _complete(state, tenant, idempotency_key, problem["status"], problem, {}),
                what=f"idempotency key {idempotency_key!r} completed",
            )
        else:  # a 5xx (an outage included): the key is free for the client's retry
            await _settle(
                lambda: _abandon(state, tenant, idempotency_key),
                what=f"idempotency key {idempotency_key!r} abandoned",
            )
        raise
    doc = orjson.loads(answer.document.body)
    await _settle(
        lambda: _complete(state, tenant, idempotency_key, answer.status, doc, answer.headers),
        what=f"idempotency key {idempotency_key!r} completed",
    )
    return answer.response(state, request)


# declared as the decorator would (same place in the router, so the same /openapi.json), but
# served as a LazyHeadersRoute: Idempotency-Key and Prefer are read only when sent
router.add_api_route(
    "/plans",
    create_plan,
    methods=["POST"],
    status_code=201,
    response_model=None,
    summary="Plan a training run (or return the stored plan for the same request)",
    responses={
        200: {"model": PlanPublic, "description": "a stored plan for the same request (cache hit)"},
        201: {"model": PlanPublic, "description": "a new plan", "headers": _LOCATION},
        202: {
            "model": JobPublic,
            "description": "search started (Prefer: respond-async)",
            "headers": _JOB_LOCATION,
        },
        **problem_responses(409, 422, 503),
    },
    route_class_override=LazyHeadersRoute,
)


@dataclass(frozen=True)
class _Answer:
    """A POST /v1/plans answer: status, the encoded document, headers, and where the document
    is kept in `AppState.documents` (None: not kept)."""

    status: int
    document: Encoded
    headers: dict[str, str]
    cached: CacheKey | None = None

    def response(self, state: AppState, request: Request) -> Response:
        return encoded_response(
            state.documents,
            self.cached,
            self.document,
            accept_encoding=request.headers.get("accept-encoding", ""),
            status_code=self.status,
            headers=self.headers,
        )


async def _settle(write: Callable[[], None], *, what: str) -> None:
    """Record an idempotency key's outcome now, or, while the database is down, once it is
    back (the response does not wait for it, and the key must not stay in flight)."""
    try:
        await run_in_threadpool(write)
    except Exception as exc:
        if not is_outage(exc):
            raise
        write_later(write, what=what)


def body_fingerprint(body: PlanRequest) -> str:
    """What an Idempotency-Key is bound to: the request body, with defaults filled in (a core
    request is a `PlanCreate` without tags, not forced)."""
    doc = {"tags": [], "force": False, **body.model_dump(mode="json")}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


async def _create(
    state: AppState, principal: Principal, body: PlanRequest, respond_async: bool
) -> _Answer:
    tenant = principal.tenant
    outcome: Outcome = await Planner(state).submit(
        principal, body, wait=not respond_async, encoded=True
    )
    if outcome.job_id is not None:
        job = await run_in_threadpool(_job_doc, state, tenant, outcome.job_id)
        headers = {"Location": f"/v1/jobs/{outcome.job_id}", "Preference-Applied": "respond-async"}
        return _Answer(202, Encoded(encode(job)), headers)
    if outcome.document is not None:  # from the cache, its document too
        assert outcome.plan_id is not None
        key: CacheKey = (tenant, outcome.plan_id, "hit")
        return _Answer(200, outcome.document, _plan_location(outcome.plan_id), key)
    assert outcome.plan is not None
    plan_id = outcome.plan.id
    doc = encode(plan_document(outcome.plan, cache_hit=not outcome.created))
    if outcome.created:
        return _Answer(201, Encoded(doc), _plan_location(plan_id))
    document = state.documents.put(tenant, plan_id, "hit", doc)
    return _Answer(200, document, _plan_location(plan_id), (tenant, plan_id, "hit"))


def _plan_location(plan_id: str) -> dict[str, str]:
    return {"Location": f"/v1/plans/{plan_id}"}


def _job_doc(state: AppState, tenant: str, job_id: str) -> dict[str, Any]:
    from api.routes.jobs import job_document
    from api.store.jobs import get_job

    with state.sessions() as session:
        job = get_job(session, tenant=tenant, job_id=job_id)
    assert job is not None
    return job_document(job)


def _complete(
    state: AppState,
    tenant: str,
    key: str,
    status: int,
    body: dict[str, Any],
    headers: dict[str, str],
) -> None:
    with state.sessions() as session:
        idempotency.complete(
            session, tenant=tenant, key=key, status=status, body=body, headers=headers
        )
        session.commit()


def _abandon(state: AppState, tenant: str, key: str) -> None:
    with state.sessions() as session:
        idempotency.abandon(session, tenant=tenant, key=key)
        session.commit()


async def get_plan(plan_id: str, request: Request, principal: PrincipalDep) -> Response:
    """Answered as the stored JSON (the response is not validated again: a large plan's
    result takes milliseconds to validate, and it was validated when stored). The document of
    a plan without submissions is kept encoded (api.doccache): a later GET asks the database
    only whether the plan has submissions now."""
    state = app_state(request.app)
    tenant = principal.tenant
    accept_encoding = request.headers.get("accept-encoding", "")
    key: CacheKey = (tenant, plan_id, "get")
    entry = state.documents.get(*key)
    if entry is not None and not await in_thread(
        state, lambda: plan_store.has_submissions(state.engine, tenant=tenant, plan_id=plan_id)
    ):
        return encoded_response(state.documents, key, entry, accept_encoding=accept_encoding)
    row, submissions = await in_session(state, lambda s: _plan_with_submissions(s, tenant, plan_id))
    if row is None:
        raise ProblemError(404, "Not found", f"no plan {plan_id!r}")
    doc = plan_document(row, cache_hit=False)
    doc["submissions"] = [submission_document(r) for r in submissions]
    if submissions:  # they change: not kept
        return JSONBody(doc)
    entry = state.documents.put(*key, encode(doc))
    return encoded_response(state.documents, key, entry, accept_encoding=accept_encoding)


# declared as the decorator would (same place in the router, so the same /openapi.json), but
# served as a PrincipalRoute: the principal without FastAPI's dependency solving
router.add_api_route(
    "/plans/{plan_id}",
    get_plan,
    methods=["GET"],
    response_model=PlanPublic,
    responses=problem_responses(404),
    summary="One stored plan",
    route_class_override=PrincipalRoute,
)


def _plan_with_submissions(
    session: Session, tenant: str, plan_id: str
) -> tuple[Row[Any] | None, list[SubmissionRow]]:
    """The plan's document columns and its submissions: one statement for a plan that has
    none (most plans)."""
    row = plan_store.get_plan(session, tenant=tenant, plan_id=plan_id)
    if row is None or not row.has_submissions:
        return row, []
    return row, submission_store.plan_submissions(session, tenant=tenant, plan_id=plan_id)


async def list_plans(request: Request, principal: PrincipalDep) -> Response:
    state = app_state(request.app)
    q = read_query(PlanQuery, request)
    if q.min_gpus is not None and q.max_gpus is not None and q.min_gpus > q.max_gpus:
        raise field_problem("query.min_gpus", f"min_gpus={q.min_gpus} > max_gpus={q.max_gpus}")
    if (
        q.created_after is not None
        and q.created_before is not None
        and _timestamp(q.created_after) >= _timestamp(q.created_before)
    ):
        raise field_problem(
            "query.created_after",
            f"created_after={q.created_after.isoformat()} is not before "
            f"created_before={q.created_before.isoformat()}",
        )
    filters = PlanFilters(
        model_name=q.model_name,
        model_hash=q.model_hash,
        gpu=_filter_gpu(q.gpu),
        min_gpus=q.min_gpus,
        max_gpus=q.max_gpus,
        schedule=q.schedule,
        tp=q.tp,
        pp=q.pp,
        dp=q.dp,
        created_after=q.created_after,
        created_before=q.created_before,
        tag=q.tag,
        cost_model_version=q.cost_model_version,
        calibration_id=q.calibration_id,
    )
    sort = q.sort
    after = decode_cursor(q.page_token, sort=sort, filters=filters) if q.page_token else None
    page = await in_thread(
        state,
        lambda: plan_store.list_plans(
            state.engine,
            tenant=principal.tenant,
            filters=filters,
            sort=sort,
            page_size=q.page_size,
            after=after,
        ),
    )
    token = encode_cursor(page.next_cursor, filters=filters) if page.next_cursor else None
    # PlanListPublic's JSON, encoded from the rows (not by FastAPI's response serialisation)
    return Response(history_json(page.rows, token), media_type="application/json")


# as get_plan: declared in the decorator's place, served as a PrincipalRoute (its query is
# read as one model by read_query, so the endpoint declares no parameter of its own)
router.add_api_route(
    "/plans",
    list_plans,
    methods=["GET"],
    response_model=PlanListPublic,
    responses=problem_responses(422),
    summary="Plan history: filter, sort, cursor pagination",
    openapi_extra=query_openapi(PlanQuery),
    route_class_override=PrincipalRoute,
)


@router.post(
    "/plans/{plan_id}/replan",
    status_code=201,
    response_model=None,
    responses={
        200: {"description": "today's plan for the request was stored already"},
        201: {"description": "a new plan, with its diff against the old one", "headers": _LOCATION},
        **problem_responses(404, 422, 503),
    },
    summary="Plan a stored plan's request again under today's cost model; diff old and new",
)
async def replan_plan(
    plan_id: str, principal: PrincipalDep, state: StateDep, body: ReplanBody | None = None
) -> JSONResponse:
    outcome, doc = await replan(state, principal, plan_id, calibration_choice(body))
    assert outcome.plan is not None
    headers = {"Location": f"/v1/plans/{outcome.plan.id}"}
    return JSONBody(doc, status_code=201 if outcome.created else 200, headers=headers)


def _timestamp(moment: datetime) -> float:
    """Seconds since the epoch; a time without a zone is UTC (as the store keeps them)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _filter_gpu(gpu: str | None) -> str | None:
    """The catalog's name for a GPU filter (stored plans carry it); 422 when unknown or
    ambiguous, as that filter could never match."""
    if gpu is None:
        return None
    try:
        return canonical_gpu(gpu)
    except ValueError as exc:
        raise field_problem("query.gpu", str(exc), value=gpu) from None
