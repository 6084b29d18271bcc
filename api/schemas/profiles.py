"""Stored model profiles."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from planner.specs import ModelProfile


class ProfileSummary(BaseModel):
    id: str
    created_at: datetime
    name: str
    model_hash: str
    source: str


class ProfilePublic(ProfileSummary):
    profile: ModelProfile


class ProfileListPublic(BaseModel):
    data: list[ProfileSummary]
    next_page_token: str | None
