"""Every error leaves the service as RFC 9457 application/problem+json; never a stack trace."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.outage import POLICY, is_outage
from api.refusal import summarise
from api.schemas.problem import PROBLEM_JSON
from planner.errors import InfeasibleError, NotFoundError, SpecError, UnsupportedPlanError

log = logging.getLogger("meshplan.api")
TYPE_BASE = "https://meshplan.dev/problems/"


class ProblemError(Exception):
    """Raise from a route to answer with a problem document."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str | None = None,
        *,
        kind: str | None = None,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail or title)
        self.status = status
        self.title = title
        self.detail = detail
        self.kind = kind
        self.headers = headers
        self.extra = extra


class BodyTooLarge(StarletteHTTPException):
    """Raised while a body is read once it passes the limit (FastAPI re-raises HTTP errors)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"bodies are limited to {max_bytes} bytes")
        self.max_bytes = max_bytes


def field_problem(field: str, message: str, *, value: Any = None) -> ProblemError:
    """A 422 naming one field (`query.min_gpus`, `body.tags`) and why it is refused."""
    return ProblemError(
        422,
        "Request validation failed",
        f"{field}: {message}",
        kind="validation",
        errors=[{"field": field, "message": message, "value": _short(value)}],
    )


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def allowed_methods(app: Any, scope: dict[str, Any]) -> list[str]:
    """Every method some route of `app` fully matches on this path (for a 405's `Allow`)."""
    from starlette.routing import Match

    return [
        method
        for method in _METHODS
        if any(route.matches({**scope, "method": method})[0] == Match.FULL for route in app.routes)
    ]


def problem_body(
    status: int,
    title: str,
    detail: str | None = None,
    *,
    kind: str | None = None,
    instance: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": _type_uri(kind),
        "title": title,
        "status": status,
    }
    if detail is not None:
        body["detail"] = detail
    if instance is not None:
        body["instance"] = _jsonable(instance)  # a path may hold a lone surrogate
    body.update(_jsonable(extra))
    return body


def _type_uri(kind: str | None) -> str:
    if not kind:
        return "about:blank"
    return kind if kind.startswith(("http:", "https:", "about:")) else TYPE_BASE + kind


def from_document(doc: dict[str, Any]) -> ProblemError:
    """A stored problem document (e.g. a failed job's) raised again."""
    extra = {
        k: v for k, v in doc.items() if k not in {"type", "title", "status", "detail", "instance"}
    }
    return ProblemError(
        int(doc.get("status", 500)),
        str(doc.get("title", "Error")),
        doc.get("detail"),
        kind=doc.get("type"),
        **extra,
    )


def problem_response(
    status: int,
    title: str,
    detail: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    **kw: Any,
) -> JSONResponse:
    return JSONResponse(
        problem_body(status, title, detail, **kw),
        status_code=status,
        media_type=PROBLEM_JSON,
        headers=headers,
    )


def _jsonable(value: Any) -> Any:
    """Any value as JSON (invalid input may hold bytes, NaN, objects)."""
    if isinstance(value, str):
        # a lone surrogate cannot be encoded as UTF-8: echo it as its escape
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_jsonable(str(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return repr(value)[:500]


MAX_VALUE_CHARS = 500


def _short(value: Any) -> Any:
    """The offending value, or a truncated rendering when it is large (e.g. a whole body)."""
    value = _jsonable(value)
    text = json.dumps(value)
    return value if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "…"


def field_errors(errors: list[Any], body: Any = None) -> list[dict[str, Any]]:
    """Pydantic errors as {field, message, value}; with the request `body`, each field is the
    path the user wrote (`body.model.ffn_hidden_size`, without the union's tag `arch`)."""
    out = []
    for err in errors:
        loc = err.get("loc", ())
        if body is not None and loc and loc[0] == "body":
            loc = ("body", *written_path(body, loc[1:], missing=err.get("type") == "missing"))
        field = ".".join(str(p) for p in loc) or "body"
        out.append(
            {"field": field, "message": str(err.get("msg", "")), "value": _short(err.get("input"))}
        )
    return out


def written_path(doc: Any, loc: tuple[Any, ...], *, missing: bool) -> list[Any]:
    """The segments of `loc` that are keys (or indices) of `doc`: pydantic adds a segment for
    the member of a tagged union (`model.arch.…`, `model.profile.…`) that the JSON does not
    have. The last segment of a `missing` error names the absent field and stays."""
    out: list[Any] = []
    node = doc
    for i, seg in enumerate(loc):
        if (isinstance(node, dict) and seg in node) or (
            isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node)
        ):
            node = node[seg]
        elif not (missing and i == len(loc) - 1):
            continue
        out.append(seg)
    return out


def malformed_json(exc: RequestValidationError, raw: list[Any]) -> tuple[str, dict[str, Any]]:
    """'malformed JSON at line L column C: <reason>' for FastAPI's json_invalid error, whose
    location is the character offset (`("body", pos)`) and whose `body` is the text."""
    err = next(e for e in raw if e.get("type") == "json_invalid")
    text = exc.body if isinstance(exc.body, str) else ""
    loc = err.get("loc", ())
    pos = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else 0
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    reason = str((err.get("ctx") or {}).get("error", "not valid JSON"))
    detail = f"malformed JSON at line {line} column {column}: {reason}"
    return detail, {
        "field": "body",
        "message": detail,
        "value": None,
        "line": line,
        "column": column,
    }


def unsupported_plan(exc: UnsupportedPlanError, *, pp: int | None) -> ProblemError:
    """The short 422 for a plan the framework cannot express (api.refusal); with the plan's
    `pp` its summary can name the stage split."""
    summary = summarise(exc.framework, exc.reasons, pp=pp)
    return ProblemError(
        422,
        "Plan cannot be expressed",
        summary["detail"],
        kind="unsupported-plan",
        framework=exc.framework,
        reasons=summary["reasons"],
        fix=summary["fix"],
    )


# The exceptions `problem_of` maps (with their subclasses); anything else is a 500.
KNOWN: tuple[type[Exception], ...] = (
    ProblemError,
    SpecError,
    InfeasibleError,
    UnsupportedPlanError,
    NotFoundError,
    DBAPIError,
    PoolTimeoutError,
)


def problem_of(exc: BaseException) -> ProblemError | None:
    """The one mapping from an exception to its problem; None for an unexpected error (500).
    The handlers answer with it and a failed search's job stores it (`problem_document`)."""
    if isinstance(exc, ProblemError):
        return exc
    if isinstance(exc, SpecError):
        errors = [{"field": exc.field, "message": exc.reason, "value": _short(exc.value)}]
        return ProblemError(422, "Invalid request", str(exc), kind="validation", errors=errors)
    if isinstance(exc, InfeasibleError):
        return ProblemError(
            422, "No feasible plan", str(exc), kind="infeasible", diagnosis=exc.diagnosis
        )
    if isinstance(exc, UnsupportedPlanError):
        return unsupported_plan(exc, pp=None)
    if isinstance(exc, NotFoundError):
        return ProblemError(404, "Not found", str(exc))
    if is_outage(exc):
        return ProblemError(
            503,
            "Database unavailable",
            f"the database cannot be reached ({type(exc).__name__}); retry later",
            kind="database-unavailable",
            headers={"Retry-After": str(POLICY.retry_after_s)},
            retry_after_s=POLICY.retry_after_s,
        )
    return None


INTERNAL_TITLE = "Internal server error"


def problem_document(exc: BaseException) -> dict[str, Any]:
    """The problem body for `exc` as stored (a failed job's error, an idempotent replay)."""
    problem = problem_of(exc)
    if problem is None:
        return problem_body(500, INTERNAL_TITLE, "the error was logged")
    return problem_body(
        problem.status, problem.title, problem.detail, kind=problem.kind, **problem.extra
    )


def _answer(request: Request, problem: ProblemError) -> JSONResponse:
    return problem_response(
        problem.status,
        problem.title,
        problem.detail,
        kind=problem.kind,
        instance=request.url.path,
        headers=problem.headers,
        **problem.extra,
    )


def install(app: FastAPI) -> None:
    """Register the handlers that turn every exception into a problem document."""

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        raw = list(exc.errors())
        if any(err.get("type") == "json_invalid" for err in raw):
            detail, error = malformed_json(exc, raw)
            return problem_response(
                400,
                "Malformed JSON",
                detail,
                kind="malformed-json",
                instance=request.url.path,
                errors=[error],
            )
        errors = field_errors(raw, exc.body)
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)[:2000]
        return problem_response(
            422,
            "Request validation failed",
            detail,
            kind="validation",
            instance=request.url.path,
            errors=errors,
        )

    @app.exception_handler(BodyTooLarge)
    async def _too_large(request: Request, exc: BodyTooLarge) -> JSONResponse:
        return problem_response(
            413,
            "Request body too large",
            str(exc.detail),
            kind="too-large",
            instance=request.url.path,
            max_bytes=exc.max_bytes,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        title = {404: "Not found", 405: "Method not allowed"}.get(exc.status_code, "HTTP error")
        detail = exc.detail if isinstance(exc.detail, str) else None
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:
            # Starlette names only the first route that matched the path; list them all.
            headers["Allow"] = ", ".join(allowed_methods(request.app, dict(request.scope)))
        return problem_response(
            exc.status_code,
            title,
            detail,
            instance=request.url.path,
            headers=headers or None,
        )

    async def _known(request: Request, exc: Exception) -> JSONResponse:
        problem = problem_of(exc)
        if problem is None:
            return await _internal(request, exc)
        return _answer(request, problem)

    for known in KNOWN:
        app.add_exception_handler(known, _known)

    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        # The server closes the connection after an unhandled error; say so, so that a
        # keep-alive client opens a new one instead of failing its next request.
        return problem_response(
            500,
            INTERNAL_TITLE,
            "the error was logged",
            instance=request.url.path,
            headers={"Connection": "close"},
        )

    app.add_exception_handler(Exception, _internal)
