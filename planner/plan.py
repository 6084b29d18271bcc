"""The Plan (DESIGN.md, contract 4) and the predictions the cost model makes for a candidate."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from planner.specs.base import (
    RECOMPUTE_MODES,
    CpComm,
    Frozen,
    RecomputeMode,
    ScheduleName,
    check_expert_grid,
)
from planner.specs.model import ModelArch
from planner.specs.request import Candidate, PlanRequest, StageSpec


def recompute_summary(
    modes: Sequence[RecomputeMode],
) -> tuple[RecomputeMode | Literal["mixed"], dict[RecomputeMode, int]]:
    """(the mode of every decoder block or 'mixed', blocks per mode) of a model's per-layer
    modes, layer 0 (the embedding) and the last layer (the head) left out.

    >>> recompute_summary(["none", "selective", "none", "selective", "none"])
    ('mixed', {'none': 1, 'selective': 2})
    """
    blocks = list(modes[1:-1]) if len(modes) > 2 else list(modes)
    counts = Counter(blocks)
    summary: RecomputeMode | Literal["mixed"] = blocks[0] if len(counts) == 1 else "mixed"
    return summary, {m: counts[m] for m in RECOMPUTE_MODES if counts[m]}


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


def _is_one(value: object) -> bool:
    return value == 1


class Plan(Frozen):
    """A chosen configuration with its prediction and a plain-language why.

    Context and expert parallelism follow Megatron-Core's "MoE parallel folding" (docs/moe.md):
    attention and dense layers use tp x cp x dp x pp GPUs, expert layers etp x ep x edp x pp on
    the same GPUs, with etp x ep x edp = tp x cp x dp. `cp`, `ep` and `etp` default to 1 (and
    `cp_comm` to the p2p ring) and are left out of the JSON then, so plans stored before they
    existed load and dump unchanged. Plan.build carries them from the candidate and
    candidate() gives them back.
    """

    model_name: str
    model_hash: str
    arch: ModelArch | None = Field(default=None, description="the model's shapes, when known")
    gpu: str
    num_gpus: int
    tp: int
    pp: int
    dp: int
    cp: int = Field(
        default=1,
        ge=1,
        exclude_if=_is_one,
        description="context parallel: each rank holds 2 of the 2 cp chunks of every sequence",
    )
    cp_comm: CpComm = Field(
        default="p2p",
        exclude_if=lambda v: v == "p2p",
        description="how cp ranks exchange K/V: a ring of p2p sends, or an all-gather",
    )
    ep: int = Field(
        default=1,
        ge=1,
        exclude_if=_is_one,
        description="expert parallel: num_experts / ep routed experts on each rank",
    )
    etp: int = Field(
        default=1,
        ge=1,
        exclude_if=_is_one,
        description="tensor parallel inside each expert (expert layers only)",
    )
    vpp: int
    schedule: ScheduleName
    micro_batch_size: int
    num_microbatches: int
    global_batch_size: int
    seq_length: int
    zero_stage: int
    sequence_parallel: bool
    recompute: RecomputeMode | Literal["mixed"] = Field(
        description="the recompute mode of every decoder block (layers 1 .. n-2; the embedding "
        "and head are in `stages`), or 'mixed' when the blocks differ"
    )
    recompute_blocks: dict[RecomputeMode, int] = Field(
        default_factory=dict, description="decoder blocks per recompute mode"
    )
    gpus_per_node: int | None = Field(
        default=None,
        description="GPUs per node of the cluster the plan was made for (None: not recorded)",
    )
    stages: tuple[StageSpec, ...]
    prediction: Prediction
    why: tuple[str, ...] = ()
    calibration_id: str | None = Field(
        default=None, description="the calibration the cost model used (None: the defaults)"
    )

    @model_validator(mode="before")
    @classmethod
    def _summarise_recompute(cls, data: Any) -> Any:
        """`recompute` and `recompute_blocks` always describe the stages' per-layer modes.

        A stage without a per-layer list gets `recompute` on every layer (the rule of a
        Candidate). Plans stored before the summary existed said the search's predominant mode
        (e.g. 'none' with 46 of 96 blocks 'selective'); they are summarised again on load.
        """
        if not isinstance(data, dict) or not isinstance(data.get("stages"), list | tuple):
            return data
        try:
            stages = [StageSpec.model_validate(s) for s in data["stages"]]
        except ValueError:
            return data  # the field's own validation reports it
        default = data.get("recompute")
        if any(s.recompute is None for s in stages):
            if default not in RECOMPUTE_MODES:
                return data  # `_check_recompute` names the stage
            stages = [
                s
                if s.recompute is not None
                else s.model_copy(update={"recompute": (default,) * s.num_layers})
                for s in stages
            ]
        summary, blocks = recompute_summary([m for s in stages for m in s.recompute or ()])
        return {**data, "stages": stages, "recompute": summary, "recompute_blocks": blocks}

    @model_validator(mode="after")
    def _check_recompute(self) -> Plan:
        for i, s in enumerate(self.stages):
            if s.recompute is None:
                raise ValueError(
                    f"stages[{i}] (layers [{s.layers[0]}, {s.layers[1]})) has no per-layer "
                    f"recompute, and recompute={self.recompute!r} names no single mode"
                )
        return self

    @model_validator(mode="after")
    def _check_folding(self) -> Plan:
        """Megatron-Core's folding rules (docs/moe.md; megatron/core/parallel_state.py
        `initialize_model_parallel`: the expert grid etp x ep x edp x pp tiles the world the
        attention grid tp x cp x dp x pp does; megatron/core/transformer/moe/moe_layer.py:
        num_experts % ep == 0)."""
        check_expert_grid(tp=self.tp, cp=self.cp, dp=self.dp, ep=self.ep, etp=self.etp)
        moe = self.arch.moe if self.arch is not None else None
        if moe is None and (self.ep > 1 or self.etp > 1):
            what = "no arch" if self.arch is None else f"arch {self.arch.display_name} has no moe"
            raise ValueError(
                f"ep={self.ep}, etp={self.etp}: expert parallelism needs a model with moe "
                f"layers ({what})"
            )
        if moe is not None and moe.num_experts % self.ep:
            raise ValueError(
                f"ep={self.ep} must divide moe.num_experts={moe.num_experts} "
                f"(remainder {moe.num_experts % self.ep})"
            )
        if self.cp > 1 and self.seq_length % (2 * self.cp):
            raise ValueError(
                f"cp={self.cp}: seq_length={self.seq_length} must split into 2*cp = "
                f"{2 * self.cp} equal chunks (remainder {self.seq_length % (2 * self.cp)})"
            )
        return self

    @property
    def edp(self) -> int:
        """Expert data parallel: the replicas of each expert, tp*cp*dp / (etp*ep)."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    @property
    def world_size(self) -> int:
        """GPUs the degrees use: tp*cp*pp*dp."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def predominant_recompute(self) -> RecomputeMode:
        """The mode of most decoder blocks (the first of equals in none, selective, full)."""
        if self.recompute != "mixed":
            return self.recompute
        return max(RECOMPUTE_MODES, key=lambda m: self.recompute_blocks.get(m, 0))

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
            cp=candidate.cp,
            cp_comm=candidate.cp_comm,
            ep=candidate.ep,
            etp=candidate.etp,
            vpp=candidate.vpp,
            schedule=candidate.schedule,
            micro_batch_size=candidate.micro_batch_size,
            num_microbatches=candidate.num_microbatches(b),
            global_batch_size=b,
            seq_length=request.training.seq_length,
            zero_stage=candidate.zero_stage,
            sequence_parallel=candidate.sequence_parallel,
            recompute=candidate.recompute,
            gpus_per_node=request.cluster.gpus_per_node,
            stages=candidate.stages,
            prediction=prediction,
            why=why,
            calibration_id=request.calibration.id if request.calibration is not None else None,
        )

    def candidate(self) -> Candidate:
        return Candidate(
            tp=self.tp,
            pp=self.pp,
            dp=self.dp,
            cp=self.cp,
            cp_comm=self.cp_comm,
            ep=self.ep,
            etp=self.etp,
            vpp=self.vpp,
            schedule=self.schedule,
            micro_batch_size=self.micro_batch_size,
            zero_stage=self.zero_stage,
            sequence_parallel=self.sequence_parallel,
            recompute=self.predominant_recompute,
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
    lower_bound_s: float | None = Field(
        default=None,
        description="proven: no plan of the searched space is faster (objective time); for "
        "objective bubble, no plan with the incumbent's bubble is faster (docs/search.md)",
    )
    gap: float | None = Field(
        default=None,
        description="step time / lower_bound_s - 1 (objective time); OPTIMAL iff within the "
        "proof tolerance. Objective bubble: see docs/search.md, Gap and status",
    )
    gap_tolerance: float = Field(default=0.0, description="the request's search.gap_tolerance")
    alternatives_requested: int = 0
    alternatives_note: str | None = Field(
        default=None, description="why fewer than top_k alternatives came back (None: all did)"
    )
    details: dict[str, Any] = Field(default_factory=dict)


class PlanResult(Frozen):
    """What a search returns: `{"plan", "alternatives", "search"}`."""

    plan: Plan
    alternatives: tuple[Plan, ...] = ()
    search: SearchStats
