"""The service's middleware, one plain ASGI callable (`ServiceMiddleware`): gzip, the body
limit (413), request metrics, the rate limit (429) and the guard on the URL's text (422).

They are one layer, not five, because each layer is an await, a wrapped `send` and usually a
header scan on every request; folded, a request pays one of each. What each part does, and in
which order, is what it was as separate layers, outermost first:
1. gzip sees every response, the 413 included: a body of at least `gzip_minimum_bytes` gets
   `Vary: Accept-Encoding` and, when the request's first Accept-Encoding header names gzip, is
   compressed (at `gzip_level`); a response that has a Content-Encoding already, a 206, or a
   media type that is compressed already (`PRECOMPRESSED`) goes out as it is;
2. a body whose Content-Length exceeds `max_bytes` is answered 413 at once (not counted in the
   metrics: nothing ran); one without Content-Length is counted as it arrives, and the route
   that reads past `max_bytes` gets `BodyTooLarge` (413 by api.problems' handler, or here if
   it escapes before a response started);
3. metrics: every other request's latency by method, route template and status, and errors
   (status >= 400) by route and status;
4. the rate limit (api.ratelimit): 429 with Retry-After for a caller whose bucket is empty;
5. the URL's text: 422 for a path or query parameter holding NUL or a lone surrogate (not
   storable, and PostgreSQL refuses NUL in text), and for a repeated single-valued query
   parameter."""

from __future__ import annotations

import math
import time
import zlib
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

import anyio.to_thread
from prometheus_client import Counter as MetricCounter
from prometheus_client import Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.doccache import GZIP_LEVEL, GZIP_MINIMUM_BYTES, gzip_compressor
from api.metrics import Metrics
from api.problems import BodyTooLarge, problem_response
from api.ratelimit import EXEMPT_PATHS, TokenBuckets, caller_id
from planner.specs.limits import bad_text_reason

# Media types whose bodies are compressed already (archives, images but SVG, fonts, audio,
# video) or must not be buffered (event streams): never gzip'd. `type/*` covers a whole type.
PRECOMPRESSED: frozenset[str] = frozenset(
    {
        "application/grpc",
        "application/gzip",
        "application/x-gzip",
        "application/zip",
        "audio/*",
        "font/woff",
        "font/woff2",
        "image/avif",
        "image/gif",
        "image/jpeg",
        "image/png",
        "image/webp",
        "text/event-stream",
        "video/*",
    }
)

GZIP_THREAD_BYTES = 128 * 1024
"""A body at least this large is compressed in a worker thread, not on the event loop."""

# Query parameters that may repeat (`?x=1&x=2`); every other one is single-valued, and a
# repeat is refused rather than silently keeping one of the values.
MULTI_VALUED: frozenset[str] = frozenset()


