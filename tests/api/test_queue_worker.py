"""`meshplan worker` processes on the shared PostgreSQL: a request is answered through a
worker; a worker killed mid-search has its task completed by another (one plan, the job
finished once); SIGTERM lets a running search finish within the grace period, or re-queues
it; SIGTERM to `meshplan serve --with-worker` lets an in-flight request finish."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient
from queue_support import (
    MESHPLAN,
    PG_ADMIN,
    QUEUE_ENV,
    fresh_database,
    job_row,
    log_of,
    query,
    queue_settings,
    slow_request,
    start_worker,
    stop,
    task_status,
    wait_for,
)
from svc_factories import tiny_request
from svc_harness import ADMIN_KEY, free_port, new_key

from api.app import create_app
from api.queue.worker import EXIT_REQUEUED, REQUEUE_MARGIN_S

pytestmark = pytest.mark.postgres
ASYNC = {"Prefer": "respond-async"}


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_database() as url:
        yield url


def _doing(url: str, job_id: str) -> bool:
    return [s for s, _ in task_status(url, job_id)] == ["doing"]


def _plans(url: str, request_hash: str) -> int:
    return int(query(url, "SELECT count(*) FROM plans WHERE request_hash = %s", request_hash)[0][0])


def _hash(url: str, job_id: str) -> str:
    return str(query(url, "SELECT request_hash FROM jobs WHERE id = %s", job_id)[0][0])


def test_request_answered_through_a_worker(pg_url: str) -> None:
    worker = start_worker(pg_url, concurrency=2)
    try:
        with TestClient(create_app(queue_settings(pg_url, migrate_on_start=False))) as client:
            key = new_key(client, "acme")
            r = client.post("/v1/plans", json=tiny_request(), headers=key)
            assert r.status_code == 201, r.text
            plan_id = r.json()["id"]
            again = client.post("/v1/plans", json=tiny_request(), headers=key)
            assert again.status_code == 200 and again.json()["id"] == plan_id
            (job_id,) = [row[0] for row in query(pg_url, "SELECT id FROM jobs")]
            assert job_row(pg_url, job_id) == ("succeeded", plan_id, None)
            job = client.get(f"/v1/jobs/{job_id}", headers=key).json()
            assert job["status"] == "succeeded" and job["progress"] == 1.0
            # a failing search ends its job with the problem, once, and is not retried
            bad = tiny_request(
                model={
                    "family": "gpt",
                    "name": "too-big",  # 175B-like on 4 GPUs: 650 GiB per GPU at least
                    "num_layers": 96,
                    "hidden_size": 12288,
                    "num_attention_heads": 96,
                    "vocab_size": 50000,
                }
            )
            r = client.post("/v1/plans", json=bad, headers={**key, **ASYNC})
            assert r.status_code == 202, r.text
            failed = r.json()["id"]
            wait_for("the failing job", lambda: job_row(pg_url, failed)[0] == "failed", 30)
            assert client.get(f"/v1/jobs/{failed}", headers=key).json()["error"]["status"] == 422
    finally:
        stop(worker)


@pytest.mark.slow
def test_killed_worker_task_completes_on_another(pg_url: str) -> None:
    first = start_worker(pg_url)
    second = None
    try:
        with TestClient(create_app(queue_settings(pg_url, migrate_on_start=False))) as client:
            key = new_key(client, "acme")
            r = client.post("/v1/plans", json=slow_request(), headers={**key, **ASYNC})
            assert r.status_code == 202, r.text
            job_id = r.json()["id"]
            wait_for("the first worker to take the task", lambda: _doing(pg_url, job_id), 30)
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            second = start_worker(pg_url)
            took = wait_for(
                "the second worker to finish the job",
                lambda: job_row(pg_url, job_id)[0] != "running",
                60,
            )
            status, plan_id, key_left = job_row(pg_url, job_id)
            assert (status, key_left) == ("succeeded", None), (status, took)
            assert _plans(pg_url, _hash(pg_url, job_id)) == 1
            poll = client.get(f"/v1/jobs/{job_id}", headers=key).json()
            assert poll["status"] == "succeeded" and poll["plan_id"] == plan_id
            # the retried task ran once more and was then removed as done
            assert task_status(pg_url, job_id) == []
    finally:
        stop(first)
        if second is not None:
            stop(second)


@pytest.mark.slow
def test_sigterm_lets_the_running_search_finish(pg_url: str) -> None:
    worker = start_worker(pg_url, MESHPLAN_WORKER_SHUTDOWN_GRACE_S="30")
    try:
        with TestClient(create_app(queue_settings(pg_url, migrate_on_start=False))) as client:
            key = new_key(client, "acme")
            r = client.post("/v1/plans", json=slow_request(), headers={**key, **ASYNC})
            job_id = r.json()["id"]
            wait_for("the worker to take the task", lambda: _doing(pg_url, job_id), 30)
            worker.send_signal(signal.SIGTERM)
            out, _ = worker.communicate(timeout=30 + REQUEUE_MARGIN_S + 10)
            assert worker.returncode == 0, log_of(worker)[-2000:]
            assert json.loads(out.splitlines()[-1]) == {
                "event": "stopped",
                "name": json.loads(out.splitlines()[0])["name"],
                "requeued": [],
            }
            assert job_row(pg_url, job_id)[0] == "succeeded"
            assert _plans(pg_url, _hash(pg_url, job_id)) == 1
    finally:
        stop(worker)


@pytest.mark.slow
def test_sigterm_requeues_a_search_past_the_grace_period(pg_url: str) -> None:
    grace = 0.5
    worker = start_worker(pg_url, MESHPLAN_WORKER_SHUTDOWN_GRACE_S=str(grace))
    other = None
    try:
        with TestClient(create_app(queue_settings(pg_url, migrate_on_start=False))) as client:
            key = new_key(client, "acme")
            r = client.post("/v1/plans", json=slow_request(12), headers={**key, **ASYNC})
            job_id = r.json()["id"]
            wait_for("the worker to take the task", lambda: _doing(pg_url, job_id), 30)
            start = time.monotonic()
            worker.send_signal(signal.SIGTERM)
            worker.communicate(timeout=30)
            stopped_s = time.monotonic() - start
            assert worker.returncode in (0, EXIT_REQUEUED)
            assert stopped_s < grace + REQUEUE_MARGIN_S + 3, stopped_s
            # handed back, not lost: the job still runs and its task waits for a worker
            assert job_row(pg_url, job_id)[0] == "running"
            assert task_status(pg_url, job_id) == [("todo", 1)]
            other = start_worker(pg_url)
            wait_for("another worker to finish it", lambda: job_row(pg_url, job_id)[0] != "running")
            assert job_row(pg_url, job_id)[0] == "succeeded"
            assert _plans(pg_url, _hash(pg_url, job_id)) == 1
    finally:
        stop(worker)
        if other is not None:
            stop(other)


@pytest.mark.slow
def test_sigterm_to_the_api_finishes_the_in_flight_request(pg_url: str) -> None:
    """`meshplan serve --with-worker`: a POST that waits for its search when SIGTERM comes is
    still answered with the plan."""
    port = free_port()
    env = {
        **os.environ,
        **QUEUE_ENV,
        "MESHPLAN_DATABASE_URL": pg_url,
        "MESHPLAN_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
    }
    server = subprocess.Popen(
        [*MESHPLAN, "serve", "--with-worker", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    answer: dict[str, Any] = {}
    try:
        wait_for("the server", lambda: _up(base), 60)
        with httpx.Client(base_url=base, timeout=60) as http:
            r = http.post(
                "/v1/keys",
                json={"tenant": "acme"},
                headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            )
            key = {"Authorization": f"Bearer {r.json()['key']}"}

            def post() -> None:
                answer["r"] = http.post("/v1/plans", json=slow_request(), headers=key)

            client = threading.Thread(target=post)
            client.start()
            wait_for("the search to start", lambda: _any_doing(pg_url), 30)
            server.send_signal(signal.SIGTERM)
            client.join(60)
        assert answer["r"].status_code == 201, answer["r"].text
        # uvicorn re-raises the signal it caught once its shutdown is complete
        server.wait(30)
        assert server.returncode in (0, -signal.SIGTERM)
    finally:
        if server.poll() is None:
            server.kill()
        log, _ = server.communicate(timeout=30)
    assert "Traceback" not in log, log[-3000:]
    assert "Finished server process" in log, log[-3000:]


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _any_doing(url: str) -> bool:
    rows = query(
        url,
        "SELECT count(*) FROM procrastinate_jobs "
        "WHERE task_name = 'meshplan.search' AND status = 'doing'",
    )
    return bool(rows[0][0])


@pytest.mark.slow
def test_worker_survives_losing_its_connections(pg_url: str) -> None:
    """The server ends every connection of the worker (as a database restart does): the worker
    goes on (new connections) and runs the next request."""
    worker = start_worker(pg_url)
    try:
        name = pg_url.rsplit("/", 1)[1]
        wait_for("the worker to register", lambda: _workers(pg_url) == 1, 30)
        query(
            pg_url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            name,
        )
        with TestClient(create_app(queue_settings(pg_url, migrate_on_start=False))) as client:
            key = new_key(client, "acme")
            r = client.post("/v1/plans", json=tiny_request(), headers=key)
            assert r.status_code == 201, r.text
        assert worker.poll() is None
    finally:
        stop(worker)


def _workers(url: str) -> int:
    return int(query(url, "SELECT count(*) FROM procrastinate_workers")[0][0])


@pytest.mark.slow
def test_task_whose_end_was_not_recorded_is_retried(pg_url: str) -> None:
    """A task left 'doing' under a worker that is alive (its end could not be recorded) is
    retried once it is older than any search may run."""
    with TestClient(create_app(queue_settings(pg_url))) as client:
        key = new_key(client, "acme")
        r = client.post("/v1/plans", json=tiny_request(), headers={**key, **ASYNC})
        job_id = r.json()["id"]
    ((task_id,),) = query(
        pg_url, "SELECT id FROM procrastinate_jobs WHERE args->>'job_id' = %s", job_id
    )
    ((alive,),) = query(pg_url, "INSERT INTO procrastinate_workers DEFAULT VALUES RETURNING id")
    query(
        pg_url,
        "UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s WHERE id = %s",
        alive,
        task_id,
    )
    query(
        pg_url,
        "INSERT INTO procrastinate_events (job_id, type, at) "
        "VALUES (%s, 'started', now() - interval '1 hour')",
        task_id,
    )
    beating = threading.Event()

    def heartbeat() -> None:  # the other worker stays alive throughout
        while not beating.wait(0.2):
            query(
                pg_url,
                "UPDATE procrastinate_workers SET last_heartbeat = now() WHERE id = %s",
                alive,
            )

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    worker = start_worker(pg_url, MESHPLAN_MAX_TIME_LIMIT_S="5")
    try:
        wait_for(
            "the overdue task to be retried and run",
            lambda: job_row(pg_url, job_id)[0] != "running",
            30,
        )
        assert job_row(pg_url, job_id)[0] == "succeeded"
    finally:
        beating.set()
        beat.join(5)
        stop(worker)


@pytest.mark.slow
def test_worker_started_again_after_procrastinate_stops_it(pg_url: str) -> None:
    """A failing heartbeat makes procrastinate stop the worker; the process starts it again
    and, once the database behaves, runs requests."""
    worker = start_worker(pg_url)
    heartbeat = "procrastinate_update_heartbeat_v1(bigint)"
    try:
        wait_for("the worker to register", lambda: _workers(pg_url) >= 1, 30)
        query(pg_url, f"ALTER FUNCTION {heartbeat} RENAME TO procrastinate_heartbeat_away")
        try:
            wait_for("a restart", lambda: "starting again" in log_of(worker), 30)
        finally:
            query(
                pg_url,
                "ALTER FUNCTION procrastinate_heartbeat_away(bigint) "
                "RENAME TO procrastinate_update_heartbeat_v1",
            )
        with TestClient(create_app(queue_settings(pg_url, migrate_on_start=False))) as client:
            key = new_key(client, "acme")
            r = client.post("/v1/plans", json=tiny_request(), headers=key)
            assert r.status_code == 201, r.text
        assert worker.poll() is None
    finally:
        stop(worker)


@pytest.mark.slow
def test_search_outlives_a_database_outage(pg_url: str) -> None:
    """The database refuses every connection while a search runs and when it ends: the
    worker stores the plan once the database is back (one plan, the job succeeded)."""
    name = pg_url.rsplit("/", 1)[1]
    worker = start_worker(pg_url, MESHPLAN_QUEUE_STALLED_AFTER_S="30")
    try:
        with TestClient(create_app(queue_settings(pg_url, migrate_on_start=False))) as client:
            key = new_key(client, "acme")
            r = client.post("/v1/plans", json=slow_request(6), headers={**key, **ASYNC})
            job_id = r.json()["id"]
            wait_for("the worker to take the task", lambda: _doing(pg_url, job_id), 30)
            try:
                _admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
                _admin(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                    name,
                )
                time.sleep(9)  # the search (6 s limit) ends during the outage
            finally:
                _admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        wait_for("the plan", lambda: job_row(pg_url, job_id)[0] != "running", 40)
        assert job_row(pg_url, job_id)[0] == "succeeded"
        assert _plans(pg_url, _hash(pg_url, job_id)) == 1
        assert "database unreachable while storing a result" in log_of(worker)
    finally:
        stop(worker)


def _admin(sql: str, *args: object) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as c:
        c.execute(sql, args)  # type: ignore[call-overload]
