"""api.store.pinned.PinnedReads: the same rows as `read_rows` (on SQLite, where it is
`read_rows`, and on PostgreSQL, where it keeps a connection per thread and prepares the
statements), the same errors when the connection goes away (an outage's error, then a fresh
connection for the next read), no more kept connections than it was given (threads past them
read through `read_rows`), and none left open after `close`."""

from __future__ import annotations

import queue
import threading
from typing import Any

import psycopg
import pytest
from sqlalchemy.exc import DBAPIError
from svc_factories import synthetic_rows

from api.outage import is_outage
from api.store import migrate
from api.store import plans as plan_store
from api.store.db import make_engine, make_sessionmaker, read_rows, read_scalar, session_scope
from api.store.pinned import PinnedReads
from api.store.plans import PlanFilters
from planner.cost.version import COST_MODEL_VERSION as VERSION

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def _backends(database: str) -> list[int]:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchall()
    return [int(pid) for (pid,) in rows]


def _stored(db_url: str) -> tuple[Any, list[dict[str, Any]]]:
    migrate.upgrade(db_url)
    engine = make_engine(db_url)
    rows = synthetic_rows(60, tenant="acme", seed=3)
    for r in rows[:3]:  # today's answers to their requests (find_cached_id finds them)
        r["cost_model_version"] = VERSION
    with session_scope(make_sessionmaker(engine)) as session:
        plan_store.bulk_insert(session, rows=rows)
    return engine, rows


def test_same_rows_as_read_rows(db_url: str) -> None:
    engine, rows = _stored(db_url)
    reads = PinnedReads(engine, connections=2)
    try:
        shape, params = plan_store._shape(PlanFilters(gpu=rows[0]["gpu"]))
        params.update(tenant="acme", limit=30)
        statement = plan_store._history(shape, "-created_at", False)
        expected = read_rows(engine, statement, params)
        assert len(expected) > 3
        for _ in range(3):  # prepared at the first, executed as prepared after
            got = reads.rows(statement, params)
            assert [[(type(v), v) for v in r] for r in got] == [
                [(type(v), v) for v in r] for r in expected
            ]
        assert reads.rows(statement, params, first=True) == expected[:1]
        assert reads.rows(statement, {**params, "tenant": "nobody"}) == []
        found = []
        for r in rows[:5]:
            assert not plan_store.has_submissions(reads, tenant="acme", plan_id=r["id"])
            params = {"tenant": "acme", "request_hash": r["request_hash"], "version": VERSION}
            expected_id = read_scalar(engine, plan_store._FIND_CACHED_ID, params)
            got_id = plan_store.find_cached_id(reads, tenant="acme", request_hash=r["request_hash"])
            assert got_id == expected_id
            found.append(got_id)
        assert any(found)  # not vacuous
        assert plan_store.find_cached_id(reads, tenant="acme", request_hash="0" * 64) is None
        if db_url.startswith("postgresql"):  # this thread's connection, its statements prepared
            (kept,) = reads._kept
            prepared = kept.connection.dbapi_connection.execute(  # type: ignore[union-attr]
                "SELECT statement FROM pg_prepared_statements"
            ).fetchall()
            assert len(prepared) == 3
    finally:
        reads.close()
        engine.dispose()


@pytest.mark.postgres
def test_keeps_one_connection_per_thread_and_recovers(db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("PostgreSQL only: on SQLite every read is read_rows'")
    database = db_url.rsplit("/", 1)[1]
    engine, rows = _stored(db_url)
    engine.dispose()  # the set-up's connections: only the reads' own are left
    reads = PinnedReads(engine, connections=2)
    plan_id = rows[0]["id"]
    try:
        answers: list[bool] = []

        def read() -> None:
            for _ in range(5):
                answers.append(plan_store.has_submissions(reads, tenant="acme", plan_id=plan_id))

        threads = [threading.Thread(target=read) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert answers == [False] * 20
        # two threads kept one connection each; the other two read through the engine's pool
        # (its connections are pooled, so at most the threads that used it at once)
        kept = len(reads._kept)
        assert kept == 2
        assert 2 <= len(_backends(database)) <= 2 + engine.pool.checkedin()

        read()  # this thread: none left to keep, through read_rows
        assert len(reads._kept) == 2
        reads.close()
        assert len(_backends(database)) <= engine.pool.checkedin()  # the kept ones closed
        engine.dispose()
        reads = PinnedReads(engine, connections=2)
        other = _Reader(reads, plan_id)  # a second thread that keeps its own connection
        assert other.read() is False
        assert plan_store.has_submissions(reads, tenant="acme", plan_id=plan_id) is False
        backends = _backends(database)
        assert len(backends) == 2
        mine = reads._local.kept.connection.dbapi_connection.info.backend_pid
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (mine,))
        with pytest.raises(DBAPIError) as lost:
            plan_store.has_submissions(reads, tenant="acme", plan_id=plan_id)
        assert is_outage(lost.value) and lost.value.connection_invalidated
        assert len(reads._kept) == 1  # the other thread's, until its next read
        # both threads read on fresh connections: this one's was lost, the other's is dropped
        assert plan_store.has_submissions(reads, tenant="acme", plan_id=plan_id) is False
        assert other.read() is False
        fresh = _backends(database)
        assert len(fresh) == 2 and not set(fresh) & set(backends)
        other.stop()
    finally:
        reads.close()
        engine.dispose()
    assert _backends(database) == []


class _Reader:
    """A thread that reads `plan_id`'s has_submissions whenever asked."""

    def __init__(self, reads: PinnedReads, plan_id: str) -> None:
        self.reads, self.plan_id = reads, plan_id
        self.asks: queue.Queue[bool] = queue.Queue()
        self.answers: queue.Queue[bool] = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.asks.get():
            found = plan_store.has_submissions(self.reads, tenant="acme", plan_id=self.plan_id)
            self.answers.put(found)

    def read(self) -> bool:
        self.asks.put(True)
        return self.answers.get(timeout=30)

    def stop(self) -> None:
        self.asks.put(False)
        self.thread.join()
