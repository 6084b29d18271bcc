"""POST /v1/plans behind the route: resolve the profile, normalise, answer from the cache, or
run one search per distinct request (single-flight in-process and, through the jobs table's
unique in-flight key, across processes)."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool

from api.calibrations import resolve_calibration
from api.deps import in_thread
from api.doccache import Encoded
from api.limits import check_request
from api.outage import POLICY, is_outage, retry_while_down, write_later
from api.problems import ProblemError, from_document, problem_document
from api.schemas.plans import PlanCreate
from api.state import AppState
from api.store import jobs as job_store
from api.store import plans as plan_store
from api.store.db import read_session, session_scope
from api.store.ids import new_id
from api.store.keys import Principal
from api.store.plans import StoredPlan
from api.store.profiles import get_profile
from api.store.tables import JobRow
from planner.plan import PlanResult
from planner.search.progress import SearchProgress
from planner.specs import ModelProfile, PlanRequest, ProfileRef

POLL_S = 0.05
PROGRESS_EVERY_S = 0.5
STALE_GRACE_S = 60.0


@dataclass(frozen=True)
class Normalised:
    """A request ready to plan: the core request (stored profile and calibration inline), the
    service's fields beside it, and the document whose hash is the cache key (the core
    request and the tags: a plan's tags are part of what was asked)."""

    request: PlanRequest
    tags: tuple[str, ...]
    force: bool
    document: dict[str, Any]
    request_hash: str


@dataclass(frozen=True)
class Outcome:
    """What the route answers: a plan (created or from the cache) or a job to poll. A plan
    from the cache asked for `encoded` may come as its cached document alone (`document`,
    with `plan_id`, and no `plan`)."""

    plan: StoredPlan | None = None
    created: bool = False
    job_id: str | None = None
    plan_id: str | None = None
    document: Encoded | None = None


def request_hash(document: dict[str, Any]) -> str:
    raw = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()


def normalise(state: AppState, tenant: str, body: PlanRequest) -> Normalised:
    """Substitute a stored profile for `model.profile_id` and a stored calibration's constants
    for `calibration.id` (api.calibrations); hash the canonical document. `body` is a
    `PlanCreate`, or a core request (no tags, not forced)."""
    tags, force = (body.tags, body.force) if isinstance(body, PlanCreate) else ((), False)
    request = body.core() if isinstance(body, PlanCreate) else body
    model = request.model
    if isinstance(model, ProfileRef) and model.profile_id is not None:
        with state.sessions() as session:
            row = get_profile(session, tenant=tenant, profile_id=model.profile_id)
        if row is None:
            raise ProblemError(
                422,
                "Unknown profile",
                f"model.profile_id={model.profile_id!r} is not a stored profile of this tenant",
                kind="validation",
                errors=[
                    {
                        "field": "body.model.profile_id",
                        "message": "no such profile",
                        "value": model.profile_id,
                    }
                ],
            )
        profile = ModelProfile.model_validate(row.body)
        try:
            request = PlanRequest.model_validate(
                {
                    **request.model_dump(mode="json", exclude={"model"}),
                    "model": {"profile": profile.model_dump(mode="json")},
                }
            )
        except ValueError as exc:
            raise ProblemError(422, "Invalid request", str(exc)[:2000], kind="validation") from exc
    if request.calibration is not None and request.calibration.constants is None:
        with state.sessions() as session:
            request = resolve_calibration(session, tenant=tenant, request=request)
    document = {**request.model_dump(mode="json"), "tags": list(tags)}
    return Normalised(
        request=request,
        tags=tags,
        force=force,
        document=document,
        request_hash=request_hash(document),
    )


