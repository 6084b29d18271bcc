"""Idempotency keys expire: within `idempotency_ttl_s` a replay returns the stored response;
after it the key is free again (another body is accepted); expired rows are purged, running
reservations are not. On SQLite and PostgreSQL, with a two-second window."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from svc_factories import tiny_request
from svc_harness import make_settings, new_key

from api.app import create_app
from api.routes.plans import body_fingerprint
from api.schemas.plans import PlanCreate
from api.store import idempotency
from api.store.idempotency import Expiry
from api.store.tables import IdempotencyRow

TTL_S = 2.0


def _client(db_url: str, purge_interval_s: float) -> Iterator[tuple[TestClient, Any]]:
    settings = make_settings(
        db_url, idempotency_ttl_s=TTL_S, idempotency_purge_interval_s=purge_interval_s
    )
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, app.state.meshplan


@pytest.fixture
def frequent(db_url: str) -> Iterator[tuple[TestClient, Any]]:
    """Purges due on every new key."""
    yield from _client(db_url, purge_interval_s=0.01)


@pytest.fixture
def rare(db_url: str) -> Iterator[tuple[TestClient, Any]]:
    """One purge (the app's first key), then none for an hour."""
    yield from _client(db_url, purge_interval_s=3600.0)


def _keys(state: Any) -> set[str]:
    with state.sessions() as s:
        return set(s.scalars(select(IdempotencyRow.key)))


def _post(client: TestClient, headers: dict[str, str], key: str, body: dict[str, Any]) -> Any:
    return client.post("/v1/plans", json=body, headers={**headers, "Idempotency-Key": key})


def test_replay_within_the_window_then_the_key_is_free(frequent: tuple[TestClient, Any]) -> None:
    client, _state = frequent
    acme = new_key(client, "acme")
    a, b = tiny_request(tags=["a"]), tiny_request(tags=["b"])
    for body in (a, b):  # searched once here, so the keyed requests below are fast cache hits
        assert client.post("/v1/plans", json=body, headers=acme).status_code == 201
    t0 = time.monotonic()
    first = _post(client, acme, "k-exp", a)
    assert first.status_code == 200 and "idempotent-replayed" not in first.headers
    replay = _post(client, acme, "k-exp", a)
    other = _post(client, acme, "k-exp", b)
    assert time.monotonic() - t0 < TTL_S, "the machine is too slow for this window"
    assert replay.status_code == 200 and replay.headers["idempotent-replayed"] == "true"
    assert replay.json() == first.json()
    assert other.status_code == 422 and other.json()["type"].endswith("idempotency-mismatch")

    time.sleep(TTL_S - (time.monotonic() - t0) + 0.1)
    reused = _post(client, acme, "k-exp", b)  # expired: a new request under the same key
    assert reused.status_code == 200 and "idempotent-replayed" not in reused.headers
    assert reused.json()["id"] == client.post("/v1/plans", json=b, headers=acme).json()["id"]
    again = _post(client, acme, "k-exp", b)
    assert again.headers["idempotent-replayed"] == "true" and again.json() == reused.json()
    assert _post(client, acme, "k-exp", a).status_code == 422  # bound to b now


def test_expired_rows_are_purged_running_ones_kept(frequent: tuple[TestClient, Any]) -> None:
    client, state = frequent
    acme = new_key(client, "acme")
    body = tiny_request(tags=["purge"])
    assert client.post("/v1/plans", json=body, headers=acme).status_code == 201
    for key in ("k-1", "k-2", "k-3"):
        assert _post(client, acme, key, body).status_code == 200
    running = idempotency.begin(
        state.sessions,
        tenant="acme",
        key="k-running",
        fingerprint=body_fingerprint(PlanCreate.model_validate(body)),
    )
    assert running.outcome == "new"  # as if a request with this key were still running
    assert _keys(state) == {"k-1", "k-2", "k-3", "k-running"}

    time.sleep(TTL_S + 0.1)
    assert _post(client, acme, "k-4", body).status_code == 200  # a write: the purge runs
    assert _keys(state) == {"k-4", "k-running"}
    assert _post(client, acme, "k-running", body).status_code == 409


def test_expiry_does_not_wait_for_a_purge(rare: tuple[TestClient, Any]) -> None:
    client, state = rare
    acme = new_key(client, "acme")
    a, b = tiny_request(tags=["ra"]), tiny_request(tags=["rb"])
    for body in (a, b):
        assert client.post("/v1/plans", json=body, headers=acme).status_code == 201
    assert _post(client, acme, "k-old", a).status_code == 200
    time.sleep(TTL_S + 0.1)
    assert _post(client, acme, "k-new", a).status_code == 200  # no purge due yet
    assert _keys(state) == {"k-old", "k-new"}
    reused = _post(client, acme, "k-old", b)
    assert reused.status_code == 200 and "idempotent-replayed" not in reused.headers


@pytest.mark.parametrize(("ttl", "interval"), [(0.0, 1.0), (1.0, -1.0)])
def test_expiry_is_validated(ttl: float, interval: float) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        Expiry(ttl_s=ttl, purge_interval_s=interval)
