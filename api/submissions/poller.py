"""The submission poller: one thread per service process keeps open submissions current.

Every `submission_poll_interval_s` it reads the open submissions of every tenant, asks each
backend's scheduler once for all of its jobs (`Submitter.status` takes many ids), reads the log
tail of the jobs that run or just ended, and writes what changed (only the columns the
scheduler's answer sets). A scheduler that cannot be reached is skipped and asked again after
a doubling wait (capped at `submission_poll_max_backoff_s`); the first answer after an outage
resets it. Nothing a poll raises stops the thread. Several processes may poll the same rows:
each write is the scheduler's word of that moment, and a final state is never overwritten.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from api.settings import Settings
from api.store import submissions as submission_store
from api.store.submissions import Tracked
from api.store.tables import SubmissionRow, utcnow
from api.submissions.registry import Submitters
from api.submissions.states import status_values, store_status
from api.submit import FINAL_STATES, JobStatus, Submitter, SubmitterUnavailable

log = logging.getLogger("meshplan.api.submissions")


@dataclass
class PollStats:
    """What one poll did (tests and the bench read it)."""

    open: int = 0
    updated: int = 0
    status_calls: int = 0
    log_calls: int = 0
    skipped_backends: list[str] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0


@dataclass
class _Backoff:
    failures: int = 0
    next_at: float = 0.0


class Poller:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        submitters: Submitters,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sessions = sessions
        self.submitters = submitters
        self.interval_s = settings.submission_poll_interval_s
        self.max_backoff_s = settings.submission_poll_max_backoff_s
        self.log_lines = settings.submission_log_lines
        self.token_grace_s = settings.submission_token_grace_s
        self.clock = clock
        self.backoff: dict[str, _Backoff] = defaultdict(_Backoff)
        self.polls = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="submission-poller", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll_once()
            except Exception:  # the database, or a bug: log it and poll again later
                log.exception("submission poll failed")

    def poll_once(self) -> PollStats:
        start = self.clock()
        stats = PollStats()
        with self.sessions() as session:
            rows = submission_store.open_submissions(session)
        stats.open = len(rows)
        by_backend: dict[str, list[Tracked]] = defaultdict(list)
        for row in rows:
            by_backend[row.backend].append(row)
        for backend, group in by_backend.items():
            stats.updated += self._poll_backend(backend, group, stats)
        self.polls += 1
        stats.wall_s = self.clock() - start
        return stats

    def _poll_backend(self, backend: str, rows: list[Tracked], stats: PollStats) -> int:
        backoff = self.backoff[backend]
        if self.clock() < backoff.next_at:
            stats.skipped_backends.append(backend)
            return 0
        try:
            submitter = self.submitters.get(backend)
            stats.status_calls += 1
            answers = submitter.status([r.scheduler_job_id for r in rows])
            tails = self._tails(submitter, rows, answers, stats)
        except SubmitterUnavailable as exc:
            backoff.failures += 1
            wait = min(self.max_backoff_s, self.interval_s * 2**backoff.failures)
            backoff.next_at = self.clock() + wait
            stats.unavailable[backend] = str(exc)
            log.warning(
                "%s scheduler unavailable (%d in a row), next poll in %.1f s: %s",
                backend,
                backoff.failures,
                wait,
                exc,
            )
            return 0
        if backoff.failures:
            log.info("%s scheduler answers again after %d failed polls", backend, backoff.failures)
        self.backoff[backend] = _Backoff()
        return self._store(rows, answers, tails)

    def _tails(
        self,
        submitter: Submitter,
        rows: list[Tracked],
        answers: dict[str, JobStatus],
        stats: PollStats,
    ) -> dict[str, str]:
        """Log tails of the jobs that run or have just ended (a queued job has no output)."""
        tails: dict[str, str] = {}
        for row in rows:
            status = answers.get(row.scheduler_job_id)
            if status is None or status.state == "PENDING":
                continue
            stats.log_calls += 1
            try:
                tails[row.id] = submitter.log_tail(row.scheduler_job_id, self.log_lines)
            except SubmitterUnavailable:
                raise
            except Exception as exc:  # a missing or unreadable log does not stop the poll
                log.warning("log tail of %s failed: %s", row.scheduler_job_id, exc)
        return tails

    def _store(
        self, rows: list[Tracked], answers: dict[str, JobStatus], tails: dict[str, str]
    ) -> int:
        now = utcnow()
        updated = 0
        unchanged: list[str] = []
        with self.sessions() as session:
            for row in rows:
                status = answers.get(row.scheduler_job_id)
                if status is None:
                    continue
                values = status_values(
                    row,
                    status,
                    log_tail=tails.get(row.id),
                    now=now,
                    token_grace_s=self.token_grace_s,
                )
                if len(values) > 1 and store_status(session, row.id, values):
                    updated += 1
                    if status.state in FINAL_STATES:
                        log.info(
                            "submission %s (%s job %s) ended %s, exit code %s",
                            row.id,
                            row.backend,
                            row.scheduler_job_id,
                            status.state,
                            status.exit_code,
                        )
                else:
                    unchanged.append(row.id)
            if unchanged:
                session.execute(
                    update(SubmissionRow)
                    .where(SubmissionRow.id.in_(unchanged))
                    .values(polled_at=now)
                )
            session.commit()
        return updated
