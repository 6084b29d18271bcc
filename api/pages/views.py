"""GET /plans (history, filterable), /plans/{id} (one plan) and /plans/{id}/alternatives/{i}
(one alternative, evaluated again), server-rendered; the form's routes come first
(`api.pages.newplan`) so that `/plans/new` is not taken for a plan id.

Browsers authenticate in the page session (`api.pages.common.page_principal`)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from api.calibrations import plan_calibration_view
from api.deps import StateDep
from api.limits import MAX_SCHEDULE_ACTIONS
from api.pages import newplan
from api.pages.charts import Point, memory_chart_svg, tradeoff_chart_svg
from api.pages.common import not_found, page_principal, templates
from api.pages.compare import KNOBS, differences, knob_value, launch_options
from api.present import decode_cursor, encode_cursor
from api.problems import ProblemError
from api.routes.runs import run_document
from api.schemas.plans import core_document
from api.state import AppState
from api.store import plans as plan_store
from api.store import runs as run_store
from api.store import submissions as submission_store
from api.store.plans import PlanFilters
from api.submissions.states import submission_document
from api.timeline import plan_timeline_svg
from planner.cost import fixed_plan
from planner.errors import SpecError
from planner.plan import Plan, PlanResult
from planner.specs import PlanRequest
from planner.specs.gpu_names import canonical_gpu

router = APIRouter(include_in_schema=False)
router.include_router(newplan.router)
SORTS = (
    "-created_at",
    "created_at",
    "step_time_s",
    "-step_time_s",
    "-tokens_per_s",
    "tokens_per_s",
)
FOLD_ROWS = 16  # a stage table longer than this is folded in a <details>
INLINE_SVG_CHARS = 500_000  # a longer timeline is an <img> of timeline.svg, not inline
REQUEST_CHARS = 20_000  # the request shown on the page; the JSON link has all of it


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
    principal = await run_in_threadpool(page_principal, request)
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
    return plan_store.list_plans(
        state.engine, tenant=tenant, filters=filters, sort=sort, page_size=50, after=after
    )


@router.get("/plans/{plan_id}", response_class=HTMLResponse)
async def plan_page(plan_id: str, request: Request, state: StateDep) -> Response:
    principal = await run_in_threadpool(page_principal, request)
    if isinstance(principal, Response):
        return principal
    ctx = await run_in_threadpool(_plan_context, state, principal.tenant, plan_id)
    if ctx is None:
        return not_found(request, principal.tenant, f"No plan {plan_id}")
    return templates().TemplateResponse(request, "plan.html", ctx)


@router.get("/plans/{plan_id}/alternatives/{index}", response_class=HTMLResponse)
async def alternative_page(plan_id: str, index: int, request: Request, state: StateDep) -> Response:
    """One alternative, evaluated again with the plan's stored request (the cost model the
    service runs now), beside the chosen plan."""
    principal = await run_in_threadpool(page_principal, request)
    if isinstance(principal, Response):
        return principal
    ctx = await run_in_threadpool(_alternative_context, state, principal.tenant, plan_id, index)
    if ctx is None:
        return not_found(request, principal.tenant, f"No alternative {index} of plan {plan_id}")
    return templates().TemplateResponse(request, "alternative.html", ctx)


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
    raw_alts = row.result.get("alternatives") or []
    alternatives: list[dict[str, Any]] = [
        {
            "index": i,
            "plan": alt,
            "href": f"/plans/{row.id}/alternatives/{i}",
            "differences": _stored_differences(raw_alts, i) or differences(plan, alt),
        }
        for i, alt in enumerate(result.alternatives)
    ]
    points = [
        Point(
            _label(alt),
            alt.prediction.step_time_s,
            alt.prediction.peak_memory_bytes,
            f"/plans/{row.id}/alternatives/{i}",
            tag=f"#{i + 1}",
        )
        for i, alt in enumerate(result.alternatives)
    ]
    points += measured_points(runs)
    points.append(
        Point(
            _label(plan),
            plan.prediction.step_time_s,
            plan.prediction.peak_memory_bytes,
            None,
            chosen=True,
        )
    )
    return {
        "tenant": tenant,
        "row": row,
        "plan": plan,
        "pred": plan.prediction,
        "search": search_summary(row.result, row.request),
        "request_json": _request_json(row.request),
        "cost_model_version": _cost_model_version(row.result),
        "alternatives": alternatives,
        "launch": launch_options(plan, row.id),
        "runs": runs,
        "runs_by_id": {r["id"]: r for r in runs},
        "submissions": submissions,
        "cal_view": cal_view,
        "timeline_svg": _timeline(plan, f"/v1/plans/{row.id}/timeline.svg"),
        "memory_svg": memory_chart_svg(plan.prediction),
        "tradeoff_svg": tradeoff_chart_svg(points, plan.prediction.memory_cap_bytes),
        "fold_rows": FOLD_ROWS,
    }


def _alternative_context(
    state: AppState, tenant: str, plan_id: str, index: int
) -> dict[str, Any] | None:
    with state.sessions() as session:
        row = plan_store.get_plan(session, tenant=tenant, plan_id=plan_id)
    if row is None:
        return None
    result = PlanResult.model_validate(row.result)
    if not 0 <= index < len(result.alternatives):
        return None
    stored = result.alternatives[index]
    error = None
    try:
        request = PlanRequest.model_validate(core_document(row.request))
        alt = fixed_plan(request, stored.candidate())
    except (ValueError, SpecError) as exc:  # a stored request today's specs refuse
        alt, error = stored, str(exc)[:500]
    return {
        "tenant": tenant,
        "row": row,
        "index": index,
        "chosen": result.plan,
        "plan": alt,
        "pred": alt.prediction,
        "stored": stored.prediction,
        "evaluation_error": error,
        "differences": differences(result.plan, alt),
        "knobs": [(label, knob_value(result.plan, a), knob_value(alt, a)) for label, a in KNOBS],
        "timeline_svg": _timeline(alt, None),
        "memory_svg": memory_chart_svg(alt.prediction),
        "fold_rows": FOLD_ROWS,
    }


def measured_points(runs: list[dict[str, Any]]) -> list[Point]:
    """The measured runs on the trade-off chart: measured step time against the largest peak
    memory a stage reported."""
    out = []
    for r in runs:
        report = r["report"]
        peaks = [s.get("peak_memory_bytes") or 0.0 for s in report.get("stages") or ()]
        step = report.get("step_time_s")
        if peaks and max(peaks) > 0 and step:
            label = f"measured run {r['id'][:8]} ({report.get('device', '?')})"
            out.append(
                Point(label, float(step), float(max(peaks)), f"#run-{r['id']}", measured=True)
            )
    return out


def _timeline(plan: Plan, url: str | None) -> str:
    """The timeline inline; past INLINE_SVG_CHARS, an <img> of its own URL (when it has one),
    so the page stays small and the drawing loads (compressed) beside it."""
    if plan.num_microbatches * plan.pp * plan.vpp > MAX_SCHEDULE_ACTIONS:
        return "<p>(too large to draw)</p>"
    svg = plan_timeline_svg(plan)
    if len(svg) <= INLINE_SVG_CHARS or url is None:
        return svg
    return (
        f"<img src='{url}' alt='pipeline timeline' loading='lazy' style='max-width:100%'>"
        f"<p class='muted'>({len(svg) / 1e6:.1f} MB of SVG, drawn from "
        f"<a href='{url}'>timeline.svg</a>)</p>"
    )


def _label(plan: Plan) -> str:
    degrees = f"tp{plan.tp} pp{plan.pp} dp{plan.dp} vpp{plan.vpp}"
    return f"{degrees} {plan.schedule} mbs{plan.micro_batch_size}"


def _stored_differences(raw_alts: list[Any], index: int) -> list[str] | None:
    """Differences the search stored with an alternative (a list of strings), if any."""
    doc = raw_alts[index] if index < len(raw_alts) else None
    diffs = doc.get("differences") if isinstance(doc, dict) else None
    if isinstance(diffs, list) and all(isinstance(d, str) for d in diffs):
        return diffs
    return None


def search_summary(result: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The search's status, objective, time to solve and, when the search stored them, its
    lower bound and gap (None: not stored)."""
    stats = result.get("search") or {}
    details = stats.get("details") or {}

    def pick(name: str) -> Any:
        value = stats.get(name)
        if value is None:
            value = details.get(name)
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None

    return {
        "status": stats.get("status", "—"),
        "mode": stats.get("mode", "—"),
        "objective": request.get("objective", "time") if isinstance(request, dict) else "—",
        "wall_time_s": pick("wall_time_s"),
        "time_limit_s": pick("time_limit_s"),
        "lower_bound_s": pick("lower_bound_s"),
        "gap": pick("gap"),
        "candidates_considered": pick("candidates_considered"),
        "solver_calls": pick("solver_calls"),
    }


def _cost_model_version(result: dict[str, Any]) -> str | None:
    plan = result.get("plan") or {}
    version = plan.get("cost_model_version", result.get("cost_model_version"))
    return None if version is None else str(version)


def _request_json(request: Any) -> str:
    text = json.dumps(request, indent=1, sort_keys=True)
    if len(text) <= REQUEST_CHARS:
        return text
    return text[:REQUEST_CHARS] + f"\n… ({len(text):,} characters; the JSON link has all of it)"
