"""api.middleware.ServiceMiddleware around small ASGI apps: its gzip answers exactly as
Starlette's GZipMiddleware (the service's gzip layer before the fold) for every kind of
response, and its body limit, rate limit, URL check and metrics answer as they did as layers
of their own."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.doccache import GZIP_LEVEL, GZIP_MINIMUM_BYTES
from api.metrics import Metrics
from api.middleware import ServiceMiddleware
from api.ratelimit import RateLimit, TokenBuckets

Headers = list[tuple[bytes, bytes]]


def _scope(
    path: str = "/v1/x", query: bytes = b"", headers: Headers | None = None
) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogateescape"),
        "query_string": query,
        "root_path": "",
        "headers": headers or [],
        "client": ("10.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }


def _call(app: ASGIApp, scope: dict[str, Any], chunks: list[bytes] | None = None) -> list[Message]:
    """The messages `app` sends for one request whose body arrives as `chunks`."""
    pending = list(chunks or [b""])
    sent: list[Message] = []

    async def receive() -> Message:
        body = pending.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def _responder(
    status: int, headers: Headers, bodies: list[bytes], *, trailers: bool = False
) -> ASGIApp:
    """An app that answers every request with `bodies` as successive body messages."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        start: Message = {"type": "http.response.start", "status": status}
        start["headers"] = list(headers)
        if trailers:
            start["trailers"] = True
        await send(start)
        for i, body in enumerate(bodies):
            more = i < len(bodies) - 1
            await send({"type": "http.response.body", "body": body, "more_body": more})

    return app


def _service(app: ASGIApp, **kw: Any) -> ServiceMiddleware:
    options: dict[str, Any] = {
        "max_bytes": 1 << 20,
        "metrics": Metrics(),
        "buckets": None,
        "known": lambda _digest: False,
    }
    options.update(kw)
    return ServiceMiddleware(app, **options)


def _starlette(app: ASGIApp) -> ASGIApp:
    return GZipMiddleware(app, minimum_size=GZIP_MINIMUM_BYTES, compresslevel=GZIP_LEVEL)


def _normal(messages: list[Message]) -> tuple[int, list[tuple[bytes, bytes]], bytes, list[str]]:
    """(status, headers sorted, the body's bytes joined, message kinds)."""
    start = messages[0]
    body = b"".join(m.get("body", b"") for m in messages[1:])
    return int(start["status"]), sorted(start["headers"]), body, [m["type"] for m in messages]


JSON = [(b"content-type", b"application/json")]
TEXT = b"".join(b'{"layer": %d, "stage": %d}, ' % (i, i % 7) for i in range(400))
BIG_TEXT = TEXT * 40  # past the size compressed in a thread
RESPONSES: dict[str, tuple[int, Headers, list[bytes]]] = {
    "json": (200, [*JSON, (b"content-length", b"%d" % len(TEXT))], [TEXT]),
    "small": (200, [*JSON, (b"content-length", b"20")], [TEXT[:20]]),
    "at the minimum": (200, JSON, [TEXT[:GZIP_MINIMUM_BYTES]]),
    "below the minimum": (200, JSON, [TEXT[: GZIP_MINIMUM_BYTES - 1]]),
    "problem": (422, [(b"content-type", b"application/problem+json")], [TEXT]),
    "text with charset": (200, [(b"content-type", b"text/plain; charset=utf-8")], [TEXT]),
    "svg": (200, [(b"content-type", b"image/svg+xml")], [TEXT]),
    "archive": (200, [(b"content-type", b"application/gzip")], [TEXT]),
    "png": (200, [(b"content-type", b"image/png")], [TEXT]),
    "audio (a whole type)": (200, [(b"content-type", b"audio/ogg")], [TEXT]),
    "grpc+proto": (200, [(b"content-type", b"application/grpc+proto")], [TEXT]),
    "no content type": (200, [], [TEXT]),
    "encoded already": (200, [*JSON, (b"content-encoding", b"br")], [TEXT]),
    "partial": (206, JSON, [TEXT]),
    "vary already": (200, [*JSON, (b"vary", b"Origin")], [TEXT]),
    "streamed": (200, JSON, [TEXT[:700], TEXT[700:1500], TEXT[1500:]]),
    "streamed, small first": (200, JSON, [b"[", TEXT, b"]"]),
    "streamed, ends empty": (200, JSON, [TEXT, b""]),
    "large": (200, JSON, [BIG_TEXT]),
    "no body": (204, [], [b""]),
}
ACCEPTS: dict[str, Headers] = {
    "gzip": [(b"accept-encoding", b"gzip, deflate")],
    "gzip with q": [(b"accept-encoding", b"br;q=1.0, gzip;q=0.5")],
    "identity": [(b"accept-encoding", b"identity")],
    "none": [],
    "second header names gzip": [
        (b"accept-encoding", b"identity"),
        (b"accept-encoding", b"gzip"),
    ],
}


