"""The procrastinate App for a database: task names, the connection string, one builder."""

from __future__ import annotations

import procrastinate
from sqlalchemy.engine import make_url

SEARCH_TASK = "meshplan.search"
RETRY_STALLED_TASK = "meshplan.retry_stalled"
POLL_SUBMISSIONS_TASK = "meshplan.poll_submissions"
SEARCH_QUEUE = "searches"


def conninfo(database_url: str) -> str:
    """The libpq URI psycopg wants for an SQLAlchemy URL (`postgresql+psycopg://...`)."""
    url = make_url(database_url)
    if url.get_backend_name() != "postgresql":
        raise ValueError(f"the search queue needs PostgreSQL, got {url.get_backend_name()!r}")
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def build_app(database_url: str, *, pool_max: int = 4) -> procrastinate.App:
    """An unopened App. Deferring with an explicit connection (the API) never opens it; a
    worker opens it (`open_async`) with a pool of at most `pool_max` connections."""
    connector = procrastinate.PsycopgConnector(
        conninfo=conninfo(database_url), min_size=1, max_size=pool_max
    )
    return procrastinate.App(connector=connector)
