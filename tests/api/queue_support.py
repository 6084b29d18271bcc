"""Helpers of the queue tests: a fresh PostgreSQL database, apps in queue mode, `meshplan
worker` processes, and reads of the jobs and procrastinate tables."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from svc_harness import make_settings

from api.settings import Settings

# fast heartbeats so that a killed worker is presumed dead within ~2 s
QUEUE_ENV = {
    "MESHPLAN_QUEUE_HEARTBEAT_S": "0.5",
    "MESHPLAN_QUEUE_STALLED_AFTER_S": "2",
    "MESHPLAN_QUEUE_STALLED_CHECK_S": "1",
    "MESHPLAN_MAX_TIME_LIMIT_S": "20",
}


MESHPLAN = (sys.executable, "-c", "from api.cli import main; main()")  # this tree's CLI


def queue_settings(url: str, **kw: object) -> Settings:
    return make_settings(url, search_queue="procrastinate", **kw)


def conn(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)


def query(url: str, sql: str, *args: object) -> list[tuple[Any, ...]]:
    """The rows of `sql` (none for a statement that returns none)."""
    with conn(url) as c:
        cur = c.execute(sql, args)  # type: ignore[call-overload]
        return list(cur.fetchall()) if cur.description is not None else []


def start_worker(url: str, *, concurrency: int = 1, **env: str) -> subprocess.Popen[str]:
    """`meshplan worker --json`, returned once it printed its start line. Its log goes to a
    file (`log_of`): a pipe nobody reads would block a worker that logs a lot."""
    # closed (and removed) by stop()
    log = tempfile.NamedTemporaryFile("w+", prefix="meshplan-worker-", suffix=".log")  # noqa: SIM115
    proc = subprocess.Popen(
        [*MESHPLAN, "worker", "--json", "--concurrency", str(concurrency)],
        env={**os.environ, **QUEUE_ENV, "MESHPLAN_DATABASE_URL": url, **env},
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    _LOGS[proc.pid] = log
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"worker did not start: {log_of(proc)}"
    assert json.loads(line)["event"] == "started"
    return proc


_LOGS: dict[int, Any] = {}


def log_of(proc: subprocess.Popen[str]) -> str:
    """What the worker has logged so far."""
    log = _LOGS[proc.pid]
    log.flush()
    with open(log.name, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def stop(proc: subprocess.Popen[str]) -> str:
    """Kill the worker if it still runs; its log."""
    if proc.poll() is None:
        proc.kill()
    try:
        proc.communicate(timeout=30)
    except ValueError:  # stdout already read to the end
        proc.wait(30)
    text = log_of(proc)
    _LOGS.pop(proc.pid).close()
    return text


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> float:
    """Poll `check` until it holds; the seconds it took."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - start


def task_status(url: str, job_id: str) -> list[tuple[str, int]]:
    """(status, attempts) of the procrastinate tasks of one job."""
    rows = query(
        url,
        "SELECT status::text, attempts FROM procrastinate_jobs "
        "WHERE task_name = 'meshplan.search' AND args->>'job_id' = %s",
        job_id,
    )
    return [(r[0], r[1]) for r in rows]


def job_row(url: str, job_id: str) -> tuple[str, str | None, str | None]:
    """(status, plan id, inflight key) of a jobs row."""
    (row,) = query(url, "SELECT status, plan_id, inflight_key FROM jobs WHERE id = %s", job_id)
    return row[0], row[1], row[2]


def slow_request(time_limit_s: float = 8.0) -> dict[str, Any]:
    """A search that takes seconds (96 layers on 512 GPUs): long enough to kill a worker in."""
    return {
        "model": {
            "family": "gpt",
            "name": "queue-slow",
            "num_layers": 96,
            "hidden_size": 8192,
            "num_attention_heads": 64,
            "vocab_size": 50000,
        },
        "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 512, "gpus_per_node": 8},
        "training": {"global_batch_size": 1024, "seq_length": 2048},
        "search": {"time_limit_s": time_limit_s, "top_k": 2},
    }


PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new database on the shared server (dropped afterwards); its SQLAlchemy URL."""
    name = f"meshplan_test_{secrets.token_hex(6)}"
    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