@pytest.mark.parametrize("accept", ACCEPTS)
@pytest.mark.parametrize("response", RESPONSES)
def test_gzip_answers_as_starlettes_gzip_middleware(response: str, accept: str) -> None:
    status, headers, bodies = RESPONSES[response]
    scope = _scope(headers=ACCEPTS[accept])
    ours = _normal(_call(_service(_responder(status, headers, bodies)), scope))
    theirs = _normal(_call(_starlette(_responder(status, headers, bodies)), scope))
    assert ours == theirs
    _, got_headers, body, _ = ours
    fields = dict(got_headers)
    plain = b"".join(bodies)
    assert (gzip.decompress(body) if fields.get(b"content-encoding") == b"gzip" else body) == (
        plain
    )


def test_gzip_with_trailers_has_no_content_length() -> None:
    app = _responder(200, [*JSON, (b"content-length", b"%d" % len(TEXT))], [TEXT], trailers=True)
    scope = _scope(headers=ACCEPTS["gzip"])
    ours = _normal(_call(_service(app), scope))
    assert ours == _normal(_call(_starlette(app), scope))
    assert b"content-length" not in dict(ours[1])
    assert gzip.decompress(ours[2]) == TEXT


def test_gzip_body_is_at_zlibs_level_and_sized() -> None:
    app = _responder(200, JSON, [TEXT])
    _, headers, body, kinds = _normal(_call(_service(app), _scope(headers=ACCEPTS["gzip"])))
    fields = dict(headers)
    assert kinds == ["http.response.start", "http.response.body"]
    assert fields[b"content-length"] == b"%d" % len(body)
    assert fields[b"vary"] == b"Accept-Encoding"
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    assert body == compressor.compress(TEXT) + compressor.flush()


