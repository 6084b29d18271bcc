"""API keys: `Authorization: Bearer <key>` (pages also accept a cookie or `?key=`).

Every key belongs to a tenant; every read and write is scoped to it. With `dev_open`, a request
without a key acts for tenant "dev" (local use only).

The page session: a browser that opens a page with `?key=` gets the key back in the cookie
`meshplan_key` (HttpOnly, SameSite=Lax, Path=/) and is redirected to the URL without it. The
cookie then authenticates the pages and the safe (GET/HEAD) `/v1` requests their links name
(JSON, launch, timeline.svg, jobs), for the key's tenant only. It never authenticates an unsafe
`/v1` request: those need the bearer header, so a cross-site form cannot use a browser's
session against the API. The one page that writes, the planning form, carries a CSRF token
(`csrf_token`) derived from the key, which a page of another origin cannot read.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Depends, Request
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from api.problems import ProblemError
from api.store.keys import Principal, authenticate, hash_key

COOKIE = "meshplan_key"
SAFE_METHODS = frozenset({"GET", "HEAD"})
DEV_PRINCIPAL = Principal(tenant="dev", admin=False, key_id=None)
KEY_CACHE_MAX = 10_000

BEARER_DESCRIPTION = "an API key from `meshplan keys create`"
bearer = HTTPBearer(auto_error=False, description=BEARER_DESCRIPTION)


def cached(request: Request, key: str | None) -> Principal | bool | None:
    """The principal from memory: False when the database must be asked."""
    from api.state import AppState

    state: AppState = request.app.state.meshplan
    if not key:
        return DEV_PRINCIPAL if state.settings.dev_open else None
    return state.key_cache.get(hash_key(key)) or False


def resolve(request: Request, key: str | None) -> Principal | None:
    """The principal for `key` (cached by hash), or the dev principal when open and keyless."""
    from api.state import AppState

    state: AppState = request.app.state.meshplan
    hit = cached(request, key)
    if hit is not False:
        return hit if isinstance(hit, Principal) else None
    assert key is not None
    digest = hash_key(key)
    with state.sessions() as session:
        principal = authenticate(session, key=key)
    if principal is not None:
        if len(state.key_cache) >= KEY_CACHE_MAX:
            state.key_cache.clear()
        state.key_cache[digest] = principal
    return principal


async def require_principal(
    request: Request, creds: HTTPAuthorizationCredentials | None = Depends(bearer)
) -> Principal:
    key = creds.credentials if creds is not None else None
    if key is None and request.headers.get("authorization"):
        raise _unauthorized("the Authorization header must be 'Bearer <key>'")
    if key is None and request.method in SAFE_METHODS:
        key = request.cookies.get(COOKIE) or None  # the page session (module docstring)
    hit = cached(request, key)
    if hit is False:
        principal = await run_in_threadpool(resolve, request, key)
    else:
        principal = hit if isinstance(hit, Principal) else None
    if principal is None:
        raise _unauthorized("an API key is required" if not key else "unknown API key")
    return principal


class PrincipalBearer(HTTPBearer):
    """The calling principal as one security dependency: `HTTPBearer`'s header parsing, then
    `require_principal`. One node in FastAPI's dependency graph instead of two, and the
    same OpenAPI security scheme as `bearer` (same name, same model), so each route that
    depends on it declares exactly what `Depends(require_principal)` declared."""

    def __init__(self) -> None:
        super().__init__(auto_error=False, description=BEARER_DESCRIPTION, scheme_name="HTTPBearer")

    async def __call__(self, request: Request) -> Principal:  # type: ignore[override]
        return await require_principal(request, await super().__call__(request))


principal_bearer = PrincipalBearer()


def page_key(request: Request) -> str | None:
    """A browser's key: ?key=, then the cookie, then a bearer header."""
    key = request.query_params.get("key") or request.cookies.get(COOKIE)
    if key:
        return key
    auth = request.headers.get("authorization", "")
    return auth[7:] if auth.lower().startswith("bearer ") else None


def set_page_cookie(response: Response, key: str, *, secure: bool) -> None:
    """Keep `key` as the page session (module docstring): HttpOnly, SameSite=Lax, Path=/, and
    Secure when the page was served over HTTPS."""
    response.set_cookie(COOKIE, key, httponly=True, samesite="lax", path="/", secure=secure)


def csrf_token(key: str | None) -> str:
    """The planning form's CSRF token for a session's key: an HMAC of a fixed label under the
    key (RFC 2104), so only a page that was served to the key's holder can know it."""
    return hmac.new((key or "").encode(), b"meshplan page form", hashlib.sha256).hexdigest()


def csrf_ok(key: str | None, token: str | None) -> bool:
    return token is not None and hmac.compare_digest(csrf_token(key), token)


def require_admin(principal: Principal) -> None:
    if not principal.admin:
        raise ProblemError(403, "Forbidden", "this operation needs an admin key")


def _unauthorized(detail: str) -> ProblemError:
    return ProblemError(401, "Unauthorized", detail, headers={"WWW-Authenticate": "Bearer"})
