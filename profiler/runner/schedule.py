"""The plan's schedule as a `torch.distributed.pipelining` schedule.

| plan schedule      | torch class                       | stages per rank             |
|--------------------|-----------------------------------|-----------------------------|
| `gpipe`            | `ScheduleGPipe`                   | 1                           |
| `1f1b`             | `Schedule1F1B`                    | 1                           |
| `interleaved-1f1b` | `ScheduleInterleaved1F1B`         | vpp, looped (stage i on i % pp) |
| `zb-h1`            | `ScheduleInterleavedZeroBubble`   | vpp (1 gives ZB-H1), looped |
| `zbv`              | `ScheduleZBVZeroBubble`           | 2, a V (i < pp: i; else 2pp-1-i) |

These are the orders `planner.schedules.generate` reproduces (see its module docstring).
"""

from __future__ import annotations

from typing import Any

from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
    ScheduleZBVZeroBubble,
)

from planner.specs.base import ScheduleName
from profiler.runner.split import stage_loss

__all__ = ["TORCH_SCHEDULES", "build_schedule"]

TORCH_SCHEDULES: dict[ScheduleName, type] = {
    "gpipe": ScheduleGPipe,
    "1f1b": Schedule1F1B,
    "interleaved-1f1b": ScheduleInterleaved1F1B,
    "zb-h1": ScheduleInterleavedZeroBubble,
    "zbv": ScheduleZBVZeroBubble,
}

_SINGLE: frozenset[ScheduleName] = frozenset({"gpipe", "1f1b"})


def build_schedule(
    name: ScheduleName, stages: list[PipelineStage], *, num_microbatches: int
) -> Any:
    """torch's schedule object for this rank's stages; the loss comes from the last stage."""
    cls = TORCH_SCHEDULES[name]
    if name in _SINGLE:
        if len(stages) != 1:
            raise ValueError(f"schedule {name!r} runs one stage per rank, got {len(stages)}")
        return cls(stages[0], num_microbatches, loss_fn=stage_loss)
    return cls(stages, num_microbatches, loss_fn=stage_loss)
