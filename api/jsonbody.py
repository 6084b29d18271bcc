"""JSON responses encoded with orjson: a stored plan's document (a 96-layer plan is ~17 KB, with
alternatives several times that) encodes in a twentieth of the standard library's time.

The bytes are the same JSON values as Starlette's `JSONResponse` writes (compact, UTF-8, not
ASCII-escaped); floats are written in their shortest round-trip form either way. A value orjson
does not take (an integer beyond 64 bits, a key that is not a string) falls back to the
standard library's encoder."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.responses import JSONResponse, Response

from api.doccache import GZIP_MINIMUM_BYTES, CacheKey, DocumentCache, Encoded

JSON = "application/json"


class JSONBody(JSONResponse):
    def render(self, content: Any) -> bytes:
        return encode(content)


def encode(content: Any) -> bytes:
    """`content` as JSONBody writes it."""
    try:
        body: bytes = orjson.dumps(content)
    except TypeError:  # orjson.JSONEncodeError
        return bytes(JSONResponse(content).body)
    return body


def encoded_response(
    cache: DocumentCache,
    key: CacheKey | None,
    entry: Encoded,
    *,
    accept_encoding: str,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> Response:
    """A JSON response of `entry`'s bytes. A document kept in `cache` under `key` goes out
    gzip'd when the client accepts it (as api.middleware's gzip decides: "gzip" in
    Accept-Encoding, at least GZIP_MINIMUM_BYTES) from its cached encoding; any other goes
    out as it is, for the middleware to compress."""
    headers = dict(headers or {})
    if key is not None and "gzip" in accept_encoding and len(entry.body) >= GZIP_MINIMUM_BYTES:
        body = cache.gzipped(*key, entry)
        headers.update({"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
        return Response(body, status_code=status_code, headers=headers, media_type=JSON)
    return Response(entry.body, status_code=status_code, headers=headers, media_type=JSON)
