"""The API side of the queue: claim a job and defer its task in one transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import procrastinate
from procrastinate import exceptions as pexc
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.problems import ProblemError
from api.queue.app import SEARCH_QUEUE, SEARCH_TASK
from api.store import jobs as job_store
from api.store.db import session_scope

if TYPE_CHECKING:
    from api.planning import Normalised
    from api.state import AppState

CLAIM_TRIES = 5  # a claim lost to another process is followed; this bounds the look-claim race


def submit_search(state: AppState, tenant: str, norm: Normalised) -> tuple[str, bool]:
    """(job id, joined): the running job of this request if there is one (joined), else a new
    job whose task is deferred in the transaction that inserts it."""
    assert state.queue is not None
    for _ in range(CLAIM_TRIES):
        try:
            with session_scope(state.sessions) as session:
                if not norm.force:
                    held = job_store.holder(session, tenant=tenant, request_hash=norm.request_hash)
                    if held is not None:
                        return held.id, True
                job = job_store.add_running(
                    session,
                    tenant=tenant,
                    request_hash=norm.request_hash,
                    single_flight=not norm.force,
                )
                defer_search(
                    state.queue,
                    session,
                    job_id=job.id,
                    tenant=tenant,
                    request_hash=norm.request_hash,
                    document=norm.document,
                    force=norm.force,
                )
            return job.id, False
        except IntegrityError:
            continue  # another process took the in-flight key between our look and insert
    raise ProblemError(
        503,
        "Search queue busy",
        f"could not claim a job in {CLAIM_TRIES} tries",
        headers={"Retry-After": "1"},
    )


def defer_search(
    app: procrastinate.App,
    session: Session,
    *,
    job_id: str,
    tenant: str,
    request_hash: str,
    document: dict[str, Any],
    force: bool,
) -> int:
    """Defer the search task on `session`'s own psycopg connection, inside its transaction
    (procrastinate's `configure(connection=...)`): it commits or rolls back with the job."""
    raw = session.connection().connection.driver_connection
    try:
        return app.configure_task(SEARCH_TASK, queue=SEARCH_QUEUE, connection=raw).defer(
            job_id=job_id,
            tenant=tenant,
            request_hash=request_hash,
            document=document,
            force=force,
        )
    except pexc.ConnectorException as exc:
        raise ProblemError(
            503, "Search queue unavailable", str(exc)[:500], headers={"Retry-After": "1"}
        ) from exc
