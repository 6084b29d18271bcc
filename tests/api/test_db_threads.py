"""The hot reads' threads (api.deps.in_thread): at most `db_pool_size` at once, in the
caller's context variables, from the app's start-up to its shutdown."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from pathlib import Path

from fastapi.testclient import TestClient
from svc_harness import make_settings

from api.app import create_app
from api.deps import in_thread
from api.state import AppState

_who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_at_most_pool_size_at_once_in_the_callers_context(tmp_path: Path) -> None:
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'meshplan.db'}", db_pool_size=3))
    state = app.state.meshplan
    assert isinstance(state, AppState)
    lock = threading.Lock()
    running = 0
    most = 0
    seen: list[str] = []

    def read() -> str:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        seen.append(threading.current_thread().name)
        return _who.get()

    async def many() -> list[str]:
        async def one(i: int) -> str:
            _who.set(f"request {i}")
            return await in_thread(state, read)

        return await asyncio.gather(*(one(i) for i in range(10)))

    with TestClient(app) as client:
        assert state.db_threads is not None
        answers = client.portal.call(many)  # type: ignore[union-attr]
    assert answers == [f"request {i}" for i in range(10)]
    assert most == 3
    assert all(name.startswith("meshplan-db") for name in seen)
    assert state.db_threads is None  # shut down with the app
