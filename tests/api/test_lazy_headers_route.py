"""POST /v1/plans is an `api.deps.LazyHeadersRoute` (its `Idempotency-Key` and `Prefer`
header parameters read by the route, only when sent). Its answers must be the ones FastAPI's
own handler gives: each case is sent to the app and to a reference app on the same database
whose LazyHeadersRoute answers through `APIRoute.get_route_handler` (FastAPI's solving of the
header parameters), and the two answers are compared byte for byte, the combined header and
body 422s included; the cases' statuses are checked against the API's contract besides."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import pytest
from fastapi import Header, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from svc_factories import evaluated_result, tiny_request
from svc_harness import make_settings, new_key

from api.app import create_app
from api.deps import LazyHeadersRoute
from api.planning import normalise
from api.routes import plans
from api.state import AppState
from api.store.db import session_scope
from api.store.plans import insert_plan
from planner.specs import PlanRequest

PROBLEM = "application/problem+json"


@contextmanager
def _app(db_url: str, *, solved: bool = False, **settings: Any) -> Iterator[TestClient]:
    """The service; with `solved`, its LazyHeadersRoutes answer through FastAPI's own handler
    (header parameters solved on every request), as POST /v1/plans did before. Patched for
    the app's whole life (FastAPI builds an included route's handler lazily)."""
    with pytest.MonkeyPatch.context() as mp:
        if solved:
            mp.setattr(LazyHeadersRoute, "get_route_handler", APIRoute.get_route_handler)
        app = create_app(make_settings(db_url, **settings))
        with TestClient(app, raise_server_exceptions=False) as client:
            assert client.post("/v1/plans", json={}).status_code == 401  # handlers built
            yield client


@pytest.fixture
def stored(db_url: str) -> Iterator[dict[str, Any]]:
    """acme's key and a stored plan for tiny_request (so that posting it is a cache hit)."""
    with _app(db_url) as client:
        acme = new_key(client, "acme")
        state = client.app.state.meshplan  # type: ignore[attr-defined]
        assert isinstance(state, AppState)
        norm = normalise(state, "acme", PlanRequest.model_validate(tiny_request()))
        result = evaluated_result(tiny_request(), {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b"})
        with session_scope(state.sessions) as session:
            insert_plan(
                session,
                tenant="acme",
                request_hash=norm.request_hash,
                request=norm.document,
                result=result,
                tags=[],
            )
        yield {"url": db_url, "acme": acme}


def _answer(client: TestClient, headers: dict[str, str], **send: Any) -> Any:
    r = client.post("/v1/plans", headers=headers, **send)
    return r.status_code, sorted(r.headers.items()), r.content


def _cases(acme: dict[str, str]) -> list[tuple[str, dict[str, str], dict[str, Any], int]]:
    """(name, headers, what is sent, the status the API's contract gives)."""
    body = {"json": tiny_request()}
    bad_body = {"json": {"model": {"name": "x"}}}
    empty_key = {**acme, "Idempotency-Key": ""}
    long_key = {**acme, "Idempotency-Key": "k" * 201}
    return [
        ("cached, no header", acme, body, 200),
        ("cached, Prefer respond-async", {**acme, "Prefer": "respond-async"}, body, 200),
        ("cached, another Prefer", {**acme, "Prefer": "return=minimal"}, body, 200),
        ("empty Idempotency-Key", empty_key, body, 422),
        ("Idempotency-Key too long", long_key, body, 422),
        ("too long, with Prefer", {**long_key, "Prefer": "respond-async"}, body, 422),
        ("bad header and bad body", empty_key, bad_body, 422),
        ("bad header and no body", empty_key, {}, 422),
        ("bad header and malformed JSON", empty_key, _raw(b'{"model": '), 400),
        ("bad header and a text body", empty_key, _raw(b"hello", "text/plain"), 422),
        ("bad header and no key", {"Idempotency-Key": ""}, bad_body, 401),
        ("bad body alone", acme, bad_body, 422),
        ("malformed JSON alone", acme, _raw(b"[1,"), 400),
    ]


def _raw(content: bytes, media_type: str = "application/json") -> dict[str, Any]:
    return {"content": content, "headers_extra": {"Content-Type": media_type}}


def _send(client: TestClient, headers: dict[str, str], send: dict[str, Any]) -> Any:
    send = dict(send)
    extra = send.pop("headers_extra", {})
    return _answer(client, {**headers, **extra}, **send)


def test_answers_are_fastapis_own(stored: dict[str, Any]) -> None:
    acme = stored["acme"]
    with (
        _app(stored["url"], migrate_on_start=False) as fast,
        _app(stored["url"], solved=True, migrate_on_start=False) as solved,
    ):
        for name, headers, send, status in _cases(acme):
            got = _send(fast, headers, send)
            assert got == _send(solved, headers, send), name
            code, head, content = got
            assert code == status, (name, content[:300])
            if status >= 400:
                assert dict(head)["content-type"] == PROBLEM, name
        both = fast.post("/v1/plans", json={}, headers={**acme, "Idempotency-Key": ""}).json()
        fields = [e["field"] for e in both["errors"]]
        assert fields[0] == "header.idempotency-key" and len(fields) > 1  # then the body's
        # a valid key: the first answer and its replay are the same in both (each app its own
        # key: they share the database, where a key is remembered)
        for i in range(2):
            answers = [
                _send(client, {**acme, "Idempotency-Key": f"key-{n}"}, {"json": tiny_request()})
                for n, client in (("fast", fast), ("solved", solved))
            ]
            assert answers[0] == answers[1]
            assert answers[0][0] == 200
            assert (("idempotent-replayed", "true") in answers[0][1]) == (i == 1)


def test_create_plan_is_a_lazy_headers_route() -> None:
    routes = [r for r in plans.router.routes if isinstance(r, LazyHeadersRoute)]
    assert [(r.name, r.methods) for r in routes] == [("create_plan", {"POST"})]


async def _optional(request: Request, x_tag: Annotated[str | None, Header()] = None) -> Response:
    return Response(x_tag or "")


async def _required(request: Request, x_tag: Annotated[str, Header()]) -> Response:
    return Response(x_tag)


async def _defaulted(request: Request, x_tag: Annotated[str, Header()] = "a") -> Response:
    return Response(x_tag)


async def _without_request(x_tag: Annotated[str | None, Header()] = None) -> Response:
    return Response(x_tag or "")


def test_an_endpoint_whose_headers_need_solving_is_refused() -> None:
    LazyHeadersRoute("/x", _optional, methods=["POST"])
    for endpoint in (_required, _defaulted, _without_request):
        with pytest.raises(TypeError, match="LazyHeadersRoute"):
            LazyHeadersRoute("/x", endpoint, methods=["POST"])
