"""FastAPI dependencies: the app state, a database session, the calling principal."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import json
from collections.abc import Callable, Coroutine, Iterator
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.dependencies.utils import _get_param_aliases, request_params_to_args
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute, get_request_handler
from sqlalchemy.orm import Session

from api.auth import principal_bearer
from api.state import AppState, app_state
from api.store.db import read_session, session_scope
from api.store.keys import Principal

T = TypeVar("T")


async def get_state(request: Request) -> AppState:
    return app_state(request.app)


StateDep = Annotated[AppState, Depends(get_state)]


def get_session(state: StateDep) -> Iterator[Session]:
    with session_scope(state.sessions) as session:
        yield session


# scope="function": the session commits when the route returns, before the response is sent,
# so a 201 is never sent for a write that then fails to commit, and a commit that fails (the
# database went away) becomes its problem response instead of a dropped connection
# (https://fastapi.tiangolo.com/tutorial/dependencies/dependencies-with-yield/#early-exit-and-scope).
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
# one security dependency (api.auth.PrincipalBearer): header, key, principal
PrincipalDep = Annotated[Principal, Depends(principal_bearer)]


class PrincipalRoute(APIRoute):
    """A route whose endpoint takes only the request, the principal (`PrincipalDep`) and path
    parameters typed `str`, served without FastAPI's dependency solving: its handler calls
    `principal_bearer` (the one dependency `PrincipalDep` names, so the same header parsing,
    key look-up and 401s) and then the endpoint, with the path parameters as the router
    matched them (a `str` parameter without constraints accepts any such value, so there is
    nothing to validate). Everything else is the `APIRoute`'s: matching, the exception
    handlers (a `ProblemError` is answered exactly as from any route), and /openapi.json,
    which is built from the endpoint's signature as before. For the hottest reads (GET
    /v1/plans/{id}, the history page): solving the dependency graph is about a quarter of
    the Python calls a cached GET makes. An endpoint with any other parameter (query,
    header, cookie or body fields, other dependencies) is refused when the handler is
    built. `app.dependency_overrides` do not apply to it (nothing is solved), and a router
    that includes it must add no dependencies of its own (none in api.app does)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        dependant = self.dependant
        principal_names = [d.name for d in dependant.dependencies if d.call is principal_bearer]
        unplain = [
            f.name
            for f in dependant.path_params
            if f.field_info.annotation is not str or f.field_info.metadata
        ]
        if (
            dependant.query_params
            or dependant.header_params
            or dependant.cookie_params
            or dependant.body_params
            or dependant.request_param_name is None
            or len(dependant.dependencies) != 1
            or len(principal_names) != 1
            or principal_names[0] is None
            or unplain
        ):
            raise TypeError(
                f"{self.path}: a PrincipalRoute's endpoint takes a Request, a PrincipalDep "
                "and unconstrained str path parameters, nothing else"
            )
        endpoint: Callable[..., Coroutine[Any, Any, Response]] = self.endpoint
        request_name = dependant.request_param_name
        principal_name = principal_names[0]
        path_names = [f.name for f in dependant.path_params]

        async def handle(request: Request) -> Response:
            principal = await principal_bearer(request)
            kwargs: dict[str, Any] = {n: request.path_params[n] for n in path_names}
            kwargs[request_name] = request
            kwargs[principal_name] = principal
            return await endpoint(**kwargs)

        return handle


