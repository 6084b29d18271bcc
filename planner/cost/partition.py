"""The per-layer numbers a stage partition is scored with (shared by `evaluate` and the search).

One `PartitionInputs` describes one discrete configuration (tp, pp, dp, vpp, schedule,
micro-batch size, ZeRO stage, sequence parallel). Given a partition — stage boundaries and a
recompute mode per layer — the step time and memory follow from it alone:

    stage s holds layers [first_s, end_s) with modes r_l
    fw(s)  = sum fw_s[l]                          (seconds per micro-batch)
    bw(s)  = sum bw_input_s[l][r_l] + bw_weight_s[l]  (recompute is part of bw_input_s)
    w(s)   = sum bw_weight_s[l]
    p2p(s) = p2p_s[end_s - 1]                      (boundary after stage s)
    pipeline = simulate(schedule, StageDurations(fw, bw, w, p2p)).step_time_s
    step     = pipeline + max over ranks r of sum_{l on r} post_s[l]
    memory(rank r) = fixed_bytes + sum_{l on r} static_bytes[l]
                     + sum_{s on r} inflight[s] * sum_{l in s} activation_bytes[l][r_l]
    feasible  <=> memory(r) <= cap_bytes for every rank r

`inflight[s]` is the peak number of micro-batches whose activations stage s holds at once
under the schedule (from F to the end of its last backward action); it depends only on the
schedule's per-rank order, not on durations (planner.schedules.peak_inflight).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs.base import RecomputeMode, ScheduleName

ModeTriple = tuple[float, float, float]  # indexed by RECOMPUTE_MODES: none, selective, full
MODE_INDEX: dict[RecomputeMode, int] = {"none": 0, "selective": 1, "full": 2}


@dataclass(frozen=True)
class PartitionInputs:
    schedule: ScheduleName
    pp: int
    vpp: int
    num_microbatches: int
    layer_names: tuple[str, ...]
    fw_s: tuple[float, ...]  # per layer, incl. TP collectives of the forward
    bw_input_s: tuple[ModeTriple, ...]  # per layer per mode: input-grad bw + recompute + TP
    bw_weight_s: tuple[float, ...]  # per layer: weight-gradient part of the backward
    p2p_s: tuple[float, ...]  # per layer: time to send its output across a stage boundary
    activation_bytes: tuple[ModeTriple, ...]  # per layer per mode, one micro-batch
    static_bytes: tuple[float, ...]  # per layer: params + grads + optimizer state on one GPU
    post_s: tuple[float, ...]  # per layer: DP gradient sync + optimizer step time
    inflight: tuple[int, ...]  # per stage
    stage_rank: tuple[int, ...]  # per stage
    fixed_bytes: float  # per GPU: reserve + communication buffers
    cap_bytes: float
    allowed_modes: tuple[RecomputeMode, ...]  # the recompute modes the request allows

    @property
    def num_layers(self) -> int:
        return len(self.layer_names)

    @property
    def num_stages(self) -> int:
        return self.pp * self.vpp
