"""Engine and session factory for a database URL (SQLite or PostgreSQL)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Dialect, Engine, Select, create_engine, event, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def loads_json(data: str | bytes | bytearray | memoryview) -> Any:
    """A JSON column's value: `json.loads`'s, decoded by orjson where that gives the same value
    (a fifth of the time on a history page's tags and a plan's documents).

    orjson refuses what the standard library accepts (NaN, Infinity, 1e400, lone surrogates,
    nesting past 1024: then json.loads decodes it) and reads integers outside 64 bits as
    floats; any run of 19 digits (every integer outside -2**63 .. 2**64, and long decimals)
    sends the text to json.loads too."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if _LONG_DIGITS.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


def make_engine(url: str, *, pool_size: int = 10) -> Engine:
    """An engine for `url`. SQLite gets WAL, a busy timeout and foreign keys on. JSON columns
    are decoded by `loads_json`."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_pre_ping=True,
            json_deserializer=loads_json,
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
        json_deserializer=loads_json,
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


@dataclass(frozen=True)
class _Compiled:
    sql: str
    defaults: dict[str, Any]  # the statement's own values (e.g. its LIMIT)
    order: tuple[str, ...] | None  # parameter names in order, for a positional paramstyle

    def args(self, params: dict[str, Any]) -> dict[str, Any] | tuple[Any, ...]:
        merged = {**self.defaults, **params}
        return merged if self.order is None else tuple(merged[n] for n in self.order)


_COMPILED: dict[tuple[int, str], _Compiled] = {}


def _compiled(statement: Select[Any], dialect: Dialect) -> _Compiled:
    key = (id(statement), dialect.name)
    found = _COMPILED.get(key)
    if found is None:
        compiled = statement.compile(dialect=dialect)
        defaults = {k: v for k, v in compiled.params.items() if v is not None}
        order = tuple(compiled.positiontup or ()) if compiled.positional else None
        found = _COMPILED[key] = _Compiled(compiled.string, defaults, order)
    return found


def read_scalar(engine: Engine, statement: Select[Any], params: dict[str, str]) -> Any:
    """The first column of the first row of `statement` (None without a row), run on a pooled
    connection's own cursor: the statement is compiled once per dialect, and none of
    SQLAlchemy's per-execution work is done (a third of the CPU of `read_session` and
    `Session.execute`, bench/api_profile.py). Only for statements whose parameters are
    strings (or the statement's own integers) and whose value needs no type conversion: the
    per-request look-ups of the hot routes.

    Errors are SQLAlchemy's, as `Session.execute` raises them (a `DBAPIError` subclass, a
    dropped connection invalidated and marked `connection_invalidated`), so an outage is a
    503 alike. On PostgreSQL the statement runs in autocommit (its own snapshot; no BEGIN or
    ROLLBACK round trip), as in `read_session`; SQLite's driver begins no transaction for a
    SELECT."""
    compiled = _compiled(statement, engine.dialect)
    args = compiled.args(params)
    dbapi = engine.dialect.loaded_dbapi
    try:
        pooled = engine.raw_connection()
    except dbapi.Error as exc:
        raise _wrapped(engine, compiled.sql, args, exc, invalidated=False) from exc
    conn = pooled.dbapi_connection
    autocommit = engine.dialect.name == "postgresql"
    try:
        if autocommit:
            conn.autocommit = True  # type: ignore[union-attr]
        cursor = pooled.cursor()
        try:
            cursor.execute(compiled.sql, args)
            row = cursor.fetchone()
        finally:
            cursor.close()
        if autocommit:
            conn.autocommit = False  # type: ignore[union-attr]
    except dbapi.Error as exc:
        invalidated = bool(engine.dialect.is_disconnect(exc, conn, None))
        if invalidated:
            pooled.invalidate(exc)
        raise _wrapped(engine, compiled.sql, args, exc, invalidated=invalidated) from exc
    finally:
        pooled.close()
    return None if row is None else row[0]


def _wrapped(
    engine: Engine, sql: str, args: Any, exc: Exception, *, invalidated: bool
) -> DBAPIError:
    error = DBAPIError.instance(
        sql,
        args,
        exc,
        engine.dialect.loaded_dbapi.Error,
        connection_invalidated=invalidated,
        dialect=engine.dialect,
    )
    assert isinstance(error, DBAPIError)
    return error
