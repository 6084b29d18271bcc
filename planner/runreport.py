"""RunReport: what a real run of a plan measured (shared by the runner and the service).

Measured numbers are bounded (`planner.specs.limits.PhysicalBounds`): a nonzero time is at
least `measured_s_min` and a nonzero byte count at least 1, so that the relative errors the
service reports, (predicted - measured) / measured, stay finite.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from planner.specs.base import Frozen
from planner.specs.limits import BOUNDS as B
from planner.specs.limits import TEXT


def _time(value: float) -> float:
    if 0 < value < B.measured_s_min:
        raise ValueError(
            f"{value!r} s is below the shortest measurable time {B.measured_s_min} s "
            "(0 means not measured)"
        )
    return value


def _bytes(value: float) -> float:
    if 0 < value < 1:
        raise ValueError(f"{value!r} bytes: a byte count is 0 or at least 1")
    return value


Seconds = Annotated[float, Field(ge=0, le=B.measured_s), AfterValidator(_time)]
PositiveSeconds = Annotated[float, Field(gt=0, le=B.measured_s), AfterValidator(_time)]
Bytes = Annotated[float, Field(ge=0, le=B.measured_bytes), AfterValidator(_bytes)]
Name = Annotated[str, Field(max_length=TEXT.name_chars)]


def _fraction(value: float) -> float:
    if 0 < value < B.measured_s_min:
        raise ValueError(
            f"{value!r} is below the smallest measurable fraction {B.measured_s_min} "
            "(0 means no bubble)"
        )
    return value


class StageMeasurement(Frozen):
    stage: int = Field(ge=0, le=2 * B.num_layers)
    rank: int = Field(ge=0, le=B.num_gpus)
    busy_s: Seconds = Field(description="median busy time of this rank per step")
    peak_memory_bytes: Bytes
    activation_bytes: Bytes = Field(default=0, description="peak saved-activation bytes")


class RunReport(Frozen):
    """Measured step time, bubble and memory of one run of a plan."""

    schema_version: int = Field(default=1, ge=1, le=1000)
    plan_id: Name | None = None
    device: Name = Field(description="'cpu' or the CUDA device name")
    backend: Name = Field(description="gloo or nccl")
    world_size: int = Field(gt=0, le=B.num_gpus)
    tp: int = Field(gt=0, le=B.num_gpus)
    pp: int = Field(gt=0, le=B.num_gpus)
    dp: int = Field(gt=0, le=B.num_gpus)
    vpp: int = Field(default=1, gt=0, le=B.num_layers)
    schedule: Name
    steps: int = Field(gt=0, le=B.measured_steps)
    warmup_steps: int = Field(ge=0, le=B.measured_steps)
    step_times_s: tuple[Seconds, ...] = Field(max_length=B.measured_steps)
    step_time_s: PositiveSeconds = Field(description="median over measured steps")
    bubble_fraction: Annotated[float, Field(ge=0, le=1), AfterValidator(_fraction)]
    stages: tuple[StageMeasurement, ...] = Field(max_length=4 * B.num_layers)
    loss: float | None = Field(default=None, ge=-1e30, le=1e30)
    torch_version: Name | None = None
    started_at: Name | None = None
    notes: dict[str, Annotated[str, Field(max_length=TEXT.note_chars)]] = Field(
        default_factory=dict, max_length=TEXT.notes
    )
