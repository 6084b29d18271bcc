"""Submissions: insert, fetch, the list query (keyset pages), the poller's reads and writes,
and the report-token lookup."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import Session

from api.store.plans import Cursor
from api.store.tables import SubmissionRow

OPEN_STATES = ("PENDING", "RUNNING")


@dataclass(frozen=True)
class SubmissionFilters:
    plan_id: str | None = None
    state: str | None = None
    backend: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


@dataclass(frozen=True)
class SubmissionPage:
    rows: list[SubmissionRow]
    next_cursor: Cursor | None


def get_submission(session: Session, *, tenant: str, submission_id: str) -> SubmissionRow | None:
    return session.scalar(
        select(SubmissionRow).where(
            SubmissionRow.id == submission_id, SubmissionRow.tenant == tenant
        )
    )


def plan_submissions(session: Session, *, tenant: str, plan_id: str) -> list[SubmissionRow]:
    """A plan's submissions, newest first."""
    stmt = (
        select(SubmissionRow)
        .where(SubmissionRow.tenant == tenant, SubmissionRow.plan_id == plan_id)
        .order_by(SubmissionRow.created_at.desc(), SubmissionRow.id.desc())
    )
    return list(session.scalars(stmt))


def _conditions(tenant: str, f: SubmissionFilters) -> list[ColumnElement[bool]]:
    conds: list[ColumnElement[bool]] = [SubmissionRow.tenant == tenant]
    if f.plan_id is not None:
        conds.append(SubmissionRow.plan_id == f.plan_id)
    if f.state is not None:
        conds.append(SubmissionRow.state == f.state)
    if f.backend is not None:
        conds.append(SubmissionRow.backend == f.backend)
    if f.created_after is not None:
        conds.append(SubmissionRow.created_at > f.created_after)
    if f.created_before is not None:
        conds.append(SubmissionRow.created_at < f.created_before)
    return conds


def list_submissions(
    session: Session,
    *,
    tenant: str,
    filters: SubmissionFilters,
    page_size: int = 50,
    after: Cursor | None = None,
) -> SubmissionPage:
    """One page, newest first, ordered by (created_at, id): stable under inserts."""
    conds = _conditions(tenant, filters)
    col = SubmissionRow.created_at
    if after is not None:
        conds.append(or_(col < after.value, and_(col == after.value, SubmissionRow.id < after.id)))
    stmt = (
        select(SubmissionRow)
        .where(*conds)
        .order_by(col.desc(), SubmissionRow.id.desc())
        .limit(page_size + 1)
    )
    rows = list(session.scalars(stmt))
    next_cursor = None
    if len(rows) > page_size:
        rows = rows[:page_size]
        last = rows[-1]
        next_cursor = Cursor(sort="-created_at", value=last.created_at, id=last.id)
    return SubmissionPage(rows=rows, next_cursor=next_cursor)


@dataclass(frozen=True)
class Tracked:
    """What the poller needs of an open submission (a plain row, not an ORM object)."""

    id: str
    backend: str
    scheduler_job_id: str
    state: str
    exit_code: int | None
    reason: str | None
    started_at: datetime | None
    finished_at: datetime | None
    log_tail: str


_TRACKED = (
    SubmissionRow.id,
    SubmissionRow.backend,
    SubmissionRow.scheduler_job_id,
    SubmissionRow.state,
    SubmissionRow.exit_code,
    SubmissionRow.reason,
    SubmissionRow.started_at,
    SubmissionRow.finished_at,
    SubmissionRow.log_tail,
)


def open_submissions(session: Session, *, limit: int = 10_000) -> list[Tracked]:
    """Every tenant's submissions the scheduler still has to finish (the poller's work)."""
    stmt = (
        select(*_TRACKED)
        .where(SubmissionRow.state.in_(OPEN_STATES), SubmissionRow.scheduler_job_id.is_not(None))
        .order_by(SubmissionRow.backend, SubmissionRow.created_at)
        .limit(limit)
    )
    return [Tracked(*row) for row in session.execute(stmt)]


def by_token_hash(session: Session, *, token_hash: str) -> SubmissionRow | None:
    return session.scalar(
        select(SubmissionRow).where(SubmissionRow.report_token_hash == token_hash)
    )


def lock_rows(session: Session, *, ids: Sequence[str]) -> dict[str, SubmissionRow]:
    """The rows with these ids, locked for update on PostgreSQL (SQLite has one writer)."""
    if not ids:
        return {}
    stmt: Any = select(SubmissionRow).where(SubmissionRow.id.in_(list(ids))).with_for_update()
    return {row.id: row for row in session.scalars(stmt)}
