"""The Plan (DESIGN.md, contract 4) and the predictions the cost model makes for a candidate."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from planner.specs.base import Frozen, RecomputeMode, ScheduleName
from planner.specs.model import ModelArch
from planner.specs.request import Candidate, PlanRequest, StageSpec


class MemoryBreakdown(Frozen):
    """Bytes on one GPU (one pipeline rank, which may hold several stages)."""

    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float = Field(description="saved activations at the rank's peak")
    buffers_bytes: float
    reserve_bytes: float
    transient_bytes: float = Field(
        default=0.0, description="the running action's temporaries at the peak: recompute, loss"
    )
    fragmentation_bytes: float = Field(default=0.0, description="caching-allocator reserve")

    @property
    def total_bytes(self) -> float:
        return (
            self.params_bytes
            + self.grads_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.transient_bytes
            + self.fragmentation_bytes
            + self.buffers_bytes
            + self.reserve_bytes
        )


class StagePrediction(Frozen):
    stage: int
    rank: int
    layers: tuple[int, int]
    recompute: tuple[RecomputeMode, ...]
    fw_s: float = Field(description="forward time per micro-batch, incl. TP collectives")
    bw_s: float = Field(description="backward time per micro-batch, incl. recompute and TP")
    bw_weight_s: float = Field(description="the weight-gradient part of bw_s")
    p2p_s: float = Field(description="send time of this stage's output per micro-batch")
    peak_inflight: int = Field(description="peak micro-batches whose activations are held")
    activation_bytes: float = Field(description="peak activation bytes of this stage")


class RankPrediction(Frozen):
    rank: int
    stages: tuple[int, ...]
    busy_s: float
    memory: MemoryBreakdown
    total_bytes: float


class Prediction(Frozen):
    step_time_s: float
    pipeline_s: float = Field(description="simulated makespan of the schedule")
    dp_sync_s: float = Field(description="data-parallel gradient sync not hidden by compute")
    optimizer_s: float
    tokens_per_s: float
    mfu: float = Field(description="model FLOP/s (no recompute) / peak")
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float = Field(description="counting recomputed forward (Megatron)")
    bubble_fraction: float
    peak_memory_bytes: float
    memory_cap_bytes: float
    margin_bytes: float = Field(description="cap - peak; negative when infeasible")
    feasible: bool
    stages: tuple[StagePrediction, ...]
    ranks: tuple[RankPrediction, ...]


class Plan(Frozen):
    """A chosen configuration with its prediction and a plain-language why."""

    model_name: str
    model_hash: str
    arch: ModelArch | None = Field(default=None, description="the model's shapes, when known")
    gpu: str
    num_gpus: int
    tp: int
    pp: int
    dp: int
    vpp: int
    schedule: ScheduleName
    micro_batch_size: int
    num_microbatches: int
    global_batch_size: int
    seq_length: int
    zero_stage: int
    sequence_parallel: bool
    recompute: RecomputeMode = Field(description="the predominant per-layer mode")
    stages: tuple[StageSpec, ...]
    prediction: Prediction
    why: tuple[str, ...] = ()

    @classmethod
    def build(
        cls,
        request: PlanRequest,
        candidate: Candidate,
        prediction: Prediction,
        *,
        why: tuple[str, ...] = (),
    ) -> Plan:
        """The Plan of a checked candidate (stages filled) and its prediction."""
        if candidate.stages is None:
            raise ValueError(
                "Plan.build needs a candidate with stages (planner.cost.check_candidate)"
            )
        b = request.training.global_batch_size
        return cls(
            model_name=request.model_name,
            model_hash=request.model_hash,
            arch=request.arch,
            gpu=request.cluster.gpu,
            num_gpus=request.cluster.num_gpus,
            tp=candidate.tp,
            pp=candidate.pp,
            dp=candidate.dp,
            vpp=candidate.vpp,
            schedule=candidate.schedule,
            micro_batch_size=candidate.micro_batch_size,
            num_microbatches=candidate.num_microbatches(b),
            global_batch_size=b,
            seq_length=request.training.seq_length,
            zero_stage=candidate.zero_stage,
            sequence_parallel=candidate.sequence_parallel,
            recompute=candidate.recompute,
            stages=candidate.stages,
            prediction=prediction,
            why=why,
        )

    def candidate(self) -> Candidate:
        return Candidate(
            tp=self.tp,
            pp=self.pp,
            dp=self.dp,
            vpp=self.vpp,
            schedule=self.schedule,
            micro_batch_size=self.micro_batch_size,
            zero_stage=self.zero_stage,
            sequence_parallel=self.sequence_parallel,
            recompute=self.recompute,
            stages=self.stages,
        )


class SearchStats(Frozen):
    mode: Literal["optimal", "exhaustive", "evaluate"]
    status: Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN"]
    candidates_considered: int = 0
    candidates_pruned: int = 0
    solver_calls: int = 0
    wall_time_s: float = 0.0
    time_limit_s: float | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class PlanResult(Frozen):
    """What a search returns: `{"plan", "alternatives", "search"}`."""

    plan: Plan
    alternatives: tuple[Plan, ...] = ()
    search: SearchStats
