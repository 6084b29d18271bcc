"""Jobs: one row per search. The unique `inflight_key` makes a search single-flight across
processes: only one job per (tenant, normalised request) can hold it at a time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from api.store.ids import new_id
from api.store.tables import JobRow, utcnow


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
        .where(JobRow.id == job_id)
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


def set_progress(session: Session, *, job_id: str, fraction: float) -> None:
    session.execute(
        update(JobRow)
        .where(JobRow.id == job_id, JobRow.status == "running")
        .values(progress=max(0.0, min(1.0, fraction)))
    )
