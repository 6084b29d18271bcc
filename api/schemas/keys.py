"""API keys (the plaintext key is returned once, at creation)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    admin: bool = False
    name: str = Field(default="", max_length=200)


class KeyCreated(BaseModel):
    id: str
    tenant: str
    admin: bool
    name: str
    created_at: datetime
    key: str = Field(description="the API key; shown only now, stored hashed")
