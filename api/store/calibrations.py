"""Stored calibration documents (POST /v1/calibrations; plan requests name one by id)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from api.store.tables import CalibrationRow, RunRow


def upsert_calibration(
    session: Session, *, tenant: str, calibration_id: str, gpu: str, body: dict[str, Any]
) -> tuple[CalibrationRow, bool]:
    """Store the document unless this tenant has it already; (row, created)."""
    row = get_calibration(session, tenant=tenant, calibration_id=calibration_id)
    if row is not None:
        return row, False
    row = CalibrationRow(tenant=tenant, id=calibration_id, gpu=gpu, body=body)
    session.add(row)
    session.flush()
    return row, True


def get_calibration(session: Session, *, tenant: str, calibration_id: str) -> CalibrationRow | None:
    return session.get(CalibrationRow, (tenant, calibration_id))


def list_calibrations(
    session: Session, *, tenant: str, page_size: int, after: tuple[Any, str] | None
) -> tuple[list[CalibrationRow], bool]:
    """Newest first; returns the page and whether more follow."""
    conds = [CalibrationRow.tenant == tenant]
    if after is not None:
        value, last_id = after
        conds.append(
            or_(
                CalibrationRow.created_at < value,
                and_(CalibrationRow.created_at == value, CalibrationRow.id < last_id),
            )
        )
    stmt = (
        select(CalibrationRow)
        .where(*conds)
        .order_by(CalibrationRow.created_at.desc(), CalibrationRow.id.desc())
        .limit(page_size + 1)
    )
    rows = list(session.scalars(stmt))
    return rows[:page_size], len(rows) > page_size


def get_run(session: Session, *, tenant: str, run_id: str) -> RunRow | None:
    """A stored run by its own id (runs are listed under their plan elsewhere)."""
    return session.scalar(select(RunRow).where(RunRow.id == run_id, RunRow.tenant == tenant))
