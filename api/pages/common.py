"""What every page shares: the templates and their filters, and the page session.

A browser authenticates with `?key=` once (kept in the page-session cookie, `api.auth`) or
with the cookie; with --dev-open, no key is needed."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from api.auth import csrf_token, page_key, resolve, set_page_cookie
from api.store.keys import Principal

GIB = 1024**3


@lru_cache(maxsize=1)
def templates() -> Jinja2Templates:
    t = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
    t.env.globals.update(
        fmt_s=fmt_s,
        gib=lambda b: f"{b / GIB:.2f}",
        pct=pct,
        recompute_summary=recompute_summary,
        block_counts=block_counts,
    )
    return t


def fmt_s(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.3f} s"


def pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.1%}"


def recompute_summary(modes: tuple[str, ...]) -> str:
    counts = {m: modes.count(m) for m in ("none", "selective", "full") if m in modes}
    return ", ".join(f"{n}× {m}" for m, n in counts.items())


def block_counts(blocks: dict[str, int]) -> str:
    """Decoder blocks per recompute mode, e.g. 'decoder blocks: 50 none, 46 selective'."""
    return "decoder blocks: " + ", ".join(f"{n} {m}" for m, n in blocks.items())


def page_principal(request: Request) -> Principal | Response:
    """The session's principal; a 401 sign-in page without one; a redirect that moves a
    `?key=` into the page-session cookie (so no key stays in the URL)."""
    key = page_key(request)
    principal = resolve(request, key)
    if principal is None:
        msg = "Unknown API key" if key else "An API key is required"
        return templates().TemplateResponse(
            request, "unauthorized.html", {"message": msg, "tenant": "—"}, status_code=401
        )
    if request.query_params.get("key"):
        query = {k: v for k, v in request.query_params.multi_items() if k != "key"}
        target = request.url.path + ("?" + urlencode(query) if query else "")
        response = RedirectResponse(target, status_code=303)
        set_page_cookie(response, request.query_params["key"], secure=request.url.scheme == "https")
        return response
    return principal


def session_csrf(request: Request) -> str:
    """The CSRF token of this request's page session (`api.auth.csrf_token`)."""
    return csrf_token(page_key(request))


def not_found(request: Request, tenant: str, message: str) -> Response:
    return templates().TemplateResponse(
        request, "not_found.html", {"message": message, "tenant": tenant}, status_code=404
    )