class LazyHeadersRoute(APIRoute):
    """A route whose endpoint's header parameters (all optional, default None) are read by the
    route instead of by FastAPI's dependency solving on every request: a request that sends
    none of them gets None for each without any look-up; one that sends any has them all read
    and validated by FastAPI's own `request_params_to_args`, so the values and the errors are
    FastAPI's. Their errors go before the body's in one `RequestValidationError`, as FastAPI
    orders them (its solving checks the headers before the body); a body that is not JSON is
    answered alone, as FastAPI answers it before reading any header. Everything else (the
    body, the principal and other dependencies, matching, the exception handlers, and
    /openapi.json, built from the endpoint's signature) is the `APIRoute`'s. For the cached
    POST /v1/plans, whose `Idempotency-Key` and `Prefer` parameters FastAPI inspected and
    looked up on every request. An endpoint with a required header parameter, or one with
    another default, is refused when the handler is built; as for `PrincipalRoute`, a router
    that includes it must add no dependencies of its own, and a validation error's endpoint
    context (in its text only) names this route's wrapper."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        dependant = self.dependant
        fields = list(dependant.header_params)
        if dependant.request_param_name is None or any(
            f.field_info.is_required() or f.default is not None for f in fields
        ):
            raise TypeError(
                f"{self.path}: a LazyHeadersRoute's endpoint takes a Request and optional "
                "header parameters that default to None"
            )
        request_name = dependant.request_param_name
        aliases = tuple(alias for f in fields for _, alias in _get_param_aliases(f))
        absent: dict[str, Any] = {f.name: None for f in fields}
        endpoint: Callable[..., Coroutine[Any, Any, Response]] = self.endpoint

        @functools.wraps(endpoint)
        async def call(**values: Any) -> Response:
            request: Request = values[request_name]
            found: tuple[dict[str, Any], list[Any]] = request.scope[_HEADERS]
            headers, errors = found
            if errors:  # the body was valid: the headers' errors alone
                raise _HeaderErrors(errors, body=await _json_body(request))
            return await endpoint(**values, **headers)

        inner = get_request_handler(
            dependant=dataclasses.replace(dependant, header_params=[], call=call),
            body_field=self.body_field,
            status_code=self.status_code,
            response_class=self.response_class,
            response_field=self.response_field,
            response_model_include=self.response_model_include,
            response_model_exclude=self.response_model_exclude,
            response_model_by_alias=self.response_model_by_alias,
            response_model_exclude_unset=self.response_model_exclude_unset,
            response_model_exclude_defaults=self.response_model_exclude_defaults,
            response_model_exclude_none=self.response_model_exclude_none,
            dependency_overrides_provider=self.dependency_overrides_provider,
            embed_body_fields=self._embed_body_fields,
            strict_content_type=self.strict_content_type,
            form_limits=self.form_limits,
            stream_item_field=self.stream_item_field,
            is_json_stream=self.is_json_stream,
        )

        async def handle(request: Request) -> Response:
            raw = request.headers
            if any(alias in raw for alias in aliases):
                found = request_params_to_args(fields, raw)
            else:
                found = (absent, [])
            request.scope[_HEADERS] = found
            try:
                return await inner(request)
            except RequestValidationError as exc:
                if (
                    not found[1]
                    or isinstance(exc, _HeaderErrors)
                    or isinstance(exc.__cause__, json.JSONDecodeError)
                ):
                    raise
                raise RequestValidationError([*found[1], *exc.errors()], body=exc.body) from None

        return handle


class _HeaderErrors(RequestValidationError):
    """A LazyHeadersRoute's header errors when the body was valid (FastAPI's 422, as any
    `RequestValidationError`)."""


_HEADERS = "meshplan.headers"
"""The scope key under which LazyHeadersRoute keeps a request's header values and errors."""


async def _json_body(request: Request) -> Any:
    """The body FastAPI's `RequestValidationError` carries once the body was read as JSON
    (None when there was none)."""
    body = await request.body()
    return await request.json() if body else None


async def in_session(state: AppState, fn: Callable[[Session], T]) -> T:
    """Run the read `fn(session)` in one worker thread (one hop off the event loop) in a
    `read_session` (autocommit: no transaction round trips).

    At most `db_pool_size` of these run at once (`in_thread`); the others wait in line. More
    at once would each check out a connection past the pool, which the pool closes again on
    return: under 16 concurrent clients PostgreSQL then started a new backend every few
    seconds, each a fork and a cold cache."""

    def work() -> T:
        with read_session(state.sessions) as session:
            return fn(session)

    return await in_thread(state, work)


async def in_thread(state: AppState, fn: Callable[[], T]) -> T:
    """`fn()` in one of the app's `db_pool_size` threads (`AppState.db_threads`; see
    `in_session`), in a copy of the caller's context variables (as `asyncio.to_thread` and
    anyio's threads run it). The executor's own queue is the bound: a plain
    `loop.run_in_executor` hop costs less CPU than anyio's `to_thread.run_sync` under a
    `CapacityLimiter` (its cancel scope, checkpoints and limiter). A request cancelled while
    it waits stops waiting; its read still runs to its end in the thread, and its connection
    goes back to the pool there."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn)
    return await loop.run_in_executor(state.db_threads, call)
