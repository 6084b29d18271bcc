"""Service test fixtures: a fresh database per test on SQLite and on PostgreSQL (created as
meshplan_test_<random> on 127.0.0.1:5432 and dropped afterwards), and an app on it."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from svc_harness import ADMIN_KEY, Api, Live, make_settings, new_key, serve

from api.app import create_app

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def create_pg_database() -> str:
    name = f"meshplan_test_{secrets.token_hex(6)}"
    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_pg_database(name: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'meshplan.db'}"
        return
    name = create_pg_database()
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        drop_pg_database(name)


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    app = create_app(make_settings(db_url))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Api(
            app=app,
            client=client,
            acme=new_key(client, "acme"),
            globex=new_key(client, "globex"),
            admin={"Authorization": f"Bearer {ADMIN_KEY}"},
        )


@pytest.fixture
def live_server(db_url: str) -> Iterator[Live]:
    with serve(create_app(make_settings(db_url))) as live:
        yield live
