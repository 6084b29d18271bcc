"""Static memory (parameters, gradients, optimizer state) per ZeRO stage, DP gradient sync,
the optimizer step, and communication buffers.

ZeRO paper (Rajbhandari et al. 2020, §3.1, Table 1), Psi parameters on one GPU, K optimizer
bytes per parameter (12 for mixed-precision Adam), d the data-parallel degree:
    stage 0: 2Psi + 2Psi + K*Psi          (= 16 Psi for Adam)
    stage 1: 2Psi + 2Psi + K*Psi/d
    stage 2: 2Psi + (2 + K)*Psi/d
    stage 3: (2 + 2 + K)*Psi/d
(2 = bytes per bf16/fp16 element; 4 for fp32, where K drops the master copy.)

Activations per rank: the peak over the rank's simulated timeline (rank_activation_peak), with
the transients of the running action on top (MemoryTerms).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from planner.cost.comm import Link, all_reduce_s
from planner.schedules.inflight import HeldPoint
from planner.schedules.ir import ActionKind
from planner.specs.training import TrainingSpec


@dataclass(frozen=True)
class MemoryTerms:
    """Which bytes beyond the saved activations the cost model charges a rank near its peak.

    `recompute_transient`: while a checkpointed layer runs its backward, its forward has been
    recomputed, so its activations exist again on top of what the checkpoint keeps: one
    layer's act(none) - act(mode), the largest over the recomputed layers of the running stage
    (Korthikanti et al. 2022, §4: full recompute keeps the layer inputs, 2sbh per layer, "and
    the activations of one layer are recomputed during its backward"; torch's
    `torch.utils.checkpoint` re-runs the region's forward inside its backward).
    `loss_temporary`: the loss over the vocabulary materialises one more fp32 logits tensor
    than it saves, 4*s*b*V/t bytes (the cast or softmax in the forward, the logits' gradient in
    the backward; REFERENCE.md, Korthikanti 2022 §4.3: the fp32 logits 4sbV/t are saved), while
    the last stage's F and B run.
    `fragmentation_fraction`: the caching allocator's reserve: PyTorch's CUDA caching allocator
    rounds blocks up and cannot merge free pieces of different segments, so reserved memory
    exceeds allocated memory ("CUDA semantics: memory management", torch.cuda.memory_stats
    reserved vs allocated; up to 43 % with virtual pipelines and recompute, arXiv 2507.16274).
    Charged as this fraction of the rank's peak dynamic bytes (activations + transient).
    Default 0: no measured fraction exists for a workload before it runs; the request's
    `memory_reserve_gib` is the fixed reserve, this one scales with the activations.
    """

    recompute_transient: bool = True
    loss_temporary: bool = True
    fragmentation_fraction: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.fragmentation_fraction < 1.0:
            raise ValueError(
                f"fragmentation_fraction={self.fragmentation_fraction} must be in [0, 1)"
            )


DEFAULT_MEMORY_TERMS = MemoryTerms()


def loss_temporary_bytes(
    *, seq_length: int, micro_batch_size: int, vocab_size: int, tp: int
) -> float:
    """One fp32 logits tensor of one micro-batch on one tensor-parallel rank: 4*s*b*V/t
    (MemoryTerms.loss_temporary)."""
    return 4.0 * seq_length * micro_batch_size * vocab_size / tp


class RankPeak(NamedTuple):
    """A rank's dynamic bytes at its peak point (rank_activation_peak); a named tuple, as
    every score builds one per rank."""

    activations_bytes: float  # saved activations held at that point
    transient_bytes: float  # the running action's transient (recompute, loss)
    fragmentation_bytes: float  # fraction x (activations + transient)
    point: HeldPoint | None

    @property
    def total_bytes(self) -> float:
        return self.activations_bytes + self.transient_bytes + self.fragmentation_bytes


def point_transient_bytes(
    point: HeldPoint, *, recompute_bytes: Sequence[float], loss_stage: int, loss_bytes: float
) -> float:
    """The transient of the action at `point`: its stage's recompute transient in a backward
    (B or I), the loss temporary in the loss stage's F and backward, the larger of the two when
    both apply (the head's backward, which holds the loss gradient, ends before the stage's
    recomputed layers run theirs); nothing in a W."""
    if point.phase is ActionKind.W:
        return 0.0
    loss = loss_bytes if point.stage == loss_stage else 0.0
    if point.phase is ActionKind.F:
        return loss
    return max(loss, recompute_bytes[point.stage])


def rank_activation_peak(
    points: Sequence[HeldPoint],
    stages: Sequence[int],
    stage_bytes: Sequence[float],
    *,
    recompute_bytes: Sequence[float],
    loss_stage: int,
    loss_bytes: float,
    fragmentation_fraction: float,
) -> RankPeak:
    """The rank's largest dynamic footprint over its timeline: over the held points of its
    actions (planner.schedules.rank_held_points), sum_j counts[j] * stage_bytes[stages[j]]
    (one micro-batch's saved activations per stage) + the action's transient
    (point_transient_bytes), times 1 + fragmentation_fraction. A point whose total count x
    the largest stage bytes + the largest transient cannot beat the best so far is skipped."""
    rank_bytes = [stage_bytes[s] for s in stages]
    width = len(rank_bytes)
    many = len(points) > 4  # then skip the points that cannot beat the best so far
    most = max(rank_bytes) if many else 0.0
    extra_most = max(loss_bytes, *(recompute_bytes[s] for s in stages)) if many else 0.0
    top, held_top, extra_top, best = -1.0, 0.0, 0.0, None
    for p in points:
        if many and p.total * most + extra_most <= top:
            continue
        c = p.counts
        if width == 1:
            held = c[0] * rank_bytes[0]
        elif width == 2:
            held = c[0] * rank_bytes[0] + c[1] * rank_bytes[1]
        else:
            held = sum(map(operator.mul, c, rank_bytes))
        # point_transient_bytes, inlined (this loop runs for every rank of every score)
        if p.phase is ActionKind.W:
            extra = 0.0
        else:
            extra = loss_bytes if p.stage == loss_stage else 0.0
            if p.phase is ActionKind.B and recompute_bytes[p.stage] > extra:
                extra = recompute_bytes[p.stage]
        if held + extra > top:
            top, held_top, extra_top, best = held + extra, held, extra, p
    return RankPeak(held_top, extra_top, fragmentation_fraction * max(top, 0.0), best)


@dataclass(frozen=True)
class StaticBytes:
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes

    def plus(self, other: StaticBytes) -> StaticBytes:
        """Both groups' bytes (dense and expert parameters, each sharded over its group)."""
        return StaticBytes(
            self.params_bytes + other.params_bytes,
            self.grads_bytes + other.grads_bytes,
            self.optimizer_bytes + other.optimizer_bytes,
        )


def static_bytes(
    param_count: float, *, training: TrainingSpec, zero_stage: int, dp: int
) -> StaticBytes:
    """Parameters, gradients and optimizer state of `param_count` parameters on one GPU."""
    w = training.dtype_bytes
    k = training.optimizer_state_bytes
    p = param_count
    return StaticBytes(
        params_bytes=w * p / (dp if zero_stage >= 3 else 1),
        grads_bytes=w * p / (dp if zero_stage >= 2 else 1),
        optimizer_bytes=k * p / (dp if zero_stage >= 1 else 1),
    )


def dp_sync_s(
    param_count: float, *, training: TrainingSpec, zero_stage: int, dp: int, link: Link
) -> float:
    """Gradient synchronisation of `param_count` parameters across the DP group, no overlap.

    Ring all-reduce of the gradients: 2(d-1)/d * S / bandwidth (NCCL doc/PERFORMANCE.md).
    ZeRO-1/2 reduce-scatter the gradients and all-gather the parameters: the same volume.
    ZeRO-3 also all-gathers parameters in the backward: 1.5x (ZeRO paper §7).
    We model no overlap with the backward (Megatron-LM 2021 all-reduces after the last
    micro-batch's backward), so this is an upper bound where frameworks overlap buckets.
    The latency term is left out: gradients travel in large buckets, and this time is summed
    per layer.
    """
    if dp <= 1 or param_count <= 0:
        return 0.0
    grad_bytes = param_count * training.dtype_bytes
    factor = 1.5 if zero_stage >= 3 else 1.0
    return factor * (all_reduce_s(grad_bytes, group=dp, link=link) - link.latency_s)


def optimizer_step_bytes(
    param_count: float, *, training: TrainingSpec, zero_stage: int, dp: int
) -> float:
    """HBM bytes an optimizer step touches: read state + gradient, write state + parameter.

    Memory-bound (an element-wise update): 2 * (K + w) bytes per parameter this GPU updates
    (28 for Adam in bf16); ZeRO >= 1 updates 1/d of them.
    """
    per_param = 2.0 * (training.optimizer_state_bytes + training.dtype_bytes)
    shard = dp if zero_stage >= 1 else 1
    return per_param * param_count / shard


def buffer_bytes(*, boundary_bytes: float, full_activation_bytes: float, pp: int, tp: int) -> float:
    """Communication buffers on one GPU.

    Pipeline (pp > 1): 4 boundary tensors -- send and receive, activations and gradients
    (Megatron's p2p_communication keeps one of each in flight in the 1F1B steady state).
    Tensor parallel (tp > 1): one full s*b*h activation as the all-reduce / all-gather workspace.
    """
    pipe = 4.0 * boundary_bytes if pp > 1 else 0.0
    tensor = full_activation_bytes if tp > 1 else 0.0
    return pipe + tensor
