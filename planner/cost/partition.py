"""The per-layer numbers a stage partition is scored with (shared by `evaluate` and the search).

One `PartitionInputs` describes one discrete configuration (tp, pp, dp, vpp, schedule,
micro-batch size, ZeRO stage, sequence parallel). Given a partition — stage boundaries and a
recompute mode per layer — the step time and memory follow from it alone:

    stage s holds layers [first_s, end_s) with modes r_l
    fw(s)  = sum fw_s[l] + oF                      (seconds per micro-batch)
    bw(s)  = sum bw_input_s[l][r_l] + bw_weight_s[l] + oB   (recompute is part of bw_input_s)
    w(s)   = sum bw_weight_s[l] + oW
    p2p(s) = p2p_s[end_s - 1]                      (boundary after stage s)
    pipeline = simulate(schedule, StageDurations(fw, bw, w, p2p)).step_time_s
    step     = pipeline + max over ranks r of sum_{l on r} post_s[l]
    act(s) = sum_{l in s} activation_bytes[l][r_l]   (one micro-batch's saved bytes)
    memory(rank r) = fixed_bytes + sum_{l on r} static_bytes[l]
                     + (1 + frag) * max over the rank's held points p of
                       [ sum_{s on r} p.counts[s] * act(s) + transient(p) ]
    feasible  <=> memory(r) <= cap_bytes for every rank r

The held points (`rank_points`, planner.schedules.rank_held_points) are the rank's held counts
while each of its actions runs, so the max is the rank's peak over its simulated timeline, not
the sum of its stages' peaks (they differ when a rank holds several chunks). transient(p)
(planner.cost.memory.point_transient_bytes): in a backward on stage s, the recompute transient
max_{l in s} activation_bytes[l][none] - activation_bytes[l][r_l] (when `recompute_transient`);
`loss_bytes` in the last stage's F and backward; the larger of the two when both apply.

(oF, oB, oW) are the pipeline runtime's fixed time per action (`action_overhead`, from the
profile: `profiler.action_overhead` measures torch.distributed.pipelining's PipelineStage
entry points against the module called directly; 0 for the analytic catalog): every F action
takes fw(s) with oF = overhead.f_s; non-split schedules run B actions, oB = overhead.b_s,
oW = 0; split-backward schedules (zb-h1, zbv) run I, taking bw(s) - w(s), and W, taking
w(s), each with its own overhead: oB = overhead.i_s + overhead.w_s, oW = overhead.w_s.

`inflight[s]` is the peak number of micro-batches whose activations stage s holds at once
under the schedule (from F to the end of its last backward action); it depends only on the
schedule's per-rank order, not on durations (planner.schedules.peak_inflight). With one stage
per rank the rank's only held point holds inflight[s]; inputs built without `held_points`
charge the sum of the stages' peaks (one point per stage, every stage at its peak).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.memo import PerObject
from planner.schedules.inflight import HeldPoint, coheld_counts
from planner.schedules.ir import ActionKind, rank_stages
from planner.schedules.sim_types import StageDurations
from planner.specs.base import RecomputeMode, ScheduleName
from planner.specs.model import NO_OVERHEAD, ActionOverhead

ModeTriple = tuple[float, float, float]  # indexed by RECOMPUTE_MODES: none, selective, full
MODE_INDEX: dict[RecomputeMode, int] = {"none": 0, "selective": 1, "full": 2}
SPLIT_BACKWARD: frozenset[ScheduleName] = frozenset({"zb-h1", "zbv"})  # I and W actions, no B


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
    action_overhead: ActionOverhead = NO_OVERHEAD  # the runtime's fixed time per action
    # per rank, its held points (module docstring); () = every stage at its peak at once
    held_points: tuple[tuple[HeldPoint, ...], ...] = ()
    loss_bytes: float = 0.0  # the loss's fp32 temporary on the last stage (memory.MemoryTerms)
    recompute_transient: bool = True  # charge a recomputed layer's activations in its backward
    fragmentation_fraction: float = 0.0  # allocator reserve, x the rank's dynamic bytes

    @property
    def num_layers(self) -> int:
        return len(self.layer_names)

    @property
    def num_stages(self) -> int:
        return self.pp * self.vpp

    @property
    def stage_overhead_s(self) -> tuple[float, float, float]:
        """(oF, oB, oW) added to every stage's fw, bw and w (module docstring)."""
        o = self.action_overhead
        if self.schedule in SPLIT_BACKWARD:
            return (o.f_s, o.i_s + o.w_s, o.w_s)
        return (o.f_s, o.b_s, 0.0)

    @property
    def overhead_durations(self) -> StageDurations:
        """Stage durations of the overhead alone (p2p 0): a path's length is linear in the
        durations, so its length under the full durations is its length over the layers' sums
        plus its length under these (planner.search.paths.PathCut.length_s)."""
        f, b, w = self.stage_overhead_s
        n = self.num_stages
        return StageDurations(
            fw_s=(f,) * n, bw_s=(b,) * n, w_s=(w,) * n, p2p_s=(0.0,) * max(0, n - 1)
        )

    @property
    def rank_points(self) -> tuple[tuple[HeldPoint, ...], ...]:
        """Per rank, the held points its memory is the max over (module docstring)."""
        if self.held_points:
            return self.held_points
        return _FALLBACK_POINTS.get(self, lambda: _every_stage_at_peak(self))

    @property
    def coheld(self) -> tuple[int, ...]:
        """Per stage, counts its rank holds all at one moment (planner.schedules.coheld_counts):
        sum_{s on r} coheld[s] * act(s) is at most rank r's activation peak, for the floors."""
        return _COHELD.get(self, lambda: coheld_counts(self.rank_points, self.stage_rank))


def _every_stage_at_peak(x: PartitionInputs) -> tuple[tuple[HeldPoint, ...], ...]:
    """Inputs without held points: each rank holds every stage's peak at once, one point per
    stage (each stage's backward, for its transient)."""
    out = []
    for stages in rank_stages(x.stage_rank):
        counts = tuple(x.inflight[s] for s in stages)
        out.append(tuple(HeldPoint(counts, s, ActionKind.B) for s in stages))
    return tuple(out)


_FALLBACK_POINTS: PerObject[tuple[tuple[HeldPoint, ...], ...]] = PerObject()
_COHELD: PerObject[tuple[int, ...]] = PerObject()
