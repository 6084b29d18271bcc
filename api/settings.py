"""Service settings, read from the environment (prefix MESHPLAN_) and validated at start-up."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from api.submit.config import SubmitConfig

MIB = 1024 * 1024


class SubmissionAllowance(BaseModel):
    """Where one tenant may submit plans: backends, and the Slurm partitions (None: any)."""

    backends: list[str] = Field(default_factory=list, description="e.g. ['slurm']")
    partitions: list[str] | None = Field(
        default=None, description="allowed partitions; None allows any (and none given)"
    )


class Settings(BaseSettings):
    """Everything the service is configured with. Build one and hand it to `create_app`."""

    model_config = SettingsConfigDict(env_prefix="MESHPLAN_", extra="ignore")

    database_url: str = Field(
        default="sqlite:///./meshplan.db",
        description="SQLAlchemy URL; PostgreSQL: postgresql+psycopg://user@host:5432/db",
    )
    bootstrap_admin_key: str | None = Field(
        default=None, description="if set, an admin API key with this value exists at start-up"
    )
    bootstrap_tenant: str = Field(default="default", description="tenant of the bootstrap key")
    dev_open: bool = Field(default=False, description="allow keyless use under tenant 'dev'")
    max_body_bytes: int = Field(default=1 * MIB, gt=0, description="larger bodies get 413")
    solver_workers: int = Field(default=2, gt=0, le=64, description="concurrent searches")
    max_time_limit_s: float = Field(
        default=300.0, gt=0, description="upper bound on any search's time limit"
    )
    migrate_on_start: bool = True
    # rate limits and idempotency keys (docs/service.md, "Rate limits" and "Idempotency")
    rate_limit_per_s: float = Field(
        default=20.0,
        ge=0,
        le=1e6,
        description="requests a second one API key may send to one API process; 0: no limit "
        "(--dev-open also turns the limit off)",
    )
    rate_limit_burst: int = Field(
        default=40, gt=0, le=1_000_000, description="requests a key may send at once"
    )
    idempotency_ttl_s: float = Field(
        default=86_400.0,
        gt=0,
        le=365 * 86_400.0,
        description="an Idempotency-Key is remembered this long after its first use; then it "
        "is free again and its stored response is purged",
    )
    idempotency_purge_interval_s: float = Field(
        default=60.0, gt=0, description="how often an API process deletes expired keys"
    )
    db_pool_size: int = Field(default=10, gt=0)

    # submissions (docs/submissions.md)
    submission_tenants: dict[str, SubmissionAllowance] = Field(
        default_factory=dict,
        description="tenant -> allowed backends/partitions; '*' applies to unlisted tenants; "
        "a tenant with no entry may not submit",
    )
    submit: dict[str, Any] = Field(
        default_factory=dict, description="api.submit.SubmitConfig fields (JSON in MESHPLAN_SUBMIT)"
    )
    submission_poll_interval_s: float = Field(
        default=5.0, gt=0, description="how often the poller asks the schedulers"
    )
    submission_poll_max_backoff_s: float = Field(
        default=120.0, gt=0, description="longest wait between polls of an unreachable scheduler"
    )
    submission_report_url: str | None = Field(
        default=None,
        description="URL jobs post their RunReport to; default: the URL the POST came in on",
    )
    submission_token_grace_s: float = Field(
        default=600.0, ge=0, description="a report token stays valid this long after its job ends"
    )
    submission_log_lines: int = Field(default=50, gt=0, le=1000, description="log tail length")

    def submit_config(self) -> SubmitConfig:
        return SubmitConfig(**self.submit)

    @field_validator("submit")
    @classmethod
    def _submit_config(cls, v: dict[str, Any]) -> dict[str, Any]:
        try:
            SubmitConfig(**v)
        except TypeError as exc:  # an unknown field
            raise ValueError(f"MESHPLAN_SUBMIT: {exc}") from exc
        return v

    @field_validator("bootstrap_admin_key")
    @classmethod
    def _strong_key(cls, v: str | None) -> str | None:
        if v is not None and len(v) < 16:
            raise ValueError(
                f"MESHPLAN_BOOTSTRAP_ADMIN_KEY must be at least 16 characters, got {len(v)}"
            )
        return v
