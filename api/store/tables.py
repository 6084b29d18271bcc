"""Database tables (SQLAlchemy 2.0 typed ORM). These rows are never API schemas.

Plans keep the full request and result as JSON plus denormalised columns for the history's
filters and sorts, each with an index that starts with the tenant.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class UTCDateTime(TypeDecorator[datetime]):
    """Stores naive UTC (same text order on SQLite and PostgreSQL), returns aware UTC."""

    impl = DateTime(timezone=False)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, datetime: UTCDateTime}


class ApiKeyRow(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    name: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ProfileRow(Base):
    __tablename__ = "profiles"
    __table_args__ = (Index("ix_profiles_tenant_created", "tenant", "created_at", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(200))
    model_hash: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    body: Mapped[dict[str, Any]]


class PlanRow(Base):
    __tablename__ = "plans"
    __table_args__ = (
        Index("ix_plans_tenant_created", "tenant", "created_at", "id"),
        Index("ix_plans_tenant_step", "tenant", "step_time_s", "id"),
        Index("ix_plans_tenant_tps", "tenant", "tokens_per_s", "id"),
        # filtered history (ordered by created_at, id): equality filters, then the order with
        # its tie-breaker id, then columns other filters check on the index entry (0007)
        Index(
            "ix_plans_tenant_model", "tenant", "model_name", "created_at", "id", "gpu", "num_gpus"
        ),
        Index("ix_plans_tenant_hash", "tenant", "model_hash", "created_at", "id"),
        Index("ix_plans_tenant_gpu", "tenant", "gpu", "created_at", "id", "num_gpus"),
        Index("ix_plans_tenant_request", "tenant", "request_hash", "created_at", "id"),
        Index("ix_plans_tenant_version", "tenant", "cost_model_version", "created_at", "id"),
        Index("ix_plans_tenant_calibration", "tenant", "calibration_id", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    request_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    model_name: Mapped[str] = mapped_column(String(200))
    model_hash: Mapped[str] = mapped_column(String(64))
    gpu: Mapped[str] = mapped_column(String(64))
    num_gpus: Mapped[int] = mapped_column(Integer)
    schedule: Mapped[str] = mapped_column(String(32))
    tp: Mapped[int] = mapped_column(Integer)
    pp: Mapped[int] = mapped_column(Integer)
    dp: Mapped[int] = mapped_column(Integer)
    vpp: Mapped[int] = mapped_column(Integer)
    micro_batch_size: Mapped[int] = mapped_column(Integer)
    step_time_s: Mapped[float] = mapped_column(Float)
    tokens_per_s: Mapped[float] = mapped_column(Float)
    bubble_fraction: Mapped[float] = mapped_column(Float)
    peak_memory_bytes: Mapped[float] = mapped_column(Float)
    search_wall_s: Mapped[float] = mapped_column(Float, default=0.0)
    tags: Mapped[list[str]] = mapped_column(JSON, default=list)
    # planner.cost.version.COST_MODEL_VERSION and the calibration the prediction was made
    # with; NULL version: stored before plans recorded it (shown "unknown")
    cost_model_version: Mapped[str | None] = mapped_column(String(32), nullable=True)
    calibration_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    request: Mapped[dict[str, Any]]
    result: Mapped[dict[str, Any]]


class PlanTagRow(Base):
    __tablename__ = "plan_tags"
    __table_args__ = (Index("ix_plan_tags_tenant_tag", "tenant", "tag", "plan_id"),)

    plan_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("plans.id", ondelete="CASCADE"), primary_key=True
    )
    tag: Mapped[str] = mapped_column(String(200), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))


class JobRow(Base):
    """One search. `inflight_key` is set while it runs and is unique: the cross-process guard."""

    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("inflight_key", name="uq_jobs_inflight_key"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64), index=True)
    request_hash: Mapped[str] = mapped_column(String(64))
    inflight_key: Mapped[str | None] = mapped_column(String(140), nullable=True)
    status: Mapped[str] = mapped_column(String(16))  # running | succeeded | failed
    plan_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    progress: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # the search's latest SearchProgress (settled, total, incumbent_s, lower_bound_s, gap, ...)
    progress_detail: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(nullable=True)


class IdempotencyRow(Base):
    __tablename__ = "idempotency_keys"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))  # in_flight | done
    response_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    response_body: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    response_headers: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RunRow(Base):
    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_tenant_plan", "tenant", "plan_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    plan_id: Mapped[str] = mapped_column(String(32), ForeignKey("plans.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    report: Mapped[dict[str, Any]]


class CalibrationRow(Base):
    """A calibration document (planner.calibrate.Calibration); its id is the document's own
    content hash, so the same fit stored twice by one tenant is one row."""

    __tablename__ = "calibrations"
    __table_args__ = (Index("ix_calibrations_tenant_created", "tenant", "created_at", "id"),)

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    gpu: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    body: Mapped[dict[str, Any]]


class SubmissionRow(Base):
    """A plan sent to a cluster scheduler, tracked to its end (api/submissions).

    `report_token_hash` is the sha256 of the token the job posts its RunReport with; the token
    itself is only in the job's script. `run_ids` lists the runs the job reported.
    """

    __tablename__ = "submissions"
    __table_args__ = (
        Index("ix_submissions_tenant_created", "tenant", "created_at", "id"),
        Index("ix_submissions_tenant_plan", "tenant", "plan_id", "created_at"),
        Index("ix_submissions_state", "state", "backend"),
        UniqueConstraint("report_token_hash", name="uq_submissions_report_token_hash"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    plan_id: Mapped[str] = mapped_column(String(32), ForeignKey("plans.id", ondelete="CASCADE"))
    backend: Mapped[str] = mapped_column(String(16))
    framework: Mapped[str] = mapped_column(String(16))
    partition: Mapped[str | None] = mapped_column(String(200), nullable=True)
    state: Mapped[str] = mapped_column(
        String(16)
    )  # PENDING | RUNNING | COMPLETED | FAILED | CANCELLED
    scheduler_job_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    submitted_at: Mapped[datetime | None] = mapped_column(nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(nullable=True)
    polled_at: Mapped[datetime | None] = mapped_column(nullable=True)
    cancel_requested_at: Mapped[datetime | None] = mapped_column(nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    log_tail: Mapped[str] = mapped_column(Text, default="")
    report: Mapped[bool] = mapped_column(Boolean, default=False)
    report_token_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    token_expires_at: Mapped[datetime | None] = mapped_column(nullable=True)
    run_ids: Mapped[list[str]] = mapped_column(JSON, default=list)
    deployment: Mapped[dict[str, Any]]
