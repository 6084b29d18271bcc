"""GET /v1/plans/{id} and the history page are `api.deps.PrincipalRoute`s (the principal
without FastAPI's dependency solving). Their answers must be the ones FastAPI's own handler
gives for the same endpoints: the same authentication (401s, the page cookie, dev-open), the
same tenant scoping (404), the same rate limit (429), gzip and problem+json errors. Each case
is sent to the app and to a reference app on the same database whose PrincipalRoutes answer
through `APIRoute.get_route_handler` (the dependency solving the routes had before), and the
two answers are compared byte for byte; the cases' statuses are checked against the API's
contract besides."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi import Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from svc_factories import evaluated_result, tiny_request
from svc_harness import ADMIN_KEY, make_settings, new_key

from api.app import create_app
from api.auth import COOKIE, DEV_PRINCIPAL, principal_bearer
from api.deps import PrincipalDep, PrincipalRoute
from api.routes import plans
from api.state import AppState
from api.store.db import session_scope
from api.store.plans import insert_plan

PROBLEM = "application/problem+json"


@contextmanager
def _app(db_url: str, *, solved: bool = False, **settings: Any) -> Iterator[TestClient]:
    """The service; with `solved`, its PrincipalRoutes answer through FastAPI's own handler
    (dependency solving), as the routes did before they were PrincipalRoutes. FastAPI builds
    an included route's handler when the router is included or at the app's first request
    (by version), so the reference app is patched for its whole life; an app opened while
    it is must have answered a request before."""
    with pytest.MonkeyPatch.context() as mp:
        if solved:
            mp.setattr(PrincipalRoute, "get_route_handler", APIRoute.get_route_handler)
        app = create_app(make_settings(db_url, **settings))
        with TestClient(app, raise_server_exceptions=False) as client:
            assert client.get("/v1/plans/warm-up").status_code in (401, 404)  # handlers built
            yield client


def _check_solved(fast: TestClient, solved: TestClient) -> None:
    """The reference really solves dependencies: app.dependency_overrides, which only
    FastAPI's solving consults, let a keyless request in there and not in `fast`."""
    for client in (fast, solved):
        client.app.dependency_overrides[principal_bearer] = lambda: DEV_PRINCIPAL  # type: ignore[attr-defined]
    try:
        assert solved.get("/v1/plans", headers={}).status_code == 200
        assert fast.get("/v1/plans", headers={}).status_code == 401
    finally:
        for client in (fast, solved):
            client.app.dependency_overrides.clear()  # type: ignore[attr-defined]


def _principal_routes() -> list[PrincipalRoute]:
    return [r for r in plans.router.routes if isinstance(r, PrincipalRoute)]


