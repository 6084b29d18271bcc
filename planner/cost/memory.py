"""Static memory (parameters, gradients, optimizer state) per ZeRO stage, DP gradient sync,
the optimizer step, and communication buffers.

ZeRO paper (Rajbhandari et al. 2020, §3.1, Table 1), Psi parameters on one GPU, K optimizer
bytes per parameter (12 for mixed-precision Adam), d the data-parallel degree:
    stage 0: 2Psi + 2Psi + K*Psi          (= 16 Psi for Adam)
    stage 1: 2Psi + 2Psi + K*Psi/d
    stage 2: 2Psi + (2 + K)*Psi/d
    stage 3: (2 + 2 + K)*Psi/d
(2 = bytes per bf16/fp16 element; 4 for fp32, where K drops the master copy.)
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost.comm import Link, all_reduce_s
from planner.specs.training import TrainingSpec


@dataclass(frozen=True)
class StaticBytes:
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes


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
