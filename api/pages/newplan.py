"""`/` and `/plans/new` (the planning form), and `/plans/jobs/{id}` (a search in progress).

The form posts to the same planner as `POST /v1/plans` (`api.planning.Planner`, without
waiting: the search runs as a job), then redirects to the job's progress page, which follows the
search (without JavaScript a meta refresh in <noscript>; with it, a poll of `/v1/jobs/{id}` in
the page session) and redirects to the plan page when the search ends.

CSRF: the POST is accepted only with the page session's token (`api.auth.csrf_token`, in a
hidden field of the form the session was served) and, when the browser sends `Origin`, only
from this service's own origin. The SameSite=Lax cookie is not sent on a cross-site POST.
With --dev-open there is no key, so the token is public: the Origin check is what remains.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from api.auth import csrf_ok, page_key
from api.deps import StateDep
from api.pages import planform
from api.pages.common import not_found, page_principal, session_csrf, templates
from api.planning import Planner
from api.problems import ProblemError, problem_document
from api.routes.jobs import job_document
from api.state import AppState
from api.store import plans as plan_store
from api.store.jobs import get_job
from api.store.keys import Principal
from api.store.plans import PlanFilters
from planner.errors import SpecError

router = APIRouter(include_in_schema=False)
REFRESH_S = 1
RECENT = 8


@router.get("/", response_class=HTMLResponse)
async def start_page(request: Request, state: StateDep) -> Response:
    """The start page: the planning form and the tenant's latest plans."""
    return await form_page(request, state)


@router.get("/plans/new", response_class=HTMLResponse)
async def form_page(request: Request, state: StateDep) -> Response:
    principal = await run_in_threadpool(page_principal, request)
    if isinstance(principal, Response):
        return principal
    return await _render(request, state, principal, planform.blank(), 200)


@router.post("/plans/new", response_class=HTMLResponse)
async def submit_form(request: Request, state: StateDep) -> Response:
    principal = await run_in_threadpool(page_principal, request)
    if isinstance(principal, Response):
        return principal
    form = planform.parse_body(await request.body())
    token = dict(_pairs(await request.body())).get("csrf")
    if not _same_origin(request) or not csrf_ok(page_key(request), token):
        form.add("", "this form was not served to this session (CSRF check); reload the page")
        return await _render(request, state, principal, form, 403)
    plan_request = planform.build_request(form)
    if plan_request is None:
        return await _render(request, state, principal, form, 422)
    try:
        outcome = await Planner(state).submit(principal, plan_request, wait=False)
    except (ProblemError, SpecError) as exc:  # limits, an unknown profile_id, a spec rule
        problem = problem_document(exc)
        planform.place_problem(form, problem)
        return await _render(request, state, principal, form, int(problem["status"]))
    if outcome.plan is not None:
        return RedirectResponse(f"/plans/{outcome.plan.id}", status_code=303)
    return RedirectResponse(f"/plans/jobs/{outcome.job_id}", status_code=303)


@router.get("/plans/jobs/{job_id}", response_class=HTMLResponse)
async def job_page(job_id: str, request: Request, state: StateDep) -> Response:
    principal = await run_in_threadpool(page_principal, request)
    if isinstance(principal, Response):
        return principal
    job = await run_in_threadpool(_job, state, principal.tenant, job_id)
    if job is None:
        return not_found(request, principal.tenant, f"No search job {job_id}")
    if job["plan_id"]:
        return RedirectResponse(f"/plans/{job['plan_id']}", status_code=303)
    ctx = {"tenant": principal.tenant, "job": job, "refresh_s": REFRESH_S}
    headers = {"Retry-After": str(REFRESH_S)} if job["status"] == "running" else None
    return templates().TemplateResponse(request, "job.html", ctx, headers=headers)


def _pairs(body: bytes) -> list[tuple[str, str]]:
    return parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True)


def _same_origin(request: Request) -> bool:
    """No `Origin` (a client that sends none) or this service's own; "null" is refused."""
    origin = request.headers.get("origin")
    return origin is None or origin == f"{request.url.scheme}://{request.url.netloc}"


def _job(state: AppState, tenant: str, job_id: str) -> dict[str, Any] | None:
    with state.sessions() as session:
        job = get_job(session, tenant=tenant, job_id=job_id)
        return None if job is None else job_document(job)


def _recent(state: AppState, tenant: str) -> list[Any]:
    page = plan_store.list_plans(
        state.engine,
        tenant=tenant,
        filters=PlanFilters(),
        sort="-created_at",
        page_size=RECENT,
        after=None,
    )
    return page.rows


async def _render(
    request: Request, state: StateDep, principal: Principal, form: planform.FormState, status: int
) -> Response:
    recent = await run_in_threadpool(_recent, state, principal.tenant)
    ctx = {
        "tenant": principal.tenant,
        "form": form,
        "v": form.values,
        "errors": form.errors,
        "csrf": session_csrf(request),
        "recent": recent,
        **planform.choices(),
    }
    return templates().TemplateResponse(request, "new.html", ctx, status_code=status)
