"""GET /plans (history, filterable) and GET /plans/{id} (one plan), server-rendered.

Browsers authenticate with `?key=` (kept in an HttpOnly cookie afterwards) or the cookie;
with --dev-open, no key is needed."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from api.auth import COOKIE, page_key, resolve
from api.calibrations import plan_calibration_view
from api.deps import StateDep
from api.limits import MAX_SCHEDULE_ACTIONS
from api.pages.charts import memory_chart_svg
from api.present import decode_cursor, encode_cursor
from api.problems import ProblemError
from api.routes.runs import run_document
from api.state import AppState
from api.store import plans as plan_store
from api.store import runs as run_store
from api.store import submissions as submission_store
from api.store.keys import Principal
from api.store.plans import PlanFilters
from api.submissions.states import submission_document
from api.timeline import plan_timeline_svg
from planner.plan import PlanResult
from planner.specs.gpu_names import canonical_gpu

router = APIRouter(include_in_schema=False)
SORTS = (
    "-created_at",
    "created_at",
    "step_time_s",
    "-step_time_s",
    "-tokens_per_s",
    "tokens_per_s",
)
GIB = 1024**3


@lru_cache(maxsize=1)
def templates() -> Jinja2Templates:
    t = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
    t.env.globals.update(
        fmt_s=fmt_s,
        gib=lambda b: f"{b / GIB:.2f}",
        pct=pct,
        recompute_summary=recompute_summary,
        block_counts=block_counts,
    )
    return t


def fmt_s(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.3f} s"


def pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.1%}"


def recompute_summary(modes: tuple[str, ...]) -> str:
    counts = {m: modes.count(m) for m in ("none", "selective", "full") if m in modes}
    return ", ".join(f"{n}× {m}" for m, n in counts.items())


def block_counts(blocks: dict[str, int]) -> str:
    """Decoder blocks per recompute mode, e.g. 'decoder blocks: 50 none, 46 selective'."""
    return "decoder blocks: " + ", ".join(f"{n} {m}" for m, n in blocks.items())


def _principal(request: Request) -> Principal | Response:
    key = page_key(request)
    principal = resolve(request, key)
    if principal is None:
        msg = "Unknown API key" if key else "An API key is required"
        return templates().TemplateResponse(
            request, "unauthorized.html", {"message": msg, "tenant": "—"}, status_code=401
        )
    if request.query_params.get("key"):  # keep it in a cookie, drop it from the URL
        query = {k: v for k, v in request.query_params.multi_items() if k != "key"}
        target = request.url.path + ("?" + urlencode(query) if query else "")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, request.query_params["key"], httponly=True, samesite="strict")
        return response
    return principal


def _gpu(value: str | None) -> str | None:
    """The catalog's name for a GPU filter; as typed when it names none (matches nothing)."""
    if not value:
        return None
    try:
        return canonical_gpu(value)
    except ValueError:
        return value


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


@router.get("/plans", response_class=HTMLResponse)
async def history_page(request: Request, state: StateDep) -> Response:
    principal = await run_in_threadpool(_principal, request)
    if isinstance(principal, Response):
        return principal
    q = request.query_params
    sort = q.get("sort") or "-created_at"
    sort = sort if sort in SORTS else "-created_at"
    filters = PlanFilters(
        model_name=q.get("model_name") or None,
        gpu=_gpu(q.get("gpu")),
        schedule=q.get("schedule") or None,
        tp=_int(q.get("tp")),
        pp=_int(q.get("pp")),
        dp=_int(q.get("dp")),
        tag=q.get("tag") or None,
    )
    try:
        after = (
            decode_cursor(q["page_token"], sort=sort, filters=filters)
            if q.get("page_token")
            else None
        )
    except ProblemError:
        after = None
    page = await run_in_threadpool(_page, state, principal.tenant, filters, sort, after)
    next_url = None
    if page.next_cursor is not None:
        params = {k: v for k, v in q.items() if k != "page_token" and v}
        params["page_token"] = encode_cursor(page.next_cursor, filters=filters)
        next_url = "/plans?" + urlencode(params)
    ctx = {
        "tenant": principal.tenant,
        "rows": page.rows,
        "next_url": next_url,
        "sorts": SORTS,
        "q": {
            **{k: q.get(k) for k in ("model_name", "gpu", "schedule", "tp", "pp", "dp", "tag")},
            "sort": sort,
        },
    }
    return templates().TemplateResponse(request, "plans.html", ctx)


def _page(state: AppState, tenant: str, filters: PlanFilters, sort: str, after: Any) -> Any:
    with state.sessions() as session:
        return plan_store.list_plans(
            session, tenant=tenant, filters=filters, sort=sort, page_size=50, after=after
        )


@router.get("/plans/{plan_id}", response_class=HTMLResponse)
async def plan_page(plan_id: str, request: Request, state: StateDep) -> Response:
    principal = await run_in_threadpool(_principal, request)
    if isinstance(principal, Response):
        return principal
    ctx = await run_in_threadpool(_plan_context, state, principal.tenant, plan_id)
    if ctx is None:
        return templates().TemplateResponse(
            request,
            "not_found.html",
            {"message": f"No plan {plan_id}", "tenant": principal.tenant},
            status_code=404,
        )
    return templates().TemplateResponse(request, "plan.html", ctx)


def _plan_context(state: AppState, tenant: str, plan_id: str) -> dict[str, Any] | None:
    with state.sessions() as session:
        row = plan_store.get_plan(session, tenant=tenant, plan_id=plan_id)
        if row is None:
            return None
        runs = [
            run_document(row, r)
            for r in run_store.list_runs(session, tenant=tenant, plan_id=plan_id)
        ]
        submissions = [
            submission_document(s)
            for s in submission_store.plan_submissions(session, tenant=tenant, plan_id=plan_id)
        ]
        cal_view = plan_calibration_view(session, tenant=tenant, row=row)
    result = PlanResult.model_validate(row.result)
    plan = result.plan
    small = plan.num_microbatches * plan.pp * plan.vpp <= MAX_SCHEDULE_ACTIONS
    return {
        "tenant": tenant,
        "row": row,
        "plan": plan,
        "pred": plan.prediction,
        "alternatives": result.alternatives,
        "runs": runs,
        "submissions": submissions,
        "cal_view": cal_view,
        "timeline_svg": plan_timeline_svg(plan) if small else "<p>(too large to draw)</p>",
        "memory_svg": memory_chart_svg(plan.prediction),
    }
