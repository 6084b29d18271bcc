"""The API side of the PostgreSQL search queue, without workers: a job and its task land in
one transaction (or neither), identical requests share one job across API instances, and
SQLite keeps the in-process pool."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from queue_support import fresh_database, job_row, query, queue_settings, task_status
from svc_factories import tiny_request
from svc_harness import make_settings, new_key

from api.app import create_app
from api.settings import Settings
from api.store import jobs as job_store
from api.store.db import session_scope

ASYNC = {"Prefer": "respond-async"}


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_database() as url:
        yield url


@pytest.mark.postgres
def test_acknowledged_request_has_its_task(pg_url: str) -> None:
    with TestClient(create_app(queue_settings(pg_url))) as client:
        key = new_key(client, "acme")
        r = client.post("/v1/plans", json=tiny_request(), headers={**key, **ASYNC})
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]
        assert task_status(pg_url, job_id) == [("todo", 0)]
        assert job_row(pg_url, job_id)[0] == "running"
        metrics = client.get("/metrics").text
        assert 'meshplan_queue_searches{status="todo"} 1.0' in metrics
        assert 'meshplan_queue_searches{status="doing"} 0.0' in metrics
        poll = client.get(f"/v1/jobs/{job_id}", headers=key)
        assert poll.status_code == 200 and poll.json()["status"] == "running"
        assert poll.headers["Retry-After"] == "1"


@pytest.mark.postgres
def test_failed_enqueue_records_no_job(pg_url: str) -> None:
    """The job row and the task share a transaction: when the task cannot be written, the
    request gets a 503 and leaves no job behind (whose claim would block the request)."""
    with TestClient(create_app(queue_settings(pg_url)), raise_server_exceptions=False) as client:
        key = new_key(client, "acme")
        query(pg_url, "ALTER TABLE procrastinate_jobs RENAME TO procrastinate_jobs_away")
        r = client.post("/v1/plans", json=tiny_request(), headers={**key, **ASYNC})
        assert r.status_code == 503, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.headers["Retry-After"] == "1"
        assert query(pg_url, "SELECT count(*) FROM jobs") == [(0,)]
        query(pg_url, "ALTER TABLE procrastinate_jobs_away RENAME TO procrastinate_jobs")
        r = client.post("/v1/plans", json=tiny_request(), headers={**key, **ASYNC})
        assert r.status_code == 202, r.text
        assert task_status(pg_url, r.json()["id"]) == [("todo", 0)]


@pytest.mark.postgres
def test_single_flight_across_two_api_instances(pg_url: str) -> None:
    first = create_app(queue_settings(pg_url))
    second = create_app(queue_settings(pg_url, migrate_on_start=False))
    with TestClient(first) as a, TestClient(second) as b:
        key = new_key(a, "acme")
        one = a.post("/v1/plans", json=tiny_request(), headers={**key, **ASYNC})
        two = b.post("/v1/plans", json=tiny_request(), headers={**key, **ASYNC})
        assert one.status_code == two.status_code == 202
        assert one.json()["id"] == two.json()["id"]
        assert query(pg_url, "SELECT count(*) FROM jobs") == [(1,)]
        assert query(pg_url, "SELECT count(*) FROM procrastinate_jobs") == [(1,)]
        assert second.state.meshplan.metrics.single_flight_joins._value.get() == 1
        # another tenant's identical request is its own job
        other = new_key(a, "globex")
        three = b.post("/v1/plans", json=tiny_request(), headers={**other, **ASYNC})
        assert three.json()["id"] != one.json()["id"]
        # force=true never joins
        forced = a.post("/v1/plans", json=tiny_request(force=True), headers={**key, **ASYNC})
        assert forced.json()["id"] != one.json()["id"]
        assert query(pg_url, "SELECT count(*) FROM procrastinate_jobs") == [(3,)]


def test_sqlite_keeps_the_pool(tmp_path: Path) -> None:
    settings = make_settings(f"sqlite:///{tmp_path / 'm.db'}", search_queue="auto")
    app = create_app(settings)
    assert app.state.meshplan.queue is None
    with TestClient(app) as client:
        key = new_key(client, "acme")
        r = client.post("/v1/plans", json=tiny_request(), headers=key)
        assert r.status_code == 201, r.text
        assert app.state.meshplan.pool.peak_running == 1


def test_queue_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="needs PostgreSQL"):
        Settings(database_url="sqlite:///x.db", search_queue="procrastinate")
    with pytest.raises(ValueError, match=r"STALLED_AFTER_S \(5.0\) must exceed"):
        Settings(queue_heartbeat_s=5, queue_stalled_after_s=5)


def test_worker_refuses_sqlite(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", "from api.cli import main; main()", "worker"],
        env={**os.environ, "MESHPLAN_DATABASE_URL": f"sqlite:///{tmp_path / 'm.db'}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    assert "needs PostgreSQL" in run.stderr and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


@dataclass(frozen=True)
class Progress:
    """The fields of planner.search.SearchProgress (what a search reports)."""

    fraction: float
    settled: int
    total: int
    incumbent_s: float
    lower_bound_s: float
    gap: float
    elapsed_s: float


@pytest.mark.postgres
def test_job_reports_search_progress(pg_url: str) -> None:
    app = create_app(queue_settings(pg_url))
    with TestClient(app) as client:
        key = new_key(client, "acme")
        job_id = client.post("/v1/plans", json=tiny_request(), headers={**key, **ASYNC}).json()[
            "id"
        ]
        sessions = app.state.meshplan.sessions
        with session_scope(sessions) as session:  # before the first incumbent: gap infinite
            job_store.set_progress(
                session,
                job_id=job_id,
                fraction=Progress(0.25, 3, 12, math.inf, 1.5, math.inf, 0.4),
            )
        job = client.get(f"/v1/jobs/{job_id}", headers=key).json()
        assert job["progress"] == 0.25
        assert job["progress_detail"] == {
            "settled": 3,
            "total": 12,
            "incumbent_s": None,
            "lower_bound_s": 1.5,
            "gap": None,
            "elapsed_s": 0.4,
        }
        with session_scope(sessions) as session:  # a bare fraction keeps the last detail
            job_store.set_progress(session, job_id=job_id, fraction=1.7)
        job = client.get(f"/v1/jobs/{job_id}", headers=key).json()
        assert job["progress"] == 1.0 and job["progress_detail"]["settled"] == 3