class ServiceMiddleware:
    """gzip, body limit, metrics, rate limit and URL check in one layer (the module's
    docstring says what each does). `buckets=None`: no rate limit."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        metrics: Metrics,
        buckets: TokenBuckets | None,
        known: Callable[[str], bool],
        gzip_minimum_bytes: int = GZIP_MINIMUM_BYTES,
        gzip_level: int = GZIP_LEVEL,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.metrics = metrics
        self.buckets = buckets
        self.known = known
        self.gzip_minimum_bytes = gzip_minimum_bytes
        self.gzip_level = gzip_level
        # prometheus children by label values: `labels()` validates and locks on every call
        self._latency: dict[tuple[str, str, int], Histogram] = {}
        self._errors: dict[tuple[str, int], MetricCounter] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = False
        accepts_gzip: bool | None = None  # the first Accept-Encoding header decides
        for name, value in scope["headers"]:
            if name == b"content-length":
                too_large = too_large or _declared(value) > self.max_bytes
            elif name == b"accept-encoding" and accepts_gzip is None:
                accepts_gzip = b"gzip" in value
        status = 500
        started = False  # the app has begun its response
        held: Message | None = None  # the response's start, sent with its first body
        compressor: Any = None  # a streamed gzip response's
        passing = False  # the rest of the response goes out as the app sends it

        async def respond(message: Message) -> None:
            nonlocal status, started, held, compressor, passing
            kind = message["type"]
            if passing:
                await send(message)
            elif kind == "http.response.start":
                status = int(message["status"])
                started = True
                held = message
            elif kind == "http.response.body" and held is not None:
                start, held = held, None
                compressor = await self._first_body(start, message, bool(accepts_gzip))
                passing = compressor is None
                await send(start)
                await send(message)
            elif kind == "http.response.body" and compressor is not None:
                body = message.get("body", b"")
                if message.get("more_body", False):
                    message["body"] = compressor.compress(body) + compressor.flush(
                        zlib.Z_SYNC_FLUSH
                    )
                else:
                    message["body"] = compressor.compress(body) + compressor.flush()
                await send(message)
            else:  # early hints, trailers, a path to send (after its start)
                if held is not None and kind == "http.response.pathsend":
                    start, held = held, None
                    passing = True
                    await send(start)
                await send(message)

        if too_large:
            await self._too_large(scope, receive, respond)
            return

        seen = 0

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        began = time.perf_counter()
        try:
            if self.buckets is not None and scope["path"] not in EXEMPT_PATHS:
                wait_s = self.buckets.take(caller_id(scope, self.known))
                if wait_s > 0.0:
                    await self._rate_limited(wait_s, self.buckets, scope, receive, respond)
                    return
            refused = url_problem(scope)
            if refused is not None:
                field, message = refused
                await problem_response(
                    422,
                    "Request validation failed",
                    f"{field}: {message}",
                    kind="validation",
                    instance=scope.get("path"),
                    errors=[{"field": field, "message": message, "value": None}],
                )(scope, receive, respond)
                return
            try:
                await self.app(scope, counting_receive, respond)
            except BodyTooLarge:
                if not started:  # else too late for a 413: the response ends where it is
                    await self._too_large(scope, receive, respond)
        finally:
            self._observe(scope, status, time.perf_counter() - began)

    async def _first_body(self, start: Message, message: Message, accepts_gzip: bool) -> Any:
        """Make `start`'s headers and `message`'s body what goes out (gzip'd or not); return
        the compressor a streamed gzip response goes on with, or None."""
        headers = start.setdefault("headers", [])
        if not isinstance(headers, list):
            headers = start["headers"] = list(headers)
        body: bytes = message.get("body", b"")
        more_body: bool = message.get("more_body", False)
        if start["status"] == 206 or (not more_body and len(body) < self.gzip_minimum_bytes):
            return None
        media_type = ""
        for name, value in headers:
            if name == b"content-encoding":
                return None
            if name == b"content-type" and not media_type:
                media_type = value.decode("latin-1").partition(";")[0].strip().lower()
        if media_type in PRECOMPRESSED or media_type.partition("/")[0] + "/*" in PRECOMPRESSED:
            return None
        if media_type.startswith("application/grpc+"):
            return None
        vary = [value for name, value in headers if name == b"vary"]
        headers[:] = [(n, v) for n, v in headers if n != b"vary"]
        headers.append((b"vary", b", ".join([*vary, b"Accept-Encoding"])))
        if not accepts_gzip:
            return None
        compressor = gzip_compressor(self.gzip_level)
        headers[:] = [(n, v) for n, v in headers if n != b"content-length"]
        headers.append((b"content-encoding", b"gzip"))
        if more_body:
            message["body"] = compressor.compress(body) + compressor.flush(zlib.Z_SYNC_FLUSH)
            return compressor
        if len(body) >= GZIP_THREAD_BYTES:
            zipped = await anyio.to_thread.run_sync(_finish, compressor, body)
        else:
            zipped = _finish(compressor, body)
        message["body"] = zipped
        if not start.get("trailers", False):
            headers.append((b"content-length", str(len(zipped)).encode("latin-1")))
        return None

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await problem_response(
            413,
            "Request body too large",
            f"bodies are limited to {self.max_bytes} bytes",
            kind="too-large",
            instance=scope.get("path"),
            max_bytes=self.max_bytes,
        )(scope, receive, send)

    async def _rate_limited(
        self, wait_s: float, buckets: TokenBuckets, scope: Scope, receive: Receive, send: Send
    ) -> None:
        retry_after = max(1, math.ceil(wait_s))
        limit = buckets.limit
        await problem_response(
            429,
            "Too many requests",
            f"this API key may send {limit.rate_per_s:g} requests/s (bursts of {limit.burst}); "
            f"retry in {retry_after} s",
            kind="rate-limited",
            instance=scope.get("path"),
            headers={"Retry-After": str(retry_after)},
            rate_per_s=limit.rate_per_s,
            burst=limit.burst,
            retry_after_s=retry_after,
        )(scope, receive, send)

    def _observe(self, scope: Scope, status: int, seconds: float) -> None:
        route: Any = scope.get("route")
        path: str = getattr(route, "path", None) or "unmatched"
        method: str = scope["method"]
        latency = self._latency.get((method, path, status))
        if latency is None:
            latency = self.metrics.request_seconds.labels(method, path, str(status))
            self._latency[(method, path, status)] = latency
        latency.observe(seconds)
        if status >= 400:
            errors = self._errors.get((path, status))
            if errors is None:
                errors = self.metrics.errors.labels(path, str(status))
                self._errors[(path, status)] = errors
            errors.inc()


def _declared(content_length: bytes) -> int:
    """A Content-Length header's value; 0 when it is not a number (the server refuses those)."""
    try:
        return int(content_length)
    except ValueError:
        return 0


def _finish(compressor: Any, body: bytes) -> bytes:
    return bytes(compressor.compress(body) + compressor.flush())


def url_problem(scope: Scope) -> tuple[str, str] | None:
    """(field, reason) of the first bad part of the URL, or None."""
    reason = bad_text_reason(str(scope.get("path", "")))
    if reason is not None:
        return "path", reason
    raw = scope.get("query_string", b"")
    if not raw:
        return None
    query = bytes(raw).decode("latin-1")
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
