"""What one app instance holds: settings, engine, sessions, metrics, the solver pool, the
search queue (PostgreSQL) and its embedded worker, the submitters and the submission poller."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from api.doccache import DocumentCache
from api.metrics import Metrics
from api.settings import Settings
from api.store.keys import Principal
from api.submissions.poller import Poller
from api.submissions.registry import Submitters
from api.workers import SolverPool

if TYPE_CHECKING:
    import procrastinate

    from api.queue.worker import EmbeddedWorker


@dataclass
class AppState:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    metrics: Metrics
    pool: SolverPool
    submitters: Submitters
    poller: Poller
    key_cache: dict[str, Principal] = field(default_factory=dict)
    # stored plans' encoded documents (api.doccache: safe because stored plans never change)
    documents: DocumentCache = field(default_factory=lambda: DocumentCache(0, 0))
    # the hot reads' threads (api.deps.in_thread): db_pool_size of them, from start-up to
    # shutdown (None outside: the event loop's default executor)
    db_threads: ThreadPoolExecutor | None = None
    # PostgreSQL: the App the API defers search tasks on (api.queue); None: the pool runs them
    queue: procrastinate.App | None = None
    worker: EmbeddedWorker | None = None  # `serve --with-worker`


def app_state(app: Any) -> AppState:
    """The state `create_app` keeps on `app` (Starlette's `app.state` is untyped): the one
    typed way in, for routes (api.deps.StateDep) and middleware alike."""
    state = app.state.meshplan
    if not isinstance(state, AppState):
        raise TypeError(f"app.state.meshplan is a {type(state).__name__}, not an AppState")
    return state
