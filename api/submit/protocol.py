"""The one interface every job-submission backend implements, and the values it exchanges.

Exception tree (the API layer maps these to HTTP; backends raise nothing else about schedulers):

    SubmitError
    ├── SubmitterUnavailable   scheduler unreachable or not answering → 503 + Retry-After
    └── SubmissionRejected     scheduler refused the job (bad partition, bad script…) → 422
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, get_args

JobState = Literal["PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"]
JOB_STATES: tuple[JobState, ...] = get_args(JobState)
FINAL_STATES: frozenset[JobState] = frozenset({"COMPLETED", "FAILED", "CANCELLED"})


class SubmitError(Exception):
    """Base of every error a submitter raises about the scheduler or the job."""


class SubmitterUnavailable(SubmitError):
    """The scheduler could not be reached or did not answer; retrying later may succeed.

    `retry_after_s` is the submitter's suggestion for the `Retry-After` header.
    """

    def __init__(self, message: str, *, retry_after_s: int = 30) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class SubmissionRejected(SubmitError):
    """The scheduler answered and refused the job (unknown partition, bad option, bad script)."""


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """What to submit.

    `script` is the batch script text for Slurm (an sbatch script, `#SBATCH` lines allowed) and the
    manifest text (YAML or JSON) for Kubernetes. `options` are backend-specific extras: for Slurm,
    long sbatch options without the dashes (`{"qos": "high"}` → `--qos=high`, `{"hold": ""}` →
    `--hold`); for Kubernetes, `{"namespace": "..."}`. `env` is added to the job's environment.
    `partition`, `account`, `time_limit_min` and `nodes` are Slurm's; the Kubernetes manifest
    states its own replicas.
    """

    name: str
    script: str
    workdir: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    partition: str | None = None
    account: str | None = None
    time_limit_min: int | None = None
    nodes: int = 1
    options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or any(c.isspace() for c in self.name):
            raise ValueError(
                f"JobSpec.name must be non-empty without whitespace, got {self.name!r}"
            )
        if not self.script.strip():
            raise ValueError("JobSpec.script is empty")
        if self.nodes < 1:
            raise ValueError(f"JobSpec.nodes must be >= 1, got {self.nodes}")
        if self.time_limit_min is not None and self.time_limit_min < 1:
            raise ValueError(f"JobSpec.time_limit_min must be >= 1, got {self.time_limit_min}")


@dataclass(frozen=True, kw_only=True)
class JobStatus:
    """One job's state as the scheduler reports it, mapped onto `JobState`.

    `reason` carries the scheduler's own words (Slurm's state and reason, e.g. "TIMEOUT",
    "OUT_OF_MEMORY", "Resources"; a PyTorchJob condition message). `exit_code` is the job's exit
    status once it has one (for a job killed by a signal, 128 + the signal number).
    `scheduler_state` is the scheduler's raw state name.
    """

    state: JobState
    exit_code: int | None = None
    reason: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    scheduler_state: str | None = None

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


class Submitter(Protocol):
    """Submit, follow, cancel and read the output of jobs on one scheduler."""

    backend: str
    """"slurm" or "kubernetes"."""

    def submit(self, spec: JobSpec) -> str:
        """Submit the job; return the scheduler's job id. Raises SubmitterUnavailable,
        SubmissionRejected."""
        ...

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """The status of every id, in one scheduler round trip where the backend allows.

        A job the scheduler no longer remembers is resolved from accounting, or reported
        FAILED / CANCELLED with a reason saying so; it is never reported RUNNING. Every id
        asked for is in the answer. Raises SubmitterUnavailable.
        """
        ...

    def cancel(self, job_id: str) -> None:
        """Ask the scheduler to cancel the job. Cancelling a finished job, or one the scheduler
        has no record of, is not an error (`status` then says what became of it)."""
        ...

    def log_tail(self, job_id: str, lines: int = 50) -> str:
        """The last `lines` lines of the job's output ("" when there is none yet)."""
        ...
