"""ASGI middleware: a byte-counting body limit (413) and request metrics."""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.metrics import Metrics
from api.problems import BodyTooLarge, problem_response


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
