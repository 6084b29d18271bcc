"""API keys (the plaintext key is returned once, at creation)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from planner.specs.limits import check_text


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    admin: bool = False
    name: Annotated[str, AfterValidator(check_text)] = Field(default="", max_length=200)


class KeyCreated(BaseModel):
    id: str
    tenant: str
    admin: bool
    name: str
    created_at: datetime
    key: str = Field(description="the API key; shown only now, stored hashed")
