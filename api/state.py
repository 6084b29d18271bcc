"""What one app instance holds: settings, engine, sessions, metrics, the solver pool."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from api.metrics import Metrics
from api.settings import Settings
from api.store.keys import Principal
from api.workers import SolverPool


@dataclass
class AppState:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    metrics: Metrics
    pool: SolverPool
    key_cache: dict[str, Principal] = field(default_factory=dict)
