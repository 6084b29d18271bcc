"""Alembic: upgrade head -> downgrade base -> upgrade head, on SQLite and PostgreSQL; the
migrated schema matches the ORM tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from api.store import migrate
from api.store.tables import Base

ROOT = Path(__file__).resolve().parents[2]
TABLES = {
    "api_keys",
    "plans",
    "plan_tags",
    "jobs",
    "idempotency_keys",
    "profiles",
    "runs",
    "calibrations",
    "submissions",
}
# procrastinate's own schema (migration 0005_queue, PostgreSQL only: the search queue)
QUEUE_TABLES = {
    "procrastinate_jobs",
    "procrastinate_events",
    "procrastinate_periodic_defers",
    "procrastinate_workers",
}


def _ours(kind: str, name: str | None) -> bool:
    """compare_metadata's filter: the ORM's tables, not procrastinate's."""
    return not (kind == "table" and (name or "").startswith("procrastinate_"))


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(db_url: str) -> None:
    assert migrate.current(db_url) is None
    migrate.upgrade(db_url)
    head = migrate.current(db_url)
    assert head is not None
    assert _tables(db_url) == TABLES | (QUEUE_TABLES if db_url.startswith("postgresql") else set())
    migrate.downgrade(db_url, "base")
    assert migrate.current(db_url) is None
    assert _tables(db_url) == set()
    migrate.upgrade(db_url)
    assert migrate.current(db_url) == head
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"include_name": lambda name, kind, _parent: _ours(kind, name)}
            )
            diff = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert diff == [], f"migrations and ORM tables differ: {diff}"


def test_concurrent_upgrades_take_turns(db_url: str) -> None:
    """Replicas starting together all migrate (PostgreSQL: an advisory lock serialises them)."""
    if not db_url.startswith("postgresql"):
        return  # SQLite: one process migrates (`meshplan serve` does it before the workers)
    code = f"from api.store import migrate; migrate.upgrade({db_url!r})"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    assert _tables(db_url) == TABLES | QUEUE_TABLES
    assert migrate.current(db_url) is not None