def _reading_app(calls: list[bytes]) -> ASGIApp:
    """Reads the whole body, then answers 200 with its length."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        calls.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": JSON})
        await send({"type": "http.response.body", "body": b"%d" % len(body)})

    return app


def _problem(messages: list[Message]) -> tuple[int, dict[bytes, bytes], dict[str, Any]]:
    status, headers, body, _ = _normal(messages)
    fields = dict(headers)
    assert fields[b"content-type"] == b"application/problem+json"
    return status, fields, json.loads(body)


def _count(metrics: Metrics, status: str, route: str = "unmatched") -> float:
    labels = {"method": "GET", "route": route, "status": status}
    value = metrics.registry.get_sample_value(
        "meshplan_http_request_duration_seconds_count", labels
    )
    return value or 0.0


def test_declared_body_over_the_limit_is_413_before_the_app_and_uncounted() -> None:
    calls: list[bytes] = []
    metrics = Metrics()
    app = _service(_reading_app(calls), max_bytes=100, metrics=metrics)
    status, _, doc = _problem(_call(app, _scope(headers=[(b"content-length", b"101")]), [b"x"]))
    assert (status, doc["max_bytes"], calls) == (413, 100, [])
    assert _count(metrics, "413") == 0
    ok = _normal(_call(app, _scope(headers=[(b"content-length", b"100")]), [b"x" * 100]))
    assert (ok[0], ok[2], calls) == (200, b"100", [b"x" * 100])
    assert _count(metrics, "200") == 1


def test_counted_body_over_the_limit_is_413() -> None:
    calls: list[bytes] = []
    metrics = Metrics()
    app = _service(_reading_app(calls), max_bytes=100, metrics=metrics)
    status, _, doc = _problem(_call(app, _scope(), [b"x" * 60, b"x" * 41]))
    assert (status, doc["type"].rsplit("/", 1)[1], doc["max_bytes"]) == (413, "too-large", 100)
    assert calls == []
    assert _count(metrics, "413") == 1
    ok = _normal(_call(app, _scope(), [b"x" * 60, b"x" * 40]))
    assert ok[0] == 200 and calls == [b"x" * 100]


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_empty_bucket_is_429_with_retry_after_and_health_is_exempt() -> None:
    clock = _Clock()
    buckets = TokenBuckets(RateLimit(rate_per_s=0.5, burst=2), clock=clock)
    metrics = Metrics()
    app = _service(_responder(200, JSON, [b"{}"]), buckets=buckets, metrics=metrics)
    assert [_normal(_call(app, _scope()))[0] for _ in range(2)] == [200, 200]
    status, fields, doc = _problem(_call(app, _scope()))
    assert (status, fields[b"retry-after"], doc["retry_after_s"], doc["burst"]) == (429, b"2", 2, 2)
    assert [_normal(_call(app, _scope("/healthz")))[0] for _ in range(3)] == [200] * 3
    assert _count(metrics, "429") == 1
    clock.now += 2.0  # one token back
    assert _normal(_call(app, _scope()))[0] == 200


@pytest.mark.parametrize(
    ("path", "query", "field"),
    [
        ("/v1/x\x00y", b"", "path"),
        ("/v1/\udcff", b"", "path"),
        ("/v1/x", b"name=a%00b", "query.name"),
        ("/v1/x", b"n%00=1", "query.n\x00"),
        ("/v1/x", b"name=%ED%A0%80", "query.name"),
        ("/v1/x", b"a=1&b=2&a=3", "query.a"),
    ],
)
def test_bad_url_text_is_422_naming_the_field(path: str, query: bytes, field: str) -> None:
    calls: list[bytes] = []
    metrics = Metrics()
    app = _service(_reading_app(calls), metrics=metrics)
    status, _, doc = _problem(_call(app, _scope(path, query)))
    assert (status, doc["errors"][0]["field"], calls) == (422, field, [])
    assert _count(metrics, "422") == 1


@pytest.mark.parametrize("query", [b"", b"a=1&b=", b"name=caf%C3%A9&page_size=5"])
def test_good_urls_reach_the_app(query: bytes) -> None:
    calls: list[bytes] = []
    assert (
        _normal(_call(_service(_reading_app(calls)), _scope("/v1/plans/caf\u00e9", query)))[0]
        == 200
    )
    assert calls == [b""]


def test_metrics_count_by_route_and_status_and_errors() -> None:
    metrics = Metrics()

    def routed(status: int) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
        inner = _responder(status, JSON, [b"{}"])

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            scope["route"] = type("Route", (), {"path": "/v1/plans/{plan_id}"})()
            await inner(scope, receive, send)

        return app

    for status in (200, 200, 404):
        _call(_service(routed(status), metrics=metrics), _scope())
    assert _count(metrics, "200", "/v1/plans/{plan_id}") == 2
    assert _count(metrics, "404", "/v1/plans/{plan_id}") == 1
    errors = metrics.registry.get_sample_value(
        "meshplan_http_errors_total", {"route": "/v1/plans/{plan_id}", "status": "404"}
    )
    assert errors == 1

    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        _call(_service(failing, metrics=metrics), _scope())
    assert _count(metrics, "500") == 1
