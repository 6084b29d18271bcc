"""Rate limits per API key: a token bucket per caller, checked before the request is read.

A bucket holds up to `burst` tokens and refills at `rate_per_s` (the token-bucket metering
of RFC 2697 section 3, with one bucket: size `burst`, rate `rate_per_s`). Each request takes
one token; a request that finds the bucket empty is answered `429` problem+json with
`Retry-After`, the whole seconds until a token is back (RFC 9110 section 10.2.3; RFC 6585
section 4 for 429).

Who the caller is: the API key a request presents (bearer header, `?key=` or the page cookie,
as `api.auth` reads them) once that key has authenticated in this process (it is in the app's
key cache); before that, and for requests without a key, the client's address. So a valid key
gets its own bucket, other keys are unaffected by it, and a flood of unknown keys (each one a
database look-up) shares its sender's address bucket. Health and metrics endpoints are exempt.

Buckets live in the memory of each API process: with N processes (uvicorn `--workers`, or
replicas behind a load balancer) a key may get up to N times the rate and the burst. Set the
rate to the per-key budget divided by N where that matters; the limit protects the service
from one noisy caller, it is not a billing quota, so no shared store is kept.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import Scope

from api.auth import COOKIE
from api.schemas.problem import PROBLEM_JSON
from api.settings import Settings
from api.store.keys import hash_key

EXEMPT_PATHS: frozenset[str] = frozenset({"/healthz", "/readyz", "/metrics"})


@dataclass(frozen=True)
class RateLimit:
    """`rate_per_s` tokens a second, at most `burst` saved; `max_buckets` callers remembered
    (the least recently seen beyond it are forgotten, i.e. start again with a full bucket)."""

    rate_per_s: float
    burst: int
    max_buckets: int = 100_000

    def __post_init__(self) -> None:
        if not (self.rate_per_s > 0 and math.isfinite(self.rate_per_s)):
            raise ValueError(f"rate_per_s must be a positive finite number, got {self.rate_per_s}")
        if self.burst < 1:
            raise ValueError(f"burst must be at least 1, got {self.burst}")
        if self.max_buckets < 1:
            raise ValueError(f"max_buckets must be at least 1, got {self.max_buckets}")


@dataclass
class _Bucket:
    tokens: float
    at: float


class TokenBuckets:
    """One bucket per caller id. Not thread-safe: api.middleware uses it from the event loop."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def take(self, caller: str) -> float:
        """Take a token for `caller`: 0.0 when granted, else the seconds until one is back."""
        now = self.clock()
        limit = self.limit
        bucket = self._buckets.pop(caller, None)
        if bucket is None:
            bucket = _Bucket(tokens=float(limit.burst), at=now)
        else:
            elapsed = max(0.0, now - bucket.at)
            bucket.tokens = min(float(limit.burst), bucket.tokens + elapsed * limit.rate_per_s)
            bucket.at = now
        self._buckets[caller] = bucket  # most recently seen last
        if len(self._buckets) > limit.max_buckets:
            self._buckets.popitem(last=False)
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / limit.rate_per_s


def presented_key(scope: Scope) -> str | None:
    """The API key a request carries, read as `api.auth` reads it (bearer, `?key=`, cookie)."""
    headers: dict[bytes, bytes] = dict(scope.get("headers", ()))
    auth = headers.get(b"authorization", b"").decode("latin-1")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    for name, value in parse_qsl(query, errors="surrogateescape"):
        if name == "key" and value:
            return value
    for cookie in headers.get(b"cookie", b"").decode("latin-1").split(";"):
        name, _, value = cookie.strip().partition("=")
        if name == COOKIE and value:
            return value
    return None


def caller_id(scope: Scope, known: Callable[[str], bool]) -> str:
    """The bucket a request draws on: its key's hash when `known(hash)`, else its address."""
    key = presented_key(scope)
    if key is not None:
        digest = hash_key(key)
        if known(digest):
            return "key:" + digest
    client = scope.get("client")
    return "addr:" + (str(client[0]) if client else "unknown")


def declare_rate_limited(doc: dict[str, Any]) -> None:
    """Every operation but the exempt ones may answer 429 (with `Retry-After`)."""
    response = {
        "description": "Too many requests from this API key (rate limit)",
        "headers": {
            "Retry-After": {
                "description": "seconds until the key may send again",
                "schema": {"type": "integer", "minimum": 1},
            }
        },
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }
    for path, item in doc.get("paths", {}).items():
        if path in EXEMPT_PATHS:
            continue
        for operation in item.values():
            if isinstance(operation, dict) and "responses" in operation:
                operation["responses"].setdefault("429", response)


def buckets_for(settings: Settings) -> TokenBuckets | None:
    """The buckets the settings ask for: none when the rate is 0 or the service is dev-open."""
    if settings.dev_open or settings.rate_limit_per_s == 0:
        return None
    return TokenBuckets(RateLimit(settings.rate_limit_per_s, settings.rate_limit_burst))
