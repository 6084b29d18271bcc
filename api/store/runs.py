"""Measured runs of a plan (RunReports)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.store.ids import new_id
from api.store.tables import RunRow


def insert_run(session: Session, *, tenant: str, plan_id: str, report: dict[str, Any]) -> RunRow:
    row = RunRow(id=new_id(), tenant=tenant, plan_id=plan_id, report=report)
    session.add(row)
    session.flush()
    return row


def list_runs(session: Session, *, tenant: str, plan_id: str) -> list[RunRow]:
    stmt = (
        select(RunRow)
        .where(RunRow.tenant == tenant, RunRow.plan_id == plan_id)
        .order_by(RunRow.created_at.asc(), RunRow.id.asc())
    )
    return list(session.scalars(stmt))
