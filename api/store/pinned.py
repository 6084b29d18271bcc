"""The hot routes' point reads (one value by key: whether a plan has submissions, which plan
answers a cached request) on PostgreSQL, each on a connection its thread keeps, as a
server-side prepared statement.

Why: such a read is a few microseconds of PostgreSQL's time, and the client side dominates:
through `api.store.db.read_rows` (a pool checkout and return, autocommit switched on and off,
a fresh cursor, the statement parsed and planned by the server each time) it costs about five
times this process's CPU of the same read as a prepared statement on a cursor the thread
keeps (about 110 µs against 20 µs on the load bench's machine). So each thread that reads
(the app's `db_pool_size` database threads, api.deps.in_thread) checks one connection out of
its own pool once and keeps it: in autocommit (each read its own snapshot, no BEGIN or
ROLLBACK), with one cursor, and with each statement prepared on its first use (psycopg's
`prepare=True`). A point read's statement is an equality look-up on a tenant-first index, so
PostgreSQL's generic plan is the plan any values get; the history's statements, whose best
plan depends on the values, are not prepared (`api.store.db.make_engine`).

The pool (`connections`, no overflow) is this module's own, beside the engine's: the API
process holds up to `connections` more PostgreSQL connections. A thread beyond `connections`
reads through `read_rows` on the engine. A connection is given back to its pool after
`recycle_s` (the engine's `pool_recycle`) and dropped on any database error (its thread opens
a fresh one at its next read); a disconnect also drops every other thread's (each at that
thread's next read: they would fail alike), so the errors, and an outage's 503, are
`read_rows`'s. A PgBouncer in transaction mode in
front of PostgreSQL must keep prepared statements (`max_prepared_statements` > 0, PgBouncer
1.21 and later).

On SQLite (one process, the embedded default) every read goes through `read_rows`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, Select, create_engine
from sqlalchemy.pool import PoolProxiedConnection

from api.store.db import (
    compile_once,
    dbapi_error,
    loads_json,
    processed_rows,
    read_rows,
    result_processors,
)

RECYCLE_S = 1800.0
"""A kept connection's most age before it goes back to its pool (`make_engine`'s
pool_recycle)."""
PREPARE_THRESHOLD = 2**31 - 1
"""psycopg prepares a statement on its own after this many executions on a connection: never,
in practice; the point reads prepare theirs explicitly."""
_STALE = ConnectionError("another kept connection was found disconnected")


@dataclass
class _Kept:
    connection: PoolProxiedConnection
    cursor: Any
    since_s: float
    # held while the connection reads, and by `close` while it closes it: a psycopg
    # connection must not be closed under a statement another thread runs on it
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False
    generation: int = 0  # PinnedReads' generation when it was checked out


class PinnedReads:
    """Point reads for `engine`'s database (the module's docstring)."""

    def __init__(self, engine: Engine, *, connections: int, recycle_s: float = RECYCLE_S) -> None:
        self.engine = engine
        self.connections = connections
        self.recycle_s = recycle_s
        self._local = threading.local()
        self._lock = threading.Lock()  # guards _kept, _connecting and _closed
        self._kept: list[_Kept] = []
        self._connecting = 0  # threads opening their connection now
        self._closed = False
        self._generation = 0  # one more after each disconnect: older kept connections go
        self._reads: Engine | None = None
        if engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg":
            self._reads = create_engine(
                engine.url,
                pool_size=connections,
                max_overflow=0,
                isolation_level="AUTOCOMMIT",
                connect_args={"prepare_threshold": PREPARE_THRESHOLD},
                json_deserializer=loads_json,
            )

    def rows(
        self, statement: Select[Any], params: dict[str, Any], *, first: bool = False
    ) -> list[tuple[Any, ...]]:
        """`read_rows(engine, statement, params, first=first)`'s rows, and its errors."""
        reads = self._reads
        if reads is None:
            return read_rows(self.engine, statement, params, first=first)
        compiled = compile_once(statement, reads.dialect)
        args = compiled.args(params)
        dbapi = reads.dialect.loaded_dbapi
        try:
            kept = self._keep(reads)
        except dbapi.Error as exc:
            raise dbapi_error(reads, compiled.sql, args, exc, invalidated=False) from exc
        if kept is None:
            return read_rows(self.engine, statement, params, first=first)
        with kept.lock:
            if kept.closed:  # by `close`, since this thread took it
                return read_rows(self.engine, statement, params, first=first)
            cursor = kept.cursor
            try:
                cursor.execute(compiled.sql, args, prepare=True)
                if first:
                    row = cursor.fetchone()
                    raw: Sequence[Any] = [] if row is None else [row]
                else:
                    raw = cursor.fetchall()
            except dbapi.Error as exc:
                conn = kept.connection.dbapi_connection
                invalidated = bool(reads.dialect.is_disconnect(exc, conn, None))
                if invalidated:
                    self._generation += 1
                self._drop(kept, exc)
                raise dbapi_error(reads, compiled.sql, args, exc, invalidated=invalidated) from exc
            if raw and compiled.processed is None:
                compiled.processed = result_processors(compiled, reads.dialect, cursor.description)
        return processed_rows(compiled, raw)

    def scalar(self, statement: Select[Any], params: dict[str, Any]) -> Any:
        """The first column of the first row (None without a row)."""
        found = self.rows(statement, params, first=True)
        return found[0][0] if found else None

    def close(self) -> None:
        """Close every kept connection (each once no read runs on it) and the pool; later
        reads go through `read_rows` (at shutdown)."""
        with self._lock:
            kept, self._kept, self._closed = self._kept, [], True
        for k in kept:
            with k.lock:
                self._close(k, None)
        if self._reads is not None:
            self._reads.dispose()

    def _keep(self, reads: Engine) -> _Kept | None:
        """This thread's connection: kept, or checked out now; None when `connections`
        threads keep one already, or after `close`."""
        kept: _Kept | None = getattr(self._local, "kept", None)
        now = time.monotonic()
        if kept is not None and not kept.closed:
            if now - kept.since_s < self.recycle_s and kept.generation == self._generation:
                return kept
            with kept.lock:
                self._drop(kept, None if kept.generation == self._generation else _STALE)
        with self._lock:
            if self._closed or len(self._kept) + self._connecting >= self.connections:
                return None
            # connected outside the lock, so that a slow connect holds up no other thread
            self._connecting += 1
        try:
            connection = reads.raw_connection()
        except BaseException:
            with self._lock:
                self._connecting -= 1
            raise
        kept = _Kept(connection, None, now, generation=self._generation)
        try:
            kept.cursor = connection.cursor()
        except BaseException as exc:
            with self._lock:
                self._connecting -= 1
            self._close(kept, exc)
            raise
        with self._lock:
            self._connecting -= 1
            if not self._closed:
                self._kept.append(kept)
                self._local.kept = kept
                return kept
        self._close(kept, None)  # `close` ran meanwhile
        return None

    def _drop(self, kept: _Kept, exc: BaseException | None) -> None:
        """Stop keeping `kept` (its lock held): closed after an error `exc` (and its prepared
        statements with it), else given back to the pool."""
        self._local.kept = None
        with self._lock:
            if kept in self._kept:
                self._kept.remove(kept)
        self._close(kept, exc)

    @staticmethod
    def _close(kept: _Kept, exc: BaseException | None) -> None:
        kept.closed = True
        try:
            if kept.cursor is not None:
                kept.cursor.close()
            if exc is not None:
                kept.connection.invalidate(exc)
            else:
                kept.connection.close()
        except Exception:  # a connection already gone
            pass
