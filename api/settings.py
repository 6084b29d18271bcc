"""Service settings, read from the environment (prefix MESHPLAN_) and validated at start-up."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator
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
    db_pool_size: int = Field(
        default=10,
        gt=0,
        description="pooled database connections per API process; the hot reads (api.deps."
        "in_session) run at most this many at once, so that they never open a connection "
        "past the pool",
    )
    # stored plans' encoded documents kept in memory (api/doccache.py; docs/service.md)
    document_cache_entries: int = Field(
        default=4096,
        ge=0,
        le=10_000_000,
        description="stored plans' encoded documents one API process keeps for GET "
        "/v1/plans/{id} and cached POST /v1/plans (least recently used out first); 0: none",
    )
    document_cache_bytes: int = Field(
        default=64 * MIB,
        ge=0,
        description="the most bytes those documents (JSON and gzip) take in all; 0: none",
    )
    access_log: bool = Field(
        default=False,
        description="`meshplan serve`: uvicorn's line per request on stderr (about 23 µs of "
        "the API process's CPU each); the per-route counts and latencies are on /metrics "
        "either way",
    )
    gc_freeze_on_start: bool = Field(
        default=True,
        description="after start-up, move every object then alive out of the cyclic garbage "
        "collector's reach (gc.freeze; undone at shutdown): its full collections then scan "
        "only what requests left behind instead of the whole start-up heap, a pause of "
        'every request in flight (docs/service.md, "Garbage collection")',
    )

    # the search queue and its workers (docs/service.md, "Queue and workers")
    search_queue: Literal["auto", "pool", "procrastinate"] = Field(
        default="auto",
        description="where searches run: 'pool' (this process's threads), 'procrastinate' "
        "(tasks on PostgreSQL that `meshplan worker` processes run); 'auto': procrastinate "
        "on PostgreSQL, pool on SQLite",
    )
    with_worker: bool = Field(
        default=False, description="also run a queue worker inside the API process"
    )
    worker_concurrency: int = Field(
        default=2, gt=0, le=64, description="searches one worker runs at once"
    )
    worker_shutdown_grace_s: float = Field(
        default=30.0,
        ge=0,
        description="after SIGTERM a worker takes no new task and gives its running searches "
        "this long to finish; those still running are then re-queued for another worker",
    )
    api_shutdown_grace_s: float = Field(
        default=30.0,
        gt=0,
        description="after SIGTERM the API answers no new connection and gives in-flight "
        "requests this long to finish",
    )
    queue_heartbeat_s: float = Field(
        default=10.0, gt=0, description="how often a worker records that it is alive"
    )
    queue_stalled_after_s: float = Field(
        default=30.0,
        gt=0,
        description="a worker silent this long is presumed dead: its running tasks are retried",
    )
    queue_stalled_check_s: int = Field(
        default=5, gt=0, le=60, description="how often (whole seconds) workers look for them"
    )
    queue_max_attempts: int = Field(
        default=5, gt=0, description="runs of one search task before its job is failed (503)"
    )

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

    def queue_enabled(self) -> bool:
        """Whether searches go through the procrastinate queue (PostgreSQL only)."""
        postgres = self.database_url.startswith("postgresql")
        return self.search_queue == "procrastinate" or (self.search_queue == "auto" and postgres)

    @field_validator("search_queue")
    @classmethod
    def _queue_needs_postgres(cls, v: str, info: ValidationInfo) -> str:
        url = str(info.data.get("database_url", ""))
        if v == "procrastinate" and not url.startswith("postgresql"):
            raise ValueError(
                f"MESHPLAN_SEARCH_QUEUE=procrastinate needs PostgreSQL, "
                f"got a {url.split(':', 1)[0]!r} MESHPLAN_DATABASE_URL"
            )
        return v

    @field_validator("queue_stalled_after_s")
    @classmethod
    def _stalled_after_heartbeat(cls, v: float, info: ValidationInfo) -> float:
        heartbeat = info.data.get("queue_heartbeat_s")
        if heartbeat is not None and v <= heartbeat:
            raise ValueError(
                f"MESHPLAN_QUEUE_STALLED_AFTER_S ({v}) must exceed "
                f"MESHPLAN_QUEUE_HEARTBEAT_S ({heartbeat})"
            )
        return v

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