class Planner:
    """Runs searches for one app (its pool, its database, its metrics)."""

    def __init__(self, state: AppState) -> None:
        self.state = state

    async def submit(
        self, principal: Principal, request: PlanRequest, *, wait: bool, encoded: bool = False
    ) -> Outcome:
        """The plan for `request`, or its job (not `wait`). With `encoded`, a plan from the
        cache whose document (`view` "hit") is in `AppState.documents` comes as that
        document alone."""
        tenant = principal.tenant
        norm, cached = await in_thread(
            self.state, functools.partial(self._prepare, tenant, request, encoded)
        )
        if cached is not None:
            self.state.metrics.cache_hits.inc()
            return cached
        if self.state.queue is not None:  # PostgreSQL: a durable task for the workers
            return await self._enqueue(tenant, norm, wait=wait)
        while True:
            flight, joined = await run_in_threadpool(self._join_or_start, tenant, norm)
            if flight is not None:
                if joined:
                    self.state.metrics.single_flight_joins.inc()
                if not wait:
                    return Outcome(job_id=flight.job_id)
                # shielded: a client that goes away must not cancel a search others wait for
                plan_id, created = await asyncio.shield(asyncio.wrap_future(flight.future))
                row = await run_in_threadpool(self._get, tenant, plan_id)
                return Outcome(plan=row, created=created and not joined)
            # another process is solving the same request: follow its job row
            holder = await run_in_threadpool(self._holder, tenant, norm.request_hash)
            if holder is None:
                continue  # it finished between our claim and our look: claim again
            self.state.metrics.single_flight_joins.inc()
            if not wait:
                return Outcome(job_id=holder)
            followed = await self._follow(tenant, holder, norm)
            if followed is not None:
                return followed
            # its search failed for an outage, not for this request: claim it ourselves

    async def _enqueue(self, tenant: str, norm: Normalised, *, wait: bool) -> Outcome:
        """Join the request's running job or record one with its task (api.queue.enqueue),
        then, with `wait`, follow the job until a worker finishes it (and submit again when it
        failed with a 503: an outage, not this request)."""
        from api.queue.enqueue import submit_search

        while True:
            job_id, joined = await run_in_threadpool(submit_search, self.state, tenant, norm)
            if joined:
                self.state.metrics.single_flight_joins.inc()
            if not wait:
                return Outcome(job_id=job_id)
            done = await self._follow(tenant, job_id, norm)
            if done is not None:
                return Outcome(plan=done.plan, created=not joined)

    # --- pieces run in threads -----------------------------------------------------------

    def _prepare(
        self, tenant: str, request: PlanRequest, encoded: bool
    ) -> tuple[Normalised, Outcome | None]:
        """Normalise, check the limits and (unless forced) look the request up in the cache:
        one hop off the event loop for a cache hit. With `encoded`, the stored plan's id is
        looked up first (which plan answers a request can change: a forced request stores a
        newer one) and its document read only when `AppState.documents` lacks it."""
        norm = normalise(self.state, tenant, request)
        check_request(norm.request)
        if norm.force:
            return norm, None
        if not encoded:
            row = self._cached(tenant, norm.request_hash)
            return norm, None if row is None else Outcome(plan=row)
        plan_id = plan_store.find_cached_id(
            self.state.engine, tenant=tenant, request_hash=norm.request_hash
        )
        if plan_id is None:
            return norm, None
        document = self.state.documents.get(tenant, plan_id, "hit")
        if document is not None:
            return norm, Outcome(plan_id=plan_id, document=document)
        with read_session(self.state.sessions) as session:
            row = plan_store.get_plan(session, tenant=tenant, plan_id=plan_id)
        assert row is not None  # plans are never deleted
        return norm, Outcome(plan=row, plan_id=plan_id)

    def _cached(self, tenant: str, rhash: str) -> StoredPlan | None:
        with read_session(self.state.sessions) as session:
            return plan_store.find_cached(session, tenant=tenant, request_hash=rhash)

    def _get(self, tenant: str, plan_id: str) -> StoredPlan:
        with read_session(self.state.sessions) as session:
            row = plan_store.get_plan(session, tenant=tenant, plan_id=plan_id)
        assert row is not None  # written before the future resolved
        return row

    def _job(self, tenant: str, job_id: str) -> JobRow | None:
        with self.state.sessions() as session:
            return job_store.get_job(session, tenant=tenant, job_id=job_id)

    def _holder(self, tenant: str, rhash: str) -> str | None:
        with self.state.sessions() as session:
            job = job_store.holder(session, tenant=tenant, request_hash=rhash)
            if job is None:
                return None
            limit = min(self.state.settings.max_time_limit_s, 3600.0)
            if job_store.release_stale(session, job_id=job.id, older_than_s=limit + STALE_GRACE_S):
                session.commit()
                return None
            return job.id

    def _join_or_start(self, tenant: str, norm: Normalised) -> Any:
        key = None if norm.force else job_store.inflight_key(tenant, norm.request_hash)

        def claim() -> str | None:
            job = job_store.claim(
                self.state.sessions,
                tenant=tenant,
                request_hash=norm.request_hash,
                single_flight=not norm.force,
            )
            return None if job is None else job.id

        def work(job_id: str) -> tuple[str, bool]:
            return self._solve(tenant, job_id, norm)

        return self.state.pool.join_or_start(key, claim, work)

    async def _follow(self, tenant: str, job_id: str, norm: Normalised) -> Outcome | None:
        """The plan of another process's job once it lands; None when that job failed with a
        503 (a database outage during its search: the request itself may well succeed)."""
        deadline = time.monotonic() + norm.request.search.time_limit_s + STALE_GRACE_S
        while time.monotonic() < deadline:
            job = await run_in_threadpool(self._job, tenant, job_id)
            if job is not None and job.status != "running":
                if job.plan_id is not None:
                    return Outcome(plan=await run_in_threadpool(self._get, tenant, job.plan_id))
                error = job.error or {"title": "Search failed", "status": 500}
                if error.get("status") == 503:
                    return None
                raise from_document(error)
            await asyncio.sleep(POLL_S)
        raise ProblemError(
            503,
            "Search did not finish",
            f"job {job_id} is still running",
            headers={"Retry-After": str(POLICY.retry_after_s)},
        )

    def _progress_writer(self, job_id: str) -> Callable[[SearchProgress], None]:
        """Record a running search's progress on its job (the fraction and the search's
        numbers), at most every PROGRESS_EVERY_S. Progress is advisory: while the database
        is down the search goes on without it."""
        last = [0.0]

        def write(progress: SearchProgress) -> None:
            now = time.monotonic()
            if now - last[0] < PROGRESS_EVERY_S:
                return
            last[0] = now
            try:
                with session_scope(self.state.sessions) as session:
                    job_store.set_progress(session, job_id=job_id, fraction=progress)
            except Exception as exc:
                if not is_outage(exc):
                    raise

        return write

    def _solve(self, tenant: str, job_id: str, norm: Normalised) -> tuple[str, bool]:
        """In a pool thread: search, store the plan, finish the job. Returns (plan id, created).

        The job row is finished on every path, so its in-flight key never outlives the search:
        a plan found while the database is down is stored once it is back (`retry_while_down`,
        the caller waits), and a search that fails (an outage included) releases its job in the
        background so that its 503 goes out now and a resend can claim the request again."""
        state = self.state
        try:
            if not norm.force:
                cached = self._cached(tenant, norm.request_hash)
                if cached is not None:  # landed between our cache miss and our claim
                    retry_while_down(lambda: self._finish(job_id, plan_id=cached.id))
                    return cached.id, False
            state.metrics.searches.inc()
            start = time.perf_counter()
            found = run_search(
                norm.request,
                max_time_limit_s=state.settings.max_time_limit_s,
                on_progress=self._progress_writer(job_id),
            )
            state.metrics.search_seconds.labels("ok").observe(time.perf_counter() - start)
            plan_id = new_id()  # one id for every try: a retried store cannot store it twice
            retry_while_down(lambda: self._store(tenant, job_id, norm, found, plan_id))
            return plan_id, True
        except BaseException as exc:
            state.metrics.search_seconds.labels(type(exc).__name__).observe(0)
            error = problem_document(exc)
            write_later(lambda: self._finish(job_id, error=error), what=f"job {job_id} failed")
            raise

    def _store(
        self, tenant: str, job_id: str, norm: Normalised, found: SearchRun, plan_id: str
    ) -> None:
        """One transaction: the plan, and its job finished with it. A commit whose answer the
        outage swallowed may have landed: then the retry finds the plan's id taken, and done."""
        try:
            with session_scope(self.state.sessions) as session:
                plan_store.insert_plan(
                    session,
                    tenant=tenant,
                    request_hash=norm.request_hash,
                    request=norm.document,
                    result=found.result.model_dump(mode="json"),
                    tags=list(norm.tags),
                    plan_id=plan_id,
                )
                job_store.finish(session, job_id=job_id, plan_id=plan_id)
        except IntegrityError:
            if self._stored(tenant, plan_id) is None:
                raise

    def _stored(self, tenant: str, plan_id: str) -> StoredPlan | None:
        with self.state.sessions() as session:
            return plan_store.get_plan(session, tenant=tenant, plan_id=plan_id)

    def _finish(
        self, job_id: str, *, plan_id: str | None = None, error: dict[str, Any] | None = None
    ) -> None:
        with session_scope(self.state.sessions) as session:
            job_store.finish(session, job_id=job_id, plan_id=plan_id, error=error)


@dataclass(frozen=True)
class SearchRun:
    """A finished search: the planner's result and the time limit it ran under (the request's,
    capped by the service's `max_time_limit_s`)."""

    result: PlanResult
    time_limit_s: float


def run_search(
    request: PlanRequest,
    *,
    max_time_limit_s: float,
    on_progress: Callable[[SearchProgress], None] | None = None,
) -> SearchRun:
    """Call the planner's search with the time limit capped."""
    from planner.search import search

    limit = min(request.search.time_limit_s, max_time_limit_s)
    if limit < request.search.time_limit_s:
        request = request.model_copy(
            update={"search": request.search.model_copy(update={"time_limit_s": limit})}
        )
    # the caller's clock: the time limit covers the whole search, not only CP-SAT's solves
    result = search(request, on_progress=on_progress, clock=time.monotonic)
    return SearchRun(result=result, time_limit_s=limit)
