"""What a worker runs: the search task, the stalled-task sweep and the submission poll.

The search task is idempotent on its job: it does nothing for a job that is no longer
running, and it stores the plan and finishes the job in one transaction that holds the job
row's lock, so two runs of one task (a worker presumed dead that was only slow) store one
plan and finish the job once. A search's own failure (infeasible, invalid) finishes the job
with its problem document and is not retried; an error of the database or the worker itself
propagates, and procrastinate retries the task (`queue_max_attempts` runs in all).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import procrastinate
from procrastinate import exceptions as pexc
from procrastinate import jobs as pjobs
from procrastinate import sql as psql
from procrastinate.job_context import AbortReason, JobContext
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from api.metrics import Metrics
from api.planning import run_search
from api.problems import problem_document
from api.queue.app import POLL_SUBMISSIONS_TASK, RETRY_STALLED_TASK, SEARCH_QUEUE, SEARCH_TASK
from api.schemas.plans import core_document
from api.settings import Settings
from api.store import jobs as job_store
from api.store import plans as plan_store
from api.store.db import session_scope
from api.submissions.poller import Poller
from planner.specs import PlanRequest

log = logging.getLogger("meshplan.queue")

PROGRESS_EVERY_S = 0.5  # at most one progress write per job this often
PERSIST_FIRST_WAIT_S = 0.5  # storing a result while the database is away: first wait ...
PERSIST_MAX_WAIT_S = 5.0  # ... doubling up to this


class QueueTasks:
    """The tasks of one worker process, registered on its procrastinate App."""

    def __init__(
        self,
        app: procrastinate.App,
        sessions: sessionmaker[Session],
        settings: Settings,
        metrics: Metrics,
        poller: Poller | None,
    ) -> None:
        self.app = app
        self.sessions = sessions
        self.settings = settings
        self.metrics = metrics
        self.poller = poller
        self._lock = threading.Lock()
        self.running: set[int] = set()  # procrastinate ids of the searches running here
        retry = procrastinate.RetryStrategy(max_attempts=settings.queue_max_attempts - 1)
        app.task(name=SEARCH_TASK, queue=SEARCH_QUEUE, pass_context=True, retry=retry)(self.search)
        app.periodic(cron=_every(settings.queue_stalled_check_s))(
            app.task(name=RETRY_STALLED_TASK, queue=SEARCH_QUEUE)(self.retry_stalled)
        )
        if poller is not None:
            seconds = max(1, round(settings.submission_poll_interval_s))
            app.periodic(cron=_every(seconds))(
                app.task(name=POLL_SUBMISSIONS_TASK)(self.poll_submissions)
            )

    # --- the search ----------------------------------------------------------------------

    def search(
        self,
        context: JobContext,
        *,
        job_id: str,
        tenant: str,
        request_hash: str,
        document: dict[str, Any],
        force: bool,
    ) -> str:
        """Run one search job to its end; returns how it ended (procrastinate logs it)."""
        task_id = context.job.id
        assert task_id is not None
        with self._lock:
            self.running.add(task_id)
        try:
            return self._search(context, job_id, tenant, request_hash, document, force)
        except BaseException as exc:
            # no run follows the last one, nor one aborted on request (not at shutdown): its
            # job must not stay running (and hold its in-flight key)
            requested = (
                isinstance(exc, pexc.JobAborted) and context.abort_reason() != AbortReason.SHUTDOWN
            )
            if requested or context.job.attempts + 1 >= self.settings.queue_max_attempts:
                self._abandon({"job_id": job_id}, context.job.attempts + 1)
            raise
        finally:
            with self._lock:
                self.running.discard(task_id)

    def _search(
        self,
        context: JobContext,
        job_id: str,
        tenant: str,
        request_hash: str,
        document: dict[str, Any],
        force: bool,
    ) -> str:
        with self.sessions() as session:
            job = job_store.get_job(session, tenant=tenant, job_id=job_id)
            if job is None or job.status != "running":
                return f"job {job_id} already finished"
            cached = (
                None
                if force
                else plan_store.find_cached(session, tenant=tenant, request_hash=request_hash)
            )
        if cached is not None:  # an identical request's plan landed after this was queued
            with session_scope(self.sessions) as session:
                job_store.finish(session, job_id=job_id, plan_id=cached.id)
            return f"job {job_id}: cached plan {cached.id}"
        return self._run(context, job_id, tenant, request_hash, document)

    def _run(
        self,
        context: JobContext,
        job_id: str,
        tenant: str,
        request_hash: str,
        document: dict[str, Any],
    ) -> str:
        """Search, then store the plan and finish the job (or finish it with the problem)."""
        self.metrics.searches.inc()
        start = time.perf_counter()
        try:
            request = PlanRequest.model_validate(core_document(document))
            found = run_search(
                request,
                max_time_limit_s=self.settings.max_time_limit_s,
                on_progress=self._progress(job_id, context),
            )
        except pexc.JobAborted:
            raise  # shutdown: procrastinate re-queues it
        except Exception as exc:  # the search's own verdict: the job ends with it
            self.metrics.search_seconds.labels(type(exc).__name__).observe(0)
            problem, kind = problem_document(exc), type(exc).__name__

            def record(session: Session) -> str:
                job_store.finish(session, job_id=job_id, error=problem)
                return f"job {job_id} failed: {kind}"

            return self._persist(record)
        self.metrics.search_seconds.labels("ok").observe(time.perf_counter() - start)

        def store(session: Session) -> str:
            if job_store.lock_running(session, job_id=job_id) is None:
                return f"job {job_id} finished by another run"  # nothing stored twice
            row = plan_store.insert_plan(
                session,
                tenant=tenant,
                request_hash=request_hash,
                request=document,
                result=found.result.model_dump(mode="json"),
                tags=list(document.get("tags", ())),
            )
            job_store.finish(session, job_id=job_id, plan_id=row.id)
            return f"job {job_id}: plan {row.id}"

        return self._persist(store)

    def _persist(self, write: Callable[[Session], str]) -> str:
        """Run `write` in a transaction; while the database cannot be reached, try again
        (waits doubling from PERSIST_FIRST_WAIT_S to PERSIST_MAX_WAIT_S) for up to
        `queue_stalled_after_s`, so that a search outlives a short outage with its result.
        After that the error propagates and procrastinate retries the task."""
        deadline = time.monotonic() + self.settings.queue_stalled_after_s
        wait = PERSIST_FIRST_WAIT_S
        while True:
            try:
                with session_scope(self.sessions) as session:
                    return write(session)
            except (OperationalError, InterfaceError):
                if time.monotonic() + wait > deadline:
                    raise
                log.warning("database unreachable while storing a result: again in %.1f s", wait)
                time.sleep(wait)
                wait = min(PERSIST_MAX_WAIT_S, 2 * wait)

    def _progress(self, job_id: str, context: JobContext) -> Callable[[Any], None]:
        """The search's on_progress: record it on the job (at most every PROGRESS_EVERY_S);
        raise JobAborted when the worker is shutting down and the grace period is over."""
        last = [0.0]

        def report(progress: Any) -> None:
            if context.should_abort():
                raise pexc.JobAborted(f"job {job_id}: worker shutting down")
            now = time.monotonic()
            if now - last[0] < PROGRESS_EVERY_S:
                return
            last[0] = now
            try:
                with session_scope(self.sessions) as session:
                    job_store.set_progress(session, job_id=job_id, fraction=progress)
            except Exception:  # progress is advisory: the search goes on without it
                log.warning("progress of job %s not recorded", job_id, exc_info=True)

        return report

    # --- the sweep and the poll ----------------------------------------------------------

    async def retry_stalled(self, timestamp: int) -> None:
        """Retry the searches of workers silent for `queue_stalled_after_s` (presumed dead),
        and those running longer than their search may (`_longest_run_s`: a task whose end a
        live worker could not record, the database being away at that moment); a search
        that has had all its runs ends its job with a 503 problem."""
        del timestamp
        stalled = {
            job.id: job
            for job in await self.app.job_manager.get_stalled_jobs(
                task_name=SEARCH_TASK,
                seconds_since_heartbeat=self.settings.queue_stalled_after_s,
            )
        }
        running = await self.app.connector.execute_query_all_async(
            query=psql.queries["select_stalled_jobs_by_started"],
            nb_seconds=int(self.settings.queue_stalled_after_s),
            queue=None,
            task_name=SEARCH_TASK,
        )
        now = datetime.now(UTC)
        for row in running:
            allowed = self._longest_run_s(row["args"])
            if (now - row["started_at"]).total_seconds() > allowed:
                stalled.setdefault(row["id"], pjobs.Job.from_row(row))
        for job in stalled.values():
            if job.attempts + 1 >= self.settings.queue_max_attempts:
                log.error("search task %s stalled on its last run: job abandoned", job.id)
                await self.app.job_manager.finish_job(
                    job=job, status=pjobs.Status.FAILED, delete_job=False
                )
                self._abandon(job.task_kwargs, job.attempts + 1)
                continue
            log.warning("search task %s stalled (its worker stopped): retrying it", job.id)
            try:
                await self.app.job_manager.retry_job(job)
            except pexc.ConnectorException:  # another sweep or the worker moved it first
                log.info("search task %s was no longer running", job.id)
        await self.app.job_manager.prune_stalled_workers(self.settings.queue_stalled_after_s)

    def _longest_run_s(self, args: dict[str, Any]) -> float:
        """How long a run of this search task may take: its time limit (capped by
        `max_time_limit_s`; the search keeps to it) plus `queue_stalled_after_s` for storing
        the plan under a slow database."""
        try:
            limit = float(args["document"]["search"]["time_limit_s"])
        except (KeyError, TypeError, ValueError):
            limit = self.settings.max_time_limit_s
        return min(limit, self.settings.max_time_limit_s) + self.settings.queue_stalled_after_s

    def _abandon(self, kwargs: dict[str, Any], runs: int) -> None:
        job_id = str(kwargs.get("job_id"))
        with session_scope(self.sessions) as session:
            job_store.finish(
                session,
                job_id=job_id,
                error={
                    "title": "Search abandoned",
                    "status": 503,
                    "detail": f"the workers running it stopped {runs} times; send it again",
                },
            )

    def poll_submissions(self, timestamp: int) -> None:
        del timestamp
        assert self.poller is not None
        self.poller.poll_once()


def _every(seconds: int) -> str:
    """A procrastinate cron (6th field: seconds) that fires every `seconds` (1..59), or every
    whole minute for longer intervals."""
    if seconds < 60:
        return f"* * * * * */{seconds}"
    return f"*/{max(1, seconds // 60)} * * * *"
