"""Idempotency keys (IETF httpapi draft): replay a finished response, 409 while in flight,
422 when the same key comes with a different body."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from api.store.tables import IdempotencyRow, utcnow


@dataclass(frozen=True)
class Claim:
    outcome: Literal["new", "replay", "in_flight", "mismatch"]
    row: IdempotencyRow | None = None


def begin(
    factory: sessionmaker[Session],
    *,
    tenant: str,
    key: str,
    fingerprint: str,
    stale_after_s: float = 3600.0,
) -> Claim:
    """Reserve `key` for this request, or say why not. A reservation still in flight after
    `stale_after_s` belonged to a process that died: it is dropped and the key reserved anew."""
    with factory() as session:
        session.add(
            IdempotencyRow(tenant=tenant, key=key, fingerprint=fingerprint, status="in_flight")
        )
        try:
            session.commit()
            return Claim("new")
        except IntegrityError:
            session.rollback()
        row = session.scalar(
            select(IdempotencyRow).where(IdempotencyRow.tenant == tenant, IdempotencyRow.key == key)
        )
        if (
            row is not None
            and row.status == "in_flight"
            and row.created_at < utcnow() - timedelta(seconds=stale_after_s)
        ):
            abandon(session, tenant=tenant, key=key)
            session.commit()
            row = None
    if row is None:  # gone between the insert and the read (or stale): try again
        return begin(
            factory, tenant=tenant, key=key, fingerprint=fingerprint, stale_after_s=stale_after_s
        )
    if row.fingerprint != fingerprint:
        return Claim("mismatch", row)
    if row.status == "in_flight":
        return Claim("in_flight", row)
    return Claim("replay", row)


def complete(
    session: Session,
    *,
    tenant: str,
    key: str,
    status: int,
    body: dict[str, Any],
    headers: dict[str, str],
) -> None:
    session.execute(
        update(IdempotencyRow)
        .where(IdempotencyRow.tenant == tenant, IdempotencyRow.key == key)
        .values(status="done", response_status=status, response_body=body, response_headers=headers)
    )


def abandon(session: Session, *, tenant: str, key: str) -> None:
    """Forget the key (the request failed on our side; the client may retry)."""
    session.execute(
        delete(IdempotencyRow).where(IdempotencyRow.tenant == tenant, IdempotencyRow.key == key)
    )
