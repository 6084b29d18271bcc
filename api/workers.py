"""The bounded solver pool: searches run off the event loop, at most `workers` at a time, and
identical in-flight searches are shared (single-flight within the process). This is where
searches run on SQLite (and with `MESHPLAN_SEARCH_QUEUE=pool`); on PostgreSQL they are queue
tasks that `meshplan worker` processes run (api/queue).

CP-SAT releases the GIL while it solves, so threads give real parallelism. A thread cannot be
killed, so every search runs under its request's time limit (capped by the settings): a client
that disconnects leaves at most that much work behind, and the result is stored for the next
identical request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Flight(Generic[T]):
    """A running search: its future and the job row that records it."""

    future: Future[T]
    job_id: str


class SolverPool:
    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="solver")
        self._flights: dict[str, Flight[object]] = {}
        self._lock = threading.RLock()
        self.running = 0
        self.peak_running = 0  # the most searches that ever ran at once (bounded by workers)

    def join_or_start(
        self,
        key: str | None,
        claim: Callable[[], str | None],
        work: Callable[[str], T],
    ) -> tuple[Flight[T] | None, bool]:
        """Join the flight for `key`, or claim a job (`claim()` returns its id, or None when
        another process holds the request) and start `work(job_id)`.

        Returns (flight, joined); (None, False) when the claim failed.
        """
        with self._lock:
            if key is not None and key in self._flights:
                flight: Flight[T] = self._flights[key]  # type: ignore[assignment]
                return flight, True
            job_id = claim()
            if job_id is None:
                return None, False
            future = self._executor.submit(self._counted, work, job_id)
            flight = Flight(future=future, job_id=job_id)
            if key is not None:
                self._flights[key] = flight  # type: ignore[assignment]
                landed_key: str = key

                def land(_future: Future[T]) -> None:
                    self._land(landed_key, job_id)

                future.add_done_callback(land)
            return flight, False

    def _counted(self, work: Callable[[str], T], job_id: str) -> T:
        with self._lock:
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
        try:
            return work(job_id)
        finally:
            with self._lock:
                self.running -= 1

    def _land(self, key: str, job_id: str) -> None:
        with self._lock:
            current = self._flights.get(key)
            if current is not None and current.job_id == job_id:
                del self._flights[key]

    def in_flight(self) -> int:
        with self._lock:
            return len(self._flights)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
