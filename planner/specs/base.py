"""Shared vocabulary of the specs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from planner.specs.limits import BOUNDS, check_text

RecomputeMode = Literal["none", "selective", "full"]
RECOMPUTE_MODES: tuple[RecomputeMode, ...] = ("none", "selective", "full")

ScheduleName = Literal["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv"]
SCHEDULES: tuple[ScheduleName, ...] = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv")

Dtype = Literal["bf16", "fp16", "fp32"]
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}

Framework = Literal["meshplan", "megatron", "torchtitan", "deepspeed"]
# How context-parallel ranks exchange keys and values: a ring of p2p sends, or an all-gather.
CpComm = Literal["p2p", "all_gather"]


class Frozen(BaseModel):
    """Base of every spec: immutable, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _valid_text(cls, value: Any) -> Any:
        """Every text in the field (a string, or one inside a tuple or dict, keys too) is
        valid Unicode without NUL (`limits.check_text`); nested specs check their own."""
        _check_texts(value)
        return value


def _check_texts(value: Any) -> None:
    if isinstance(value, str):
        check_text(value)
    elif isinstance(value, tuple | list):
        for item in value:
            _check_texts(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_texts(key)
            _check_texts(item)


class ModeValues(Frozen):
    """One number per recompute mode (`none`, `selective`, `full`)."""

    none: float = Field(ge=0, le=BOUNDS.measured_bytes)
    selective: float = Field(ge=0, le=BOUNDS.measured_bytes)
    full: float = Field(ge=0, le=BOUNDS.measured_bytes)

    def get(self, mode: RecomputeMode) -> float:
        value: float = getattr(self, mode)
        return value


def check_expert_grid(*, tp: int, cp: int, dp: int, ep: int, etp: int) -> None:
    """Megatron-Core's folding rule (docs/moe.md): the expert layers' etp x ep x edp grid uses
    the attention layers' tp x cp x dp GPUs, so etp * ep must divide tp * cp * dp.

    Raises ValueError with the numbers otherwise.
    """
    dense = tp * cp * dp
    if dense % (etp * ep):
        raise ValueError(
            f"etp*ep = {etp}*{ep} = {etp * ep} must divide tp*cp*dp = {tp}*{cp}*{dp} = "
            f"{dense} (the expert layers' etp*ep*edp uses the attention layers' GPUs)"
        )
