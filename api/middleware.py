"""ASGI middleware: a byte-counting body limit (413), a guard on the URL's text (422) and
request metrics."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.metrics import Metrics
from api.problems import BodyTooLarge, problem_response
from planner.specs.limits import bad_text_reason


class BodyLimitMiddleware:
    """Answer 413 when a body exceeds `max_bytes`: by Content-Length up front, or by counting
    the bytes as they arrive (chunked uploads)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._reject(scope, receive, send)
                    return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._reject(scope, receive, send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem_response(
            413,
            "Request body too large",
            f"bodies are limited to {self.max_bytes} bytes",
            kind="too-large",
            instance=scope.get("path"),
            max_bytes=self.max_bytes,
        )
        await response(scope, receive, send)


# Query parameters that may repeat (`?x=1&x=2`); every other one is single-valued, and a
# repeat is refused rather than silently keeping one of the values.
MULTI_VALUED: frozenset[str] = frozenset()


class UrlTextMiddleware:
    """422 for a path or query parameter holding NUL or a lone surrogate (not storable, and
    PostgreSQL refuses NUL in text), and for a repeated single-valued query parameter."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = url_problem(scope)
            if refused is not None:
                field, message = refused
                response = problem_response(
                    422,
                    "Request validation failed",
                    f"{field}: {message}",
                    kind="validation",
                    instance=scope.get("path"),
                    errors=[{"field": field, "message": message, "value": None}],
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def url_problem(scope: Scope) -> tuple[str, str] | None:
    """(field, reason) of the first bad part of the URL, or None."""
    reason = bad_text_reason(str(scope.get("path", "")))
    if reason is not None:
        return "path", reason
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    pairs = parse_qsl(query, keep_blank_values=True, errors="surrogateescape")
    for name, value in pairs:
        reason = bad_text_reason(name) or bad_text_reason(value)
        if reason is not None:
            return f"query.{name.encode('utf-8', 'replace').decode()}", reason
    counts = Counter(name for name, _ in pairs)
    for name, n in counts.items():
        if n > 1 and name not in MULTI_VALUED:
            return f"query.{name}", f"given {n} times; it takes one value"
    return None


class MetricsMiddleware:
    """Request latency by route template and status; errors counted by status."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route: Any = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            self.metrics.request_seconds.labels(scope["method"], path, str(status)).observe(
                time.perf_counter() - start
            )
            if status >= 400:
                self.metrics.errors.labels(path, str(status)).inc()
