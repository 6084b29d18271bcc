"""Submission resource schemas: the submission document and a list page."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class SubmissionLinks(BaseModel):
    self: str
    plan: str
    runs: str
    page: str


class SubmissionPublic(BaseModel):
    """A plan sent to a cluster scheduler, as the service last saw it."""

    id: str
    plan_id: str
    backend: Literal["slurm", "kubernetes"]
    framework: str
    partition: str | None = None
    state: Literal["PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"]
    scheduler_job_id: str | None = Field(description="the scheduler's job id (Slurm job id)")
    created_at: datetime
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    polled_at: datetime | None = Field(
        default=None, description="when the poller last heard from the scheduler"
    )
    cancel_requested_at: datetime | None = None
    exit_code: int | None = None
    reason: str | None = Field(default=None, description="the scheduler's words")
    log_tail: str = Field(description="the last lines of the job's output")
    report: bool = Field(description="the job posts its RunReport back")
    run_ids: list[str] = Field(description="measured runs the job reported")
    links: SubmissionLinks


class SubmissionListPublic(BaseModel):
    data: list[SubmissionPublic]
    next_page_token: str | None = Field(description="pass as page_token for the next page")
