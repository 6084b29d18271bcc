"""A submission's state from the scheduler's word, and the submission document.

States: PENDING (queued) -> RUNNING -> COMPLETED | FAILED | CANCELLED (final). The scheduler's
JobStatus is stored as it comes (state, exit code, reason, times); a final state also fixes
when the report token expires.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import update
from sqlalchemy.orm import Session

from api.store.submissions import OPEN_STATES
from api.store.tables import SubmissionRow
from api.submit import FINAL_STATES, JobStatus

MAX_LOG_CHARS = 16_000


class Known(Protocol):
    """What the service knows of a submission's job (a row, or the poller's Tracked)."""

    @property
    def state(self) -> str: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def finished_at(self) -> datetime | None: ...
    @property
    def log_tail(self) -> str: ...


def status_values(
    row: Known,
    status: JobStatus,
    *,
    log_tail: str | None,
    now: datetime,
    token_grace_s: float,
) -> dict[str, Any]:
    """The columns that change when `row` learns `status` (empty when nothing does)."""
    values: dict[str, Any] = {"polled_at": now}
    if status.state != row.state:
        values["state"] = status.state
    if status.exit_code is not None and status.exit_code != row.exit_code:
        values["exit_code"] = status.exit_code
    if status.reason is not None and status.reason != row.reason:
        values["reason"] = status.reason[:2000]
    started = status.started_at or (now if status.state == "RUNNING" else None)
    if row.started_at is None and started is not None:
        values["started_at"] = started
    if status.state in FINAL_STATES:
        finished = row.finished_at or status.finished_at or now
        values["finished_at"] = finished
        values["token_expires_at"] = max(finished, now) + timedelta(seconds=token_grace_s)
    if log_tail is not None and log_tail[-MAX_LOG_CHARS:] != row.log_tail:
        values["log_tail"] = log_tail[-MAX_LOG_CHARS:]
    return values


def store_status(session: Session, row_id: str, values: dict[str, Any]) -> bool:
    """Write `values` to a submission that is still open; False when it was already final.
    Only these columns are written (a run's id appended meanwhile stays)."""
    result = session.execute(
        update(SubmissionRow)
        .where(SubmissionRow.id == row_id, SubmissionRow.state.in_(OPEN_STATES))
        .values(**values)
    )
    return bool(getattr(result, "rowcount", 0))


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def submission_links(row: SubmissionRow) -> dict[str, str]:
    return {
        "self": f"/v1/submissions/{row.id}",
        "plan": f"/v1/plans/{row.plan_id}",
        "runs": f"/v1/plans/{row.plan_id}/runs",
        "page": f"/plans/{row.plan_id}#submissions",
    }


def submission_document(row: SubmissionRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "plan_id": row.plan_id,
        "backend": row.backend,
        "framework": row.framework,
        "partition": row.partition,
        "state": row.state,
        "scheduler_job_id": row.scheduler_job_id,
        "created_at": _iso(row.created_at),
        "submitted_at": _iso(row.submitted_at),
        "started_at": _iso(row.started_at),
        "finished_at": _iso(row.finished_at),
        "polled_at": _iso(row.polled_at),
        "cancel_requested_at": _iso(row.cancel_requested_at),
        "exit_code": row.exit_code,
        "reason": row.reason,
        "log_tail": row.log_tail,
        "report": row.report,
        "run_ids": list(row.run_ids or []),
        "links": submission_links(row),
    }
