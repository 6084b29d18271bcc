"""Build an app's state from settings; start-up (migrations, bootstrap key) and shutdown."""

from __future__ import annotations

import logging

from api.metrics import Metrics
from api.settings import Settings
from api.state import AppState
from api.store import migrate
from api.store.db import make_engine, make_sessionmaker, session_scope
from api.store.keys import ensure_key
from api.workers import SolverPool

log = logging.getLogger("meshplan.api")


def build_state(settings: Settings) -> AppState:
    engine = make_engine(settings.database_url, pool_size=settings.db_pool_size)
    return AppState(
        settings=settings,
        engine=engine,
        sessions=make_sessionmaker(engine),
        metrics=Metrics(),
        pool=SolverPool(settings.solver_workers),
    )


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


def stop(state: AppState) -> None:
    state.pool.shutdown()
    state.engine.dispose()
