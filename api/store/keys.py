"""API keys: high-entropy secrets, stored as their sha256 (the key itself is shown once)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.store.ids import new_id
from api.store.tables import ApiKeyRow

KEY_PREFIX = "mp_"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Principal:
    """Who is calling: the tenant every read and write is scoped to."""

    tenant: str
    admin: bool
    key_id: str | None


def create_key(
    session: Session, *, tenant: str, admin: bool = False, name: str = "", key: str | None = None
) -> tuple[ApiKeyRow, str]:
    """Store a new key; returns the row and the plaintext key (not stored)."""
    plaintext = key or generate_key()
    row = ApiKeyRow(
        id=new_id(), tenant=tenant, key_hash=hash_key(plaintext), admin=admin, name=name
    )
    session.add(row)
    session.flush()
    return row, plaintext


def ensure_key(session: Session, *, tenant: str, key: str, admin: bool) -> None:
    """Create the key if no key with that value exists (the bootstrap admin key)."""
    if session.scalar(select(ApiKeyRow.id).where(ApiKeyRow.key_hash == hash_key(key))) is None:
        create_key(session, tenant=tenant, admin=admin, name="bootstrap", key=key)


def authenticate(session: Session, *, key: str) -> Principal | None:
    row = session.scalar(select(ApiKeyRow).where(ApiKeyRow.key_hash == hash_key(key)))
    if row is None:
        return None
    return Principal(tenant=row.tenant, admin=row.admin, key_id=row.id)
