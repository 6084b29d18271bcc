"""RunReport: what a real run of a plan measured (shared by the runner and the service)."""

from __future__ import annotations

from pydantic import Field

from planner.specs.base import Frozen


class StageMeasurement(Frozen):
    stage: int
    rank: int
    busy_s: float = Field(ge=0, description="median busy time of this rank per step")
    peak_memory_bytes: float = Field(ge=0)
    activation_bytes: float = Field(default=0, ge=0, description="peak saved-activation bytes")


class RunReport(Frozen):
    """Measured step time, bubble and memory of one run of a plan."""

    schema_version: int = 1
    plan_id: str | None = None
    device: str = Field(description="'cpu' or the CUDA device name")
    backend: str = Field(description="gloo or nccl")
    world_size: int = Field(gt=0)
    tp: int = Field(gt=0)
    pp: int = Field(gt=0)
    dp: int = Field(gt=0)
    vpp: int = Field(default=1, gt=0)
    schedule: str
    steps: int = Field(gt=0)
    warmup_steps: int = Field(ge=0)
    step_times_s: tuple[float, ...]
    step_time_s: float = Field(gt=0, description="median over measured steps")
    bubble_fraction: float = Field(ge=0, le=1)
    stages: tuple[StageMeasurement, ...]
    loss: float | None = None
    torch_version: str | None = None
    started_at: str | None = None
    notes: dict[str, str] = Field(default_factory=dict)
