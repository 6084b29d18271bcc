"""Engine and session factory for a database URL (SQLite or PostgreSQL)."""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Dialect, Engine, Select, create_engine, event, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.types import TypeEngine

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


Processor = Callable[[Any], Any] | None


@dataclass
class _Compiled:
    sql: str
    defaults: dict[str, Any]  # the statement's own values (e.g. its LIMIT)
    order: tuple[str, ...] | None  # parameter names in order, for a positional paramstyle
    binds: Mapping[str, Processor]  # each parameter's bind processor (its type's, this dialect's)
    types: tuple[TypeEngine[Any], ...]  # the selected columns' types, this dialect's
    # (index, processor) of each selected column that has a result processor, from the
    # driver's column types at the statement's first execution that returned rows (None
    # before): a statement's columns have the same types at every execution
    processed: tuple[tuple[int, Callable[[Any], Any]], ...] | None = None

    def args(self, params: dict[str, Any]) -> dict[str, Any] | tuple[Any, ...]:
        merged = {**self.defaults, **params}
        for name, process in self.binds.items():
            if process is not None and merged.get(name) is not None:
                merged[name] = process(merged[name])
        return merged if self.order is None else tuple(merged[n] for n in self.order)


# per statement (weakly held: a history statement evicted from api.store.plans' cache of
# shapes goes, and its compiled form with it), per dialect name
_COMPILED: weakref.WeakKeyDictionary[Select[Any], dict[str, _Compiled]] = (
    weakref.WeakKeyDictionary()
)


def _compile_once(statement: Select[Any], dialect: Dialect) -> _Compiled:
    """`statement` compiled for `dialect`, once (kept while the statement lives)."""
    per_dialect = _COMPILED.get(statement)
    if per_dialect is None:
        per_dialect = _COMPILED[statement] = {}
    found = per_dialect.get(dialect.name)
    if found is None:
        compiled = statement.compile(dialect=dialect)
        defaults = {k: v for k, v in compiled.params.items() if v is not None}
        order = tuple(compiled.positiontup or ()) if compiled.positional else None
        binds = {
            name: bind.type.dialect_impl(dialect).bind_processor(dialect)
            for name, bind in compiled.binds.items()
        }
        types = tuple(c.type.dialect_impl(dialect) for c in statement.selected_columns)
        found = _Compiled(compiled.string, defaults, order, binds, types)
        per_dialect[dialect.name] = found
    return found


def _result_processors(
    compiled: _Compiled, dialect: Dialect, description: Any
) -> tuple[tuple[int, Callable[[Any], Any]], ...]:
    """(index, processor) of each selected column that has a result processor for the
    driver's column types in `description` (what SQLAlchemy's own result applies:
    UTCDateTime's zone, SQLite's JSON text and datetimes); the columns without one are taken
    as the driver gives them."""
    codes = (d[1] for d in description)
    processors = (
        t.result_processor(dialect, code) for t, code in zip(compiled.types, codes, strict=True)
    )
    return tuple((i, p) for i, p in enumerate(processors) if p is not None)


def read_scalar(engine: Engine, statement: Select[Any], params: dict[str, Any]) -> Any:
    """The first column of the first row of `statement` (None without a row): `read_rows`
    with `first=True`."""
    rows = read_rows(engine, statement, params, first=True)
    return rows[0][0] if rows else None


def read_rows(
    engine: Engine, statement: Select[Any], params: dict[str, Any], *, first: bool = False
) -> list[tuple[Any, ...]]:
    """The rows of `statement` (only the first with `first`), run on a pooled connection's own
    cursor (psycopg's in binary format: the driver's values are the same as from text, and
    numbers and times are copied rather than parsed; a 51-row history page's execute and fetch
    take about a quarter less CPU): the statement is compiled once per dialect, its parameters
    and columns converted by their types' bind and result processors as SQLAlchemy's own
    execution converts them, and none of SQLAlchemy's other per-execution work is done: only
    the columns whose type has a result processor are converted (of a history row's 19 on
    PostgreSQL, the creation time), and which those are is found at the statement's first
    execution. For the hot routes' reads, whose statements are built once.

    Errors are SQLAlchemy's, as `Session.execute` raises them (a `DBAPIError` subclass, a
    dropped connection invalidated and marked `connection_invalidated`), so an outage is a
    503 alike. On PostgreSQL the statement runs in autocommit (its own snapshot; no BEGIN or
    ROLLBACK round trip), as in `read_session`; SQLite's driver begins no transaction for a
    SELECT."""
    compiled = _compile_once(statement, engine.dialect)
    args = compiled.args(params)
    dbapi = engine.dialect.loaded_dbapi
    try:
        pooled = engine.raw_connection()
    except dbapi.Error as exc:
        raise _dbapi_error(engine, compiled.sql, args, exc, invalidated=False) from exc
    conn = pooled.dbapi_connection
    autocommit = engine.dialect.name == "postgresql"
    try:
        if autocommit:
            conn.autocommit = True  # type: ignore[union-attr]
        cursor = (
            pooled.cursor(binary=True) if engine.dialect.driver == "psycopg" else pooled.cursor()
        )
        try:
            cursor.execute(compiled.sql, args)
            if first:
                row = cursor.fetchone()
                raw: Sequence[Any] = [] if row is None else [row]
            else:
                raw = cursor.fetchall()
            if raw and compiled.processed is None:
                description = cursor.description
                compiled.processed = _result_processors(compiled, engine.dialect, description)
        finally:
            cursor.close()
        if autocommit:
            conn.autocommit = False  # type: ignore[union-attr]
    except dbapi.Error as exc:
        invalidated = bool(engine.dialect.is_disconnect(exc, conn, None))
        if invalidated:
            pooled.invalidate(exc)
        raise _dbapi_error(engine, compiled.sql, args, exc, invalidated=invalidated) from exc
    finally:
        pooled.close()
    return _processed_rows(compiled, raw)


def _processed_rows(compiled: _Compiled, raw: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The driver's rows `raw` of `compiled`, each column through its result processor."""
    processed = compiled.processed
    if not raw:
        return []
    if not processed:
        return [tuple(r) for r in raw]
    out = []
    for r in raw:
        values = list(r)
        for i, process in processed:
            value = values[i]
            if value is not None:
                values[i] = process(value)
        out.append(tuple(values))
    return out


def _dbapi_error(
    engine: Engine, sql: str, args: Any, exc: Exception, *, invalidated: bool
) -> DBAPIError:
    """`exc`, a driver's error running `sql`, as SQLAlchemy raises it (`Session.execute`'s)."""
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
