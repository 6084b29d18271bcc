"""Idempotency keys (IETF httpapi draft-ietf-httpapi-idempotency-key-header): replay a
finished response, 409 while in flight, 422 when the same key comes with a different body.

Keys expire (the draft's section 2.3 leaves the validity period to the server and asks it to
publish it): `Expiry.ttl_s` after its first use a key is free again, whatever it answered, and
its row is deleted by the next purge. A purge runs inside `begin` at most once every
`purge_interval_s` per app (per sessionmaker), so no request pays for more than one scan of the
table per interval and no background task is needed."""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import delete, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from api.store.tables import IdempotencyRow, utcnow

# A reservation still in flight is purged only after this long (or the TTL, if longer): far
# beyond any honest request (the search time limit and the scheduler's command timeout are
# minutes), so a purge never frees the key of a request that is still running.
IN_FLIGHT_PURGE_S = 86_400.0


@dataclass(frozen=True)
class Expiry:
    """How long a key is remembered after its first use, and how often expired keys are
    deleted (seconds; `Settings.idempotency_ttl_s` and `idempotency_purge_interval_s`)."""

    ttl_s: float = 86_400.0
    purge_interval_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("ttl_s", "purge_interval_s"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"Expiry.{name} must be positive, got {value}")


@dataclass(frozen=True)
class Claim:
    outcome: Literal["new", "replay", "in_flight", "mismatch"]
    row: IdempotencyRow | None = None


_last_purge: weakref.WeakKeyDictionary[sessionmaker[Session], float] = weakref.WeakKeyDictionary()
_purge_lock = threading.Lock()


def purge_expired(session: Session, *, expiry: Expiry, now: datetime | None = None) -> int:
    """Delete the keys that expired: completed ones older than the TTL, reservations older
    than the TTL and `IN_FLIGHT_PURGE_S`. Returns how many rows went (the caller commits)."""
    now = now or utcnow()
    done_before = now - timedelta(seconds=expiry.ttl_s)
    held_before = now - timedelta(seconds=max(expiry.ttl_s, IN_FLIGHT_PURGE_S))
    result = session.execute(
        delete(IdempotencyRow).where(
            or_(
                (IdempotencyRow.status == "done") & (IdempotencyRow.created_at < done_before),
                IdempotencyRow.created_at < held_before,
            )
        )
    )
    return int(getattr(result, "rowcount", 0) or 0)


def _purge_due(factory: sessionmaker[Session], expiry: Expiry) -> bool:
    """True at most once per `purge_interval_s` for this sessionmaker (and the first time)."""
    now = time.monotonic()
    with _purge_lock:
        last = _last_purge.get(factory)
        if last is not None and now - last < expiry.purge_interval_s:
            return False
        _last_purge[factory] = now
        return True


def _expired(row: IdempotencyRow, expiry: Expiry | None) -> bool:
    if expiry is None or row.status != "done":
        return False
    return bool(row.created_at < utcnow() - timedelta(seconds=expiry.ttl_s))


def begin(
    factory: sessionmaker[Session],
    *,
    tenant: str,
    key: str,
    fingerprint: str,
    stale_after_s: float = 3600.0,
    expiry: Expiry | None = None,
) -> Claim:
    """Reserve `key` for this request, or say why not. A reservation still in flight after
    `stale_after_s` belonged to a process that died, and a completed key older than
    `expiry.ttl_s` has expired: either is dropped and the key reserved anew. With `expiry`,
    expired keys of every tenant are purged first when a purge is due."""
    with factory() as session:
        if expiry is not None and _purge_due(factory, expiry):
            purge_expired(session, expiry=expiry)
            session.commit()
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
        if row is not None and (
            _expired(row, expiry)
            or (
                row.status == "in_flight"
                and row.created_at < utcnow() - timedelta(seconds=stale_after_s)
            )
        ):
            # only the row read here: another process may have taken the key over already
            session.execute(
                delete(IdempotencyRow).where(
                    IdempotencyRow.tenant == tenant,
                    IdempotencyRow.key == key,
                    IdempotencyRow.created_at == row.created_at,
                )
            )
            session.commit()
            row = None
    if row is None:  # gone between the insert and the read, stale or expired: try again
        return begin(
            factory,
            tenant=tenant,
            key=key,
            fingerprint=fingerprint,
            stale_after_s=stale_after_s,
            expiry=expiry,
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
