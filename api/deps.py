"""FastAPI dependencies: the app state, a database session, the calling principal."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.auth import require_principal
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
PrincipalDep = Annotated[Principal, Depends(require_principal)]


async def in_session(state: AppState, fn: Callable[[Session], T]) -> T:
    """Run the read `fn(session)` in one worker thread (one hop off the event loop) in a
    `read_session` (autocommit: no transaction round trips)."""

    def work() -> T:
        with read_session(state.sessions) as session:
            return fn(session)

    return await run_in_threadpool(work)
