"""Service settings, read from the environment (prefix MESHPLAN_) and validated at start-up."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024


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
    db_pool_size: int = Field(default=10, gt=0)

    @field_validator("bootstrap_admin_key")
    @classmethod
    def _strong_key(cls, v: str | None) -> str | None:
        if v is not None and len(v) < 16:
            raise ValueError(
                f"MESHPLAN_BOOTSTRAP_ADMIN_KEY must be at least 16 characters, got {len(v)}"
            )
        return v
