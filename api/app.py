"""The application factory: `create_app(settings)` composes the routers, errors and middleware."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from api import openapi_fixes, problems
from api.lifecycle import build_state, start, stop
from api.middleware import ServiceMiddleware
from api.ratelimit import buckets_for, declare_rate_limited
from api.routes import ROUTERS
from api.schemas.problem import Problem
from api.settings import Settings
from api.submit import Submitter


def create_app(
    settings: Settings | None = None, *, submitters: Mapping[str, Submitter] | None = None
) -> FastAPI:
    """The service. `submitters` (by backend name) replace the ones `settings.submit` builds."""
    settings = settings or Settings()
    state = build_state(settings, submitters)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        threads = ThreadPoolExecutor(settings.db_pool_size, "meshplan-db")  # api.deps.in_thread
        state.db_threads = threads
        try:
            await run_in_threadpool(start, state)
            yield
            stop(state)
        finally:
            state.db_threads = None
            # reads still queued are dropped; one still running ends in its thread, and the
            # event loop does not wait for it (a read against a database that is down waits
            # for its connect timeout)
            threads.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(
        title="meshplan",
        version="0.1.0",
        lifespan=lifespan,
        description="Auto-parallelism planner: plans, history, launch configs.",
    )
    app.state.meshplan = state
    problems.install(app)
    for router in ROUTERS:
        app.include_router(router)
    # one layer inside FastAPI's own: gzip, body limit, metrics, rate limit, URL check
    app.add_middleware(
        ServiceMiddleware,
        max_bytes=settings.max_body_bytes,
        metrics=state.metrics,
        buckets=buckets_for(settings),
        known=state.key_cache.__contains__,
    )
    _with_problem_schema(app)
    return app


def _with_problem_schema(app: FastAPI) -> None:
    """Every route's problem responses refer to one `Problem` schema component."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = build()
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            schemas.setdefault(
                "Problem", Problem.model_json_schema(ref_template="#/components/schemas/{model}")
            )
            schemas.update(
                Problem.model_json_schema(ref_template="#/components/schemas/{model}").pop(
                    "$defs", {}
                )
            )
            openapi_fixes.declare_malformed_json(doc)
            declare_rate_limited(doc)
            openapi_fixes.hoist_defs(doc)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
