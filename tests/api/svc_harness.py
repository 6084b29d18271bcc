"""Shared helpers of the service tests: settings, keys, a live uvicorn server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.settings import Settings

ADMIN_KEY = "test-admin-key-" + "x" * 24


def make_settings(db_url: str, **kw: object) -> Settings:
    base: dict[str, object] = {
        "database_url": db_url,
        "bootstrap_admin_key": ADMIN_KEY,
        "solver_workers": 2,
        "max_time_limit_s": 10.0,
        # the API's own behaviour on both databases; the PostgreSQL queue and its workers
        # are tested in test_queue_*.py
        "search_queue": "pool",
        "rate_limit_per_s": 0.0,  # tests send faster than a per-key limit; test_ratelimit sets one
        # a full collection of the test process at each app's start; test_service_gc sets it
        "gc_freeze_on_start": False,
    }
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


@dataclass
class Api:
    """A started app with a test client and keys for tenants 'acme' and 'globex'."""

    app: FastAPI
    client: TestClient
    acme: dict[str, str]
    globex: dict[str, str]
    admin: dict[str, str]


def new_key(client: TestClient, tenant: str, *, admin: bool = False) -> dict[str, str]:
    r = client.post(
        "/v1/keys",
        json={"tenant": tenant, "admin": admin},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Live:
    url: str
    app: FastAPI


@contextmanager
def serve(app: FastAPI) -> Iterator[Live]:
    """`app` under a real uvicorn on a free loopback port."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield Live(url=f"http://127.0.0.1:{port}", app=app)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