def _store_plan(client: TestClient, tenant: str) -> str:
    state = client.app.state.meshplan  # type: ignore[attr-defined]
    assert isinstance(state, AppState)
    request = tiny_request()
    result = evaluated_result(request, {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b"})
    with session_scope(state.sessions) as session:
        return insert_plan(
            session, tenant=tenant, request_hash="p" * 64, request=request, result=result, tags=[]
        ).id


def _answer(client: TestClient, url: str, headers: dict[str, str], cookie: str | None) -> Any:
    if cookie is not None:
        client.cookies.set(COOKIE, cookie)
    try:
        r = client.get(url, headers=headers)
    finally:
        client.cookies.clear()
    return r.status_code, sorted(r.headers.items()), r.content


@pytest.fixture
def keys(db_url: str) -> Iterator[dict[str, Any]]:
    with _app(db_url) as client:
        acme, globex = new_key(client, "acme"), new_key(client, "globex")
        yield {"url": db_url, "acme": acme, "globex": globex, "plan": _store_plan(client, "acme")}


def _cases(keys: dict[str, Any]) -> list[tuple[str, str, dict[str, str], str | None, int]]:
    """(name, url, headers, page cookie, the status the API's contract gives)."""
    plan = f"/v1/plans/{keys['plan']}"
    acme, globex = keys["acme"], keys["globex"]
    acme_key = acme["Authorization"].removeprefix("Bearer ")
    history = "/v1/plans?page_size=5"
    return [
        ("own plan", plan, acme, None, 200),
        ("own plan again (cached)", plan, acme, None, 200),
        ("own plan, gzip", plan, {**acme, "Accept-Encoding": "gzip"}, None, 200),
        ("another tenant's plan", plan, globex, None, 404),
        ("no plan of that id", "/v1/plans/nope", acme, None, 404),
        ("no key", plan, {}, None, 401),
        ("not a bearer header", plan, {"Authorization": "Basic YWNtZTp4"}, None, 401),
        ("unknown key", plan, {"Authorization": "Bearer not-a-key-of-anyone"}, None, 401),
        ("the page cookie", plan, {}, acme_key, 200),
        ("an unknown page cookie", plan, {}, "not-a-key", 401),
        ("history", history, acme, None, 200),
        ("history, gzip", history, {**acme, "Accept-Encoding": "gzip"}, None, 200),
        ("another tenant's history", history, globex, None, 200),
        ("history, no key", history, {}, None, 401),
        ("history, not a bearer header", history, {"Authorization": "Token x"}, None, 401),
        ("history, bad page size", "/v1/plans?page_size=0", acme, None, 422),
        ("history, unknown schedule", "/v1/plans?schedule=bogus", acme, None, 422),
        ("history, the page cookie", history, {}, acme_key, 200),
    ]


def test_answers_are_fastapis_own(keys: dict[str, Any]) -> None:
    with (
        _app(keys["url"], migrate_on_start=False) as fast,
        _app(keys["url"], solved=True, migrate_on_start=False) as solved,
    ):
        _check_solved(fast, solved)
        for name, url, headers, cookie, status in _cases(keys):
            got = _answer(fast, url, headers, cookie)
            assert got == _answer(solved, url, headers, cookie), name
            code, head, body = got
            assert code == status, (name, body[:300])
            if status >= 400:
                assert dict(head)["content-type"] == PROBLEM, name
            if status == 401:
                assert dict(head)["www-authenticate"] == "Bearer", name
        own = fast.get(f"/v1/plans/{keys['plan']}", headers=keys["acme"]).json()
        assert own["id"] == keys["plan"]
        zipped = fast.get(
            f"/v1/plans/{keys['plan']}", headers={**keys["acme"], "Accept-Encoding": "gzip"}
        )
        assert zipped.headers["content-encoding"] == "gzip"
        assert zipped.json() == own
        assert gzip.compress(b"") != zipped.content  # decoded by the client: not empty
        globex = fast.get("/v1/plans", headers=keys["globex"]).json()
        assert globex["data"] == []  # acme's plan is not in another tenant's history


def test_dev_open_acts_as_dev_as_before(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'meshplan.db'}"
    with (
        _app(url, dev_open=True) as fast,
        _app(url, solved=True, dev_open=True, migrate_on_start=False) as solved,
    ):
        plan = _store_plan(fast, "dev")
        for target in (f"/v1/plans/{plan}", "/v1/plans"):
            got = _answer(fast, target, {}, None)
            assert got[0] == 200, got[2][:300]
            assert got == _answer(solved, target, {}, None)


def test_rate_limit_answers_429_as_before(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'meshplan.db'}"
    limits = {"rate_limit_per_s": 0.01, "rate_limit_burst": 3}
    for solved in (False, True):
        db = url if not solved else f"sqlite:///{tmp_path / 'solved.db'}"
        with _app(db, solved=solved, **limits) as client:
            admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
            r = client.post("/v1/keys", json={"tenant": "acme"}, headers=admin)
            assert r.status_code == 201, r.text
            acme = {"Authorization": f"Bearer {r.json()['key']}"}
            plan = _store_plan(client, "acme")
            # the address's bucket (api.ratelimit) paid for the warm-up, the admin's request
            # and acme's first, which authenticates the key; then the key's own bucket: its
            # burst of 3, then 429s
            answers = [client.get(f"/v1/plans/{plan}", headers=acme) for _ in range(4)]
            assert [a.status_code for a in answers] == [200] * 4
            for target in (f"/v1/plans/{plan}", "/v1/plans"):
                limited = client.get(target, headers=acme)
                assert limited.status_code == 429, limited.text
                assert limited.headers["content-type"] == PROBLEM
                assert int(limited.headers["retry-after"]) >= 1
                assert limited.json()["status"] == 429


def test_the_hot_reads_are_principal_routes() -> None:
    assert sorted(r.name for r in _principal_routes()) == ["get_plan", "list_plans"]


async def _plain(plan_id: str, request: Request, principal: PrincipalDep) -> Response:
    return Response(plan_id)


async def _with_query(plan_id: str, request: Request, principal: PrincipalDep, n: int) -> Response:
    return Response(plan_id)


async def _with_int_path(plan_id: int, request: Request, principal: PrincipalDep) -> Response:
    return Response(str(plan_id))


async def _without_principal(plan_id: str, request: Request) -> Response:
    return Response(plan_id)


def test_an_endpoint_that_needs_solving_is_refused() -> None:
    PrincipalRoute("/x/{plan_id}", _plain, methods=["GET"])
    for endpoint in (_with_query, _with_int_path, _without_principal):
        with pytest.raises(TypeError, match="PrincipalRoute"):
            PrincipalRoute("/x/{plan_id}", endpoint, methods=["GET"])
