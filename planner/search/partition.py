"""A stage partition of one configuration, and its score under the cost model.

Scoring is `planner.cost.score_partition` (the one implementation `evaluate` also uses):
stage durations are sums of per-layer numbers, the pipeline time is the simulator's makespan
and the step adds the slowest rank's data-parallel sync and optimizer step. The CP-SAT search
and the exhaustive oracle both judge partitions with it, so "optimal" means optimal under
exactly this function.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost import PartitionInputs, PartitionScore, score_split
from planner.schedules import Schedule, StageDurations, generate
from planner.specs.base import RecomputeMode
from planner.specs.request import StageSpec


@dataclass(frozen=True)
class Partition:
    """Stage boundaries (`bounds[s]` = first layer of stage s; `bounds[-1]` = layer count) and
    one recompute mode per layer."""

    bounds: tuple[int, ...]
    modes: tuple[RecomputeMode, ...]

    @property
    def num_stages(self) -> int:
        return len(self.bounds) - 1

    def stage_layers(self, stage: int) -> range:
        return range(self.bounds[stage], self.bounds[stage + 1])

    def stage_specs(self) -> tuple[StageSpec, ...]:
        return tuple(
            StageSpec(
                layers=(self.bounds[s], self.bounds[s + 1]),
                recompute=self.modes[self.bounds[s] : self.bounds[s + 1]],
            )
            for s in range(self.num_stages)
        )


def schedule_of(inputs: PartitionInputs) -> Schedule:
    """The configuration's schedule (the generator caches it)."""
    return generate(
        inputs.schedule, pp=inputs.pp, vpp=inputs.vpp, num_microbatches=inputs.num_microbatches
    )


def score(inputs: PartitionInputs, part: Partition) -> PartitionScore:
    """Step time, bubble and per-rank memory of `part` (planner.cost.score_partition, in its
    unchecked form: a Partition is well formed by construction)."""
    return score_split(inputs, part.bounds, part.modes)


def durations_of(sc: PartitionScore) -> StageDurations:
    return StageDurations(
        fw_s=sc.stage_fw_s, bw_s=sc.stage_bw_s, w_s=sc.stage_w_s, p2p_s=sc.stage_p2p_s
    )
