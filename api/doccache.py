"""A bounded in-memory cache of stored plans' encoded documents, for the two reads a busy
service answers most: `GET /v1/plans/{id}` and a cached `POST /v1/plans`.

Why every API process may keep one, with no invalidation: a stored plan never changes. Plans
are only inserted (`api.store.plans` has no update or delete, and no route or task changes a
plan row), and a plan's document (`api.present.plan_document`: id, created_at, tags, request,
result, links, cost-model version, calibration) is made of its row's columns alone. So the
bytes one process encodes once are the bytes any process would encode from the row at any
later time, whichever process stored the plan. What can change is not cached and is read from
the database on every request:
- a plan's submissions (`GET` adds them to the document; another process may create one at
  any moment), so a `GET` asks whether the plan has any, and builds the document afresh when
  it has;
- which stored plan is today's answer to a request (a forced `POST` stores a newer one), so a
  cached `POST` looks the plan's id up by the request's hash each time and only its document
  comes from here.

Entries are keyed by (tenant, plan id, view). A route consults the cache only after the caller
has been authenticated and only under the caller's own tenant, so a key without read rights on
a plan (another tenant's) is refused exactly as before: it never names an entry.

Bounded by entries and by bytes (`Settings.document_cache_entries` / `_bytes`); the least
recently used entries go first. Thread-safe: the routes' database threads use it.
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

View = Literal["get", "hit"]
"""`get`: GET /v1/plans/{id}'s document of a plan without submissions; `hit`: a cached
POST's document (`cache_hit: true`, no submissions)."""

CacheKey = tuple[str, str, View]
"""(tenant, plan id, view)."""

GZIP_LEVEL = 1
"""The service's gzip level (api.middleware): zlib's fastest. A 17 KB plan document takes a
third of level 9's CPU and comes out 13 % larger (2.8 KB instead of 2.5 KB), which costs
microseconds on the wire against the service's CPU."""
GZIP_MINIMUM_BYTES = 1000
"""Smaller bodies go out as they are (api.middleware)."""


@dataclass
class Encoded:
    """A document's JSON bytes and, once a client accepted gzip, their gzip encoding."""

    body: bytes
    gzipped: bytes | None = None

    @property
    def size_bytes(self) -> int:
        return len(self.body) + len(self.gzipped or b"")


def gzip_compressor(level: int = GZIP_LEVEL) -> Any:
    """A zlib compressor that writes one gzip member (RFC 1952) at `level`."""
    return zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)


def gzip_bytes(body: bytes) -> bytes:
    """`body` as one gzip member at GZIP_LEVEL."""
    compressor = gzip_compressor()
    return bytes(compressor.compress(body) + compressor.flush())


@dataclass(frozen=True)
class CacheStats:
    entries: int
    size_bytes: int
    hits: int
    misses: int
    evictions: int


@dataclass
class DocumentCache:
    """At most `max_entries` documents of at most `max_bytes` in all (0 entries: off)."""

    max_entries: int
    max_bytes: int
    _entries: OrderedDict[CacheKey, Encoded] = field(default_factory=OrderedDict, init=False)
    _size_bytes: int = field(default=0, init=False)
    _hits: int = field(default=0, init=False)
    _misses: int = field(default=0, init=False)
    _evictions: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        if self.max_entries < 0 or self.max_bytes < 0:
            raise ValueError(
                f"max_entries ({self.max_entries}) and max_bytes ({self.max_bytes}) must be >= 0"
            )

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0 and self.max_bytes > 0

    def get(self, tenant: str, plan_id: str, view: View) -> Encoded | None:
        if not self.enabled:
            return None
        key = (tenant, plan_id, view)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return entry

    def put(self, tenant: str, plan_id: str, view: View, body: bytes) -> Encoded:
        """Keep `body` (returned as an entry either way; one larger than `max_bytes` is not
        kept)."""
        entry = Encoded(body)
        if self.enabled:
            with self._lock:
                self._store((tenant, plan_id, view), entry)
        return entry

    def gzipped(self, tenant: str, plan_id: str, view: View, entry: Encoded) -> bytes:
        """The gzip encoding of `entry`, compressed once and then kept with it."""
        if entry.gzipped is None:
            gzipped = gzip_bytes(entry.body)
            with self._lock:
                key = (tenant, plan_id, view)
                if entry.gzipped is None and self._entries.get(key) is entry:
                    self._size_bytes += len(gzipped)
                    entry.gzipped = gzipped
                    self._trim()
                    return gzipped
            return gzipped
        return entry.gzipped

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                entries=len(self._entries),
                size_bytes=self._size_bytes,
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
            )

    def _store(self, key: CacheKey, entry: Encoded) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._size_bytes -= old.size_bytes
        if entry.size_bytes > self.max_bytes:
            return
        self._entries[key] = entry
        self._size_bytes += entry.size_bytes
        self._trim()

    def _trim(self) -> None:
        while len(self._entries) > self.max_entries or self._size_bytes > self.max_bytes:
            _, gone = self._entries.popitem(last=False)
            self._size_bytes -= gone.size_bytes
            self._evictions += 1
