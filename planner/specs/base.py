"""Shared vocabulary of the specs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

RecomputeMode = Literal["none", "selective", "full"]
RECOMPUTE_MODES: tuple[RecomputeMode, ...] = ("none", "selective", "full")

ScheduleName = Literal["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv"]
SCHEDULES: tuple[ScheduleName, ...] = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv")

Dtype = Literal["bf16", "fp16", "fp32"]
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}

Framework = Literal["meshplan", "megatron", "torchtitan", "deepspeed"]


class Frozen(BaseModel):
    """Base of every spec: immutable, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class ModeValues(Frozen):
    """One number per recompute mode (`none`, `selective`, `full`)."""

    none: float = Field(ge=0)
    selective: float = Field(ge=0)
    full: float = Field(ge=0)

    def get(self, mode: RecomputeMode) -> float:
        value: float = getattr(self, mode)
        return value
