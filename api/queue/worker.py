"""Running queue workers: `meshplan worker` (a process of its own, `run_process`) and the
worker inside an API process (`EmbeddedWorker`, `meshplan serve --with-worker`).

Shutdown (SIGTERM or SIGINT to `meshplan worker`, or the API's shutdown): the worker takes no
new task and waits `worker_shutdown_grace_s` for its running searches. It then asks them to
stop (a search checks at its next progress report and is re-queued by procrastinate); a
search still running REQUEUE_MARGIN_S later is re-queued here and the process exits, so
another worker runs it from the start. The longest a stop takes is therefore the grace
period plus REQUEUE_MARGIN_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

import procrastinate
import psycopg

from api.metrics import Metrics
from api.queue.app import build_app, conninfo
from api.queue.tasks import QueueTasks
from api.settings import Settings
from api.store.db import make_engine, make_sessionmaker
from api.submissions.poller import Poller
from api.submissions.registry import Submitters

log = logging.getLogger("meshplan.queue")

FETCH_POLL_S = 1.0  # a worker also polls for due tasks (retries) this often, besides NOTIFY
REQUEUE_MARGIN_S = 2.0  # after the grace period, how long a search gets to stop on its own
EXIT_REQUEUED = 75  # EX_TEMPFAIL: the worker stopped with searches handed back to the queue
RESTART_S = 1.0  # a worker that stopped on its own (database outage) starts again this later


def worker_options(settings: Settings, concurrency: int, name: str) -> dict[str, Any]:
    """procrastinate's run_worker_async arguments for these settings."""
    return {
        "concurrency": concurrency,
        "name": name,
        "shutdown_graceful_timeout": settings.worker_shutdown_grace_s,
        "update_heartbeat_interval": settings.queue_heartbeat_s,
        "stalled_worker_timeout": settings.queue_stalled_after_s,
        "fetch_job_polling_interval": FETCH_POLL_S,
        "install_signal_handlers": False,
        # the jobs table keeps each search's record; a finished task row is only clutter
        # (the periodic sweep and poll add one every few seconds)
        "delete_jobs": "successful",
    }


def default_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def requeue(database_url: str, task_ids: set[int]) -> list[int]:
    """Hand running search tasks back to the queue (procrastinate's retry_job: 'doing' ->
    'todo'); returns the ids it moved (a task that just finished is not moved)."""
    moved = []
    with psycopg.connect(conninfo(database_url), autocommit=True, connect_timeout=5) as conn:
        for task_id in sorted(task_ids):
            try:
                conn.execute(
                    "SELECT procrastinate_retry_job_v2(%s, now(), NULL, NULL, NULL)", (task_id,)
                )
                moved.append(task_id)
            except psycopg.errors.RaiseException:  # no longer 'doing'
                continue
    return moved


async def _work(app: procrastinate.App, options: dict[str, Any]) -> None:
    """Run the worker until its task is cancelled (which shuts it down gracefully)."""
    async with app.open_async():
        with contextlib.suppress(asyncio.CancelledError):
            await app.run_worker_async(**options)


class _Supervisor:
    """Keeps a worker running: procrastinate stops a worker whose heartbeat or listener
    fails (the database went away); this starts it again RESTART_S later, until `stop()`.
    Its searches of that moment are retried as stalled once the database is back."""

    def __init__(self, app: procrastinate.App, options: dict[str, Any]) -> None:
        self.app = app
        self.options = options
        self.stopping = False
        self._current: asyncio.Task[None] | None = None

    async def run(self) -> None:
        while not self.stopping:
            self._current = asyncio.create_task(_work(self.app, self.options))
            try:
                await self._current
            except asyncio.CancelledError:
                pass
            except Exception:
                log.exception("queue worker failed")
            if not self.stopping:
                log.warning("queue worker stopped on its own: starting again in %s s", RESTART_S)
                await asyncio.sleep(RESTART_S)

    def stop(self) -> None:
        """From the supervisor's loop: no new tasks; running ones get the grace period."""
        self.stopping = True
        if self._current is not None:
            self._current.cancel()


def run_process(
    settings: Settings, *, concurrency: int, name: str, on_stop: Callable[[list[int]], None]
) -> int:
    """`meshplan worker`: run until SIGTERM/SIGINT. Returns the exit status (0, or
    EXIT_REQUEUED after handing searches back); `on_stop(requeued ids)` reports the end."""
    engine = make_engine(settings.database_url, pool_size=concurrency + 2)
    sessions = make_sessionmaker(engine)
    app = build_app(settings.database_url, pool_max=concurrency + 3)
    poller = Poller(sessions, Submitters(settings.submit_config()), settings)
    tasks = QueueTasks(app, sessions, settings, Metrics(), poller)
    options = worker_options(settings, concurrency, name)

    supervisor = _Supervisor(app, options)

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def hard_stop() -> None:
            moved = requeue(settings.database_url, set(tasks.running))
            log.warning("grace period over: re-queued search tasks %s", moved)
            on_stop(moved)
            os._exit(EXIT_REQUEUED)  # the search threads cannot be stopped any other way

        def on_signal(signum: int) -> None:
            if supervisor.stopping:
                return
            log.info("signal %d: no new tasks; %d running", signum, len(tasks.running))
            supervisor.stop()
            loop.call_later(settings.worker_shutdown_grace_s + REQUEUE_MARGIN_S, hard_stop)

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
        await supervisor.run()

    try:
        asyncio.run(main())
    finally:
        engine.dispose()
    on_stop([])
    return 0


class EmbeddedWorker:
    """A queue worker on its own thread and event loop inside the API process."""

    def __init__(self, settings: Settings, tasks: QueueTasks, *, concurrency: int) -> None:
        self.settings = settings
        self.tasks = tasks
        self.options = worker_options(settings, concurrency, f"api:{default_name()}")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._supervisor = _Supervisor(tasks.app, self.options)
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="queue-worker", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=10)

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._ready.set()
            await self._supervisor.run()

        try:
            asyncio.run(main())
        except Exception:
            log.exception("the embedded queue worker stopped")
        finally:
            self._ready.set()

    def stop(self) -> list[int]:
        """Stop within the grace period plus REQUEUE_MARGIN_S; returns the re-queued ids."""
        if self._thread is None:
            return []
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._supervisor.stop)
        self._thread.join(self.settings.worker_shutdown_grace_s + REQUEUE_MARGIN_S)
        moved: list[int] = []
        if self._thread.is_alive() and self.tasks.running:
            moved = requeue(self.settings.database_url, set(self.tasks.running))
            log.warning("grace period over: re-queued search tasks %s", moved)
        self._thread = None
        return moved
