"""Stored model profiles (the profiler uploads here; plan requests may name one by id)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session, defer

from api.store.ids import new_id
from api.store.tables import ProfileRow


def insert_profile(
    session: Session, *, tenant: str, name: str, model_hash: str, source: str, body: dict[str, Any]
) -> ProfileRow:
    row = ProfileRow(
        id=new_id(), tenant=tenant, name=name, model_hash=model_hash, source=source, body=body
    )
    session.add(row)
    session.flush()
    return row


def get_profile(session: Session, *, tenant: str, profile_id: str) -> ProfileRow | None:
    return session.scalar(
        select(ProfileRow).where(ProfileRow.id == profile_id, ProfileRow.tenant == tenant)
    )


def list_profiles(
    session: Session, *, tenant: str, page_size: int, after: tuple[Any, str] | None
) -> tuple[list[ProfileRow], bool]:
    """Newest first; returns the page and whether more follow."""
    conds = [ProfileRow.tenant == tenant]
    if after is not None:
        value, last_id = after
        conds.append(
            or_(
                ProfileRow.created_at < value,
                and_(ProfileRow.created_at == value, ProfileRow.id < last_id),
            )
        )
    stmt = (
        select(ProfileRow)
        .options(defer(ProfileRow.body))
        .where(*conds)
        .order_by(ProfileRow.created_at.desc(), ProfileRow.id.desc())
        .limit(page_size + 1)
    )
    rows = list(session.scalars(stmt))
    return rows[:page_size], len(rows) > page_size
