"""Jobs: one row per search. The unique `inflight_key` makes a search single-flight across
processes: only one job per (tenant, normalised request) can hold it at a time.

A job finishes once: `finish` only changes a job that is still running, and the queue's
worker (api/queue/tasks.py) locks the row (`lock_running`) before it stores a plan, so a
search that ran twice (a worker presumed dead that was not) stores one plan."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, Protocol

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from api.store.ids import new_id
from api.store.tables import JobRow, utcnow

PROGRESS_FIELDS = ("settled", "total", "incumbent_s", "lower_bound_s", "gap", "elapsed_s")


class ProgressLike(Protocol):
    """planner.search.SearchProgress, or anything with its `fraction`."""

    @property
    def fraction(self) -> float: ...


def inflight_key(tenant: str, request_hash: str) -> str:
    return f"{tenant}:{request_hash}"


def claim(
    factory: sessionmaker[Session], *, tenant: str, request_hash: str, single_flight: bool
) -> JobRow | None:
    """Insert a running job. With `single_flight`, None if another job holds the key."""
    row = JobRow(
        id=new_id(),
        tenant=tenant,
        request_hash=request_hash,
        inflight_key=inflight_key(tenant, request_hash) if single_flight else None,
        status="running",
    )
    with factory() as session:
        session.add(row)
        try:
            session.commit()
        except IntegrityError:
            session.rollback()
            return None
    return row


def add_running(session: Session, *, tenant: str, request_hash: str, single_flight: bool) -> JobRow:
    """Add a running job to `session`'s transaction (flushed: a taken in-flight key raises
    IntegrityError here). The caller commits, with whatever else must land with it."""
    row = JobRow(
        id=new_id(),
        tenant=tenant,
        request_hash=request_hash,
        inflight_key=inflight_key(tenant, request_hash) if single_flight else None,
        status="running",
    )
    session.add(row)
    session.flush()
    return row


def lock_running(session: Session, *, job_id: str) -> JobRow | None:
    """The job, locked until the transaction ends, if it is still running (else None)."""
    return session.scalar(
        select(JobRow).where(JobRow.id == job_id, JobRow.status == "running").with_for_update()
    )


def holder(session: Session, *, tenant: str, request_hash: str) -> JobRow | None:
    """The job that holds the in-flight key for this request, if any."""
    key = inflight_key(tenant, request_hash)
    return session.scalar(select(JobRow).where(JobRow.inflight_key == key))


def release_stale(session: Session, *, job_id: str, older_than_s: float) -> bool:
    """Free the key of a job that outlived any time limit (its process died)."""
    cutoff = utcnow() - timedelta(seconds=older_than_s)
    res = session.execute(
        update(JobRow)
        .where(JobRow.id == job_id, JobRow.created_at < cutoff, JobRow.status == "running")
        .values(
            inflight_key=None,
            status="failed",
            finished_at=utcnow(),
            error={"title": "abandoned", "status": 503},
        )
    )
    return bool(getattr(res, "rowcount", 0))


def finish(
    session: Session,
    *,
    job_id: str,
    plan_id: str | None = None,
    error: dict[str, Any] | None = None,
) -> None:
    session.execute(
        update(JobRow)
        .where(JobRow.id == job_id, JobRow.status == "running")
        .values(
            inflight_key=None,
            status="failed" if error is not None else "succeeded",
            progress=1.0,
            plan_id=plan_id,
            error=error,
            finished_at=utcnow(),
        )
    )


def get_job(session: Session, *, tenant: str, job_id: str) -> JobRow | None:
    return session.scalar(select(JobRow).where(JobRow.id == job_id, JobRow.tenant == tenant))


def set_progress(session: Session, *, job_id: str, fraction: float | ProgressLike) -> None:
    """Record a running search's progress: a fraction, or a SearchProgress whose fields
    (PROGRESS_FIELDS) are kept in `progress_detail`."""
    share, detail = progress_values(fraction)
    values: dict[str, Any] = {"progress": share}
    if detail is not None:
        values["progress_detail"] = detail
    session.execute(
        update(JobRow).where(JobRow.id == job_id, JobRow.status == "running").values(**values)
    )


def progress_values(progress: float | ProgressLike) -> tuple[float, dict[str, Any] | None]:
    """(fraction clamped to [0, 1], the other fields or None for a bare fraction)."""
    if isinstance(progress, int | float):
        return max(0.0, min(1.0, float(progress))), None
    detail = {name: _finite(getattr(progress, name, None)) for name in PROGRESS_FIELDS}
    return max(0.0, min(1.0, float(progress.fraction))), detail


def _finite(value: object) -> object:
    """JSON has no inf or NaN (a gap before the first incumbent is infinite): None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
