"""Build an app's state from settings; start-up (migrations, bootstrap key, the submission
poller, the embedded queue worker) and shutdown.

Where searches run (docs/service.md, "Queue and workers"): on SQLite in this process's
solver pool; on PostgreSQL (`search_queue` auto or procrastinate) as queue tasks that
`meshplan worker` processes run, or a worker inside this process with `with_worker`. With the
queue, the submission poller is a periodic task of the workers, not a thread of each API
process.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Mapping

from api.doccache import DocumentCache
from api.metrics import Metrics
from api.settings import Settings
from api.state import AppState
from api.store import migrate
from api.store.db import make_engine, make_sessionmaker, session_scope
from api.store.keys import ensure_key
from api.submissions.poller import Poller
from api.submissions.registry import Submitters
from api.submit import Submitter
from api.workers import SolverPool

log = logging.getLogger("meshplan.api")


def build_state(settings: Settings, submitters: Mapping[str, Submitter] | None = None) -> AppState:
    """`submitters` replace the backends `settings.submit` would build (by backend name)."""
    engine = make_engine(settings.database_url, pool_size=settings.db_pool_size)
    sessions = make_sessionmaker(engine)
    registry = Submitters(settings.submit_config(), submitters)
    state = AppState(
        settings=settings,
        engine=engine,
        sessions=sessions,
        metrics=Metrics(),
        pool=SolverPool(settings.solver_workers),
        submitters=registry,
        poller=Poller(sessions, registry, settings),
        documents=DocumentCache(settings.document_cache_entries, settings.document_cache_bytes),
    )
    if settings.queue_enabled():
        from api.queue.app import build_app
        from api.queue.depth import QueueDepth

        state.queue = build_app(settings.database_url)
        state.metrics.registry.register(QueueDepth(engine))
        if settings.with_worker:
            from api.queue.tasks import QueueTasks
            from api.queue.worker import EmbeddedWorker

            app = build_app(settings.database_url, pool_max=settings.worker_concurrency + 3)
            tasks = QueueTasks(app, sessions, settings, state.metrics, state.poller)
            state.worker = EmbeddedWorker(settings, tasks, concurrency=settings.worker_concurrency)
    elif settings.with_worker:
        log.warning(
            "with_worker has no effect without the PostgreSQL queue: the pool runs searches"
        )
    return state


def start(state: AppState) -> None:
    settings = state.settings
    if settings.migrate_on_start:
        migrate.upgrade(settings.database_url)
    if settings.bootstrap_admin_key:
        with session_scope(state.sessions) as session:
            ensure_key(
                session,
                tenant=settings.bootstrap_tenant,
                key=settings.bootstrap_admin_key,
                admin=True,
            )
    if settings.dev_open:
        log.warning("dev-open: requests without an API key act as tenant 'dev'")
    if state.queue is None:
        state.poller.start()
    if state.worker is not None:
        state.worker.start()
    if settings.gc_freeze_on_start:
        freeze_heap()


def freeze_heap() -> None:
    """Collect what start-up left as garbage, then move every live object to the collector's
    permanent generation (gc.freeze): a full collection traverses every object it tracks, so
    with the start-up heap (modules, the app, SQLAlchemy's and pydantic's structures; about
    200,000 objects) in reach each one stops the event loop, and every request in flight,
    for as long as that traversal takes. Frozen objects are still freed when their reference
    count drops to zero; only reference cycles among them wait until `stop` unfreezes them."""
    gc.collect()
    gc.freeze()


def stop(state: AppState) -> None:
    if state.settings.gc_freeze_on_start:
        gc.unfreeze()  # the start-up heap is collectable again (e.g. this app's own cycles)
    if state.worker is not None:
        state.worker.stop()
    state.poller.stop()
    state.pool.shutdown()
    state.engine.dispose()
