"""The database being unreachable, as the service treats it: which errors mean an outage (a 503
with Retry-After, not a 500), and writes that must still land once it is back.

SQLAlchemy raises `OperationalError` (or `InterfaceError`) for a refused connection, a server
shutting down and a connection dropped mid-query, and its pool `TimeoutError` when every
connection is busy (https://docs.sqlalchemy.org/en/20/errors.html#dbapi-errors). A connection
found dead invalidates the whole pool, so the first requests after the database returns open
fresh ones (https://docs.sqlalchemy.org/en/20/core/pooling.html#dealing-with-disconnects): the
service recovers without a restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

log = logging.getLogger("meshplan.api")
T = TypeVar("T")


@dataclass(frozen=True)
class OutagePolicy:
    """How the service rides out a database outage.

    retry_after_s: the `Retry-After` a 503 carries (seconds; a restart or failover of a managed
        PostgreSQL takes seconds to tens of seconds).
    write_within_s: how long a write that must land (a finished search's plan and job, a job
        released after a failed search, an idempotency key abandoned) keeps retrying.
    first_backoff_s, max_backoff_s: the wait between those retries, doubling from the first.
    """

    retry_after_s: int = 2
    write_within_s: float = 120.0
    first_backoff_s: float = 0.1
    max_backoff_s: float = 1.0


POLICY = OutagePolicy()


def is_outage(exc: BaseException) -> bool:
    """True when `exc` means the database cannot be reached now (a retry later may succeed)."""
    if isinstance(exc, OperationalError | InterfaceError | PoolTimeoutError):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


def retry_while_down(fn: Callable[[], T], *, policy: OutagePolicy = POLICY) -> T:
    """`fn()`, called again after each outage error until `policy.write_within_s` has passed
    (then the last error is raised). Any other error is raised at once."""
    deadline = time.monotonic() + policy.write_within_s
    wait = policy.first_backoff_s
    while True:
        try:
            return fn()
        except Exception as exc:
            if not is_outage(exc) or time.monotonic() + wait > deadline:
                raise
        time.sleep(wait)
        wait = min(wait * 2, policy.max_backoff_s)


def write_later(fn: Callable[[], object], *, what: str, policy: OutagePolicy = POLICY) -> None:
    """Run `fn` in a background thread with `retry_while_down`, for a write the caller must not
    wait for (its request is answered 503 now; the write lands when the database is back)."""

    def run() -> None:
        try:
            retry_while_down(fn, policy=policy)
        except Exception:
            log.exception("gave up on %s after %.0f s", what, policy.write_within_s)

    threading.Thread(target=run, name=f"write-later:{what}", daemon=True).start()
