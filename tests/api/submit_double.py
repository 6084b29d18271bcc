"""A scheduler stand-in at the `api.submit.Submitter` seam, for the resource's own rules
(tenancy, allow-lists, idempotency, pages, the poller's bookkeeping) where the test sets what
the scheduler says. Everything a real scheduler decides is tested against the dev cluster
(tests/api/test_submissions_slurm.py, tests/submit/)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from api.submit import JobSpec, JobStatus, SubmissionRejected, SubmitterUnavailable


@dataclass
class SchedulerDouble:
    backend: str = "slurm"
    down: bool = False
    reject: str | None = None
    specs: dict[str, JobSpec] = field(default_factory=dict)
    states: dict[str, JobStatus] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    status_calls: list[list[str]] = field(default_factory=list)

    def _check(self) -> None:
        if self.down:
            raise SubmitterUnavailable("Unable to contact slurm controller", retry_after_s=7)

    def submit(self, spec: JobSpec) -> str:
        self._check()
        if self.reject is not None:
            raise SubmissionRejected(self.reject)
        job_id = str(100 + len(self.specs))
        self.specs[job_id] = spec
        self.states[job_id] = JobStatus(state="PENDING", reason="Priority")
        return job_id

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        self._check()
        self.status_calls.append(list(job_ids))
        return {i: self.states[i] for i in job_ids}

    def cancel(self, job_id: str) -> None:
        self._check()
        self.cancelled.append(job_id)
        self.states[job_id] = JobStatus(state="CANCELLED", reason="cancelled by the service")

    def log_tail(self, job_id: str, lines: int = 50) -> str:
        self._check()
        return "\n".join(self.logs.get(job_id, "").splitlines()[-lines:])
