"""Engine and session factory for a database URL (SQLite or PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker


def make_engine(url: str, *, pool_size: int = 10) -> Engine:
    """An engine for `url`. SQLite gets WAL, a busy timeout and foreign keys on."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, pool_pre_ping=True
        )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            if ":memory:" not in url:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    # No pre-ping (a round trip per checkout); connections are recycled instead. No server-side
    # prepared statements: PostgreSQL's generic plan for the history query (any filter
    # combination) can scan the wrong index, where a plan for the actual values does not.
    return create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_recycle=1800,
        connect_args={"prepare_threshold": None} if "psycopg" in url else {},
    )


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits on success and rolls back on any exception."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def ping(engine: Engine) -> None:
    """Raises if the database cannot be reached."""
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))


@contextmanager
def read_session(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session for reads on an autocommit connection: each statement reads its own
    snapshot, and no BEGIN and ROLLBACK round trips are spent on a transaction that writes
    nothing."""
    with factory() as session:
        session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        yield session
