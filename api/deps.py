"""FastAPI dependencies: the app state, a database session, the calling principal."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, TypeVar

from anyio import to_thread
from fastapi import Depends, Request
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


async def in_session(state: AppState, fn: Callable[[Session], T]) -> T:
    """Run the read `fn(session)` in one worker thread (one hop off the event loop) in a
    `read_session` (autocommit: no transaction round trips).

    At most `db_pool_size` of these run at once (`AppState.db_limiter`); the others wait on
    the event loop. More at once would each check out a connection past the pool, which the
    pool closes again on return: under 16 concurrent clients PostgreSQL then started a new
    backend every few seconds, each a fork and a cold cache."""

    def work() -> T:
        with read_session(state.sessions) as session:
            return fn(session)

    return await in_thread(state, work)


async def in_thread(state: AppState, fn: Callable[[], T]) -> T:
    """`fn()` in a worker thread, one of at most `db_pool_size` (see `in_session`)."""
    return await to_thread.run_sync(fn, limiter=state.db_limiter)
