"""Tensor parallel, recompute and data parallel applied to the modules of one stage.

- Tensor parallel: torch's `parallelize_module` with the block plan `profiler.models.TP_PLAN`
  (ColwiseParallel on q/k/v and the first MLP projections, RowwiseParallel on o_proj and the last
  MLP projection). The embedding and the head are replicated over the tp group. With sequence
  parallel, the norms take `SequenceParallel`, attention and MLP gather the sequence on entry
  (`PrepareModuleInput`) and the row-parallel projections reduce-scatter it on exit
  (`output_layouts=Shard(1)`); the first stage scatters the embedding output over the sequence
  and the last stage gathers it before the head (`sequence_scatter`, `sequence_gather`).
- Recompute: `profiler.models.set_recompute` per layer, as planned (full wraps the block with
  `checkpoint_wrapper`; selective checkpoints the attention core).
- Data parallel: ZeRO 0 uses DDP (`PipelineDDP`: its forward never arms the reducer, the
  pipeline stage does, before its last backward) where tp == 1 and the schedule has no split
  backward; otherwise the gradients are averaged over the dp group after the step with one
  bucketed all-reduce (`allreduce_grads`: DDP's arithmetic without its overlap). ZeRO >= 1
  shards with FSDP2 `fully_shard` over the dp axis (parameters, gradients and optimizer state:
  ZeRO-3's layout; `reshard_after_forward=False` for ZeRO 1/2, which keeps the gathered
  parameters between forward and backward).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.nn.parallel import DistributedDataParallel

from planner.specs.base import RecomputeMode, ScheduleName
from profiler.models import TP_PLAN, set_recompute

__all__ = [
    "PipelineDDP",
    "allreduce_grads",
    "apply_recompute",
    "apply_tp",
    "sequence_gather",
    "sequence_scatter",
    "uses_ddp",
    "wrap_dp",
]

SPLIT_BACKWARD: frozenset[ScheduleName] = frozenset({"zb-h1", "zbv"})


def apply_tp(
    block: nn.Module, tp_mesh: DeviceMesh, *, family: str, sequence_parallel: bool
) -> None:
    """Shard one decoder block over the tp mesh, in place."""
    plan: dict[str, ParallelStyle] = {}
    for name, style in TP_PLAN[family].items():
        if style == "colwise":
            plan[name] = ColwiseParallel()
        elif sequence_parallel:
            plan[name] = RowwiseParallel(output_layouts=Shard(1))
        else:
            plan[name] = RowwiseParallel()
    if sequence_parallel:
        gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        plan.update(
            {
                "attn_norm": SequenceParallel(),
                "mlp_norm": SequenceParallel(),
                "attn": gather,
                "mlp": PrepareModuleInput(
                    input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
                ),
            }
        )
    parallelize_module(block, tp_mesh, plan)


def sequence_scatter(tp_mesh: DeviceMesh) -> Callable[[torch.Tensor], torch.Tensor]:
    """[b, s, h] replicated -> this rank's [b, s/tp, h] (backward: all-gather of the grads)."""

    def scatter(x: torch.Tensor) -> torch.Tensor:
        d = DTensor.from_local(x, tp_mesh, [Replicate()], run_check=False)
        return d.redistribute(tp_mesh, [Shard(1)]).to_local()

    return scatter


def sequence_gather(tp_mesh: DeviceMesh) -> Callable[[torch.Tensor], torch.Tensor]:
    """This rank's [b, s/tp, h] -> the whole [b, s, h] (backward: this rank's slice)."""

    def gather(x: torch.Tensor) -> torch.Tensor:
        d = DTensor.from_local(x, tp_mesh, [Shard(1)], run_check=False)
        return d.redistribute(tp_mesh, [Replicate()]).to_local()

    return gather


def apply_recompute(block: nn.Module, mode: RecomputeMode) -> nn.Module:
    """The module to call for a layer with this recompute mode."""
    return set_recompute(block, mode)


def uses_ddp(*, tp: int, dp: int, zero_stage: int, schedule: ScheduleName) -> bool:
    return dp > 1 and zero_stage == 0 and tp == 1 and schedule not in SPLIT_BACKWARD


def wrap_dp(module: nn.Module, *, dp_mesh: DeviceMesh, zero_stage: int, ddp: bool) -> nn.Module:
    """The stage module as data parallel wraps it (itself when dp sync is done by hand)."""
    if zero_stage >= 1:
        fully_shard(module, mesh=dp_mesh, reshard_after_forward=zero_stage >= 3)
        return module
    if ddp:
        return PipelineDDP(module, process_group=dp_mesh.get_group())
    return module


class PipelineDDP(DistributedDataParallel):
    """DDP whose forward never arms the reducer: under torch's pipelining the stage arms it.

    DDP expects one `prepare_for_backward` per iteration, then one backward that reaches every
    parameter; a forward with grad enabled outside `no_sync()` arms it. `PipelineStage` runs
    the micro-batch forwards and every backward but the stage's last under `no_sync()`, and
    before that last backward calls `reducer.prepare_for_backward` itself. But on its first
    step it also runs a metadata-inference forward of the stage with grad enabled and outside
    `no_sync()`, whose backward never reaches the parameters: the reducer stays armed, the
    first real backward all-reduces and records every parameter for the bucket rebuild, the
    last backward records them again, and the next forward fails DDP's size check. Running
    every forward as under `no_sync()` leaves the stage's own call the only arming: one per
    step, right before the backward that completes the accumulated gradients.
    """

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        with self.no_sync():
            return super().forward(*inputs, **kwargs)  # type: ignore[no-untyped-call]


def allreduce_grads(params: Iterable[nn.Parameter], group: dist.ProcessGroup) -> None:
    """Average gradients over `group` with one flat all-reduce (tp-sharded ones: local shards)."""
    grads: list[torch.Tensor] = []
    for p in params:
        if p.grad is None:
            continue
        g = p.grad
        grads.append(g.to_local() if isinstance(g, DTensor) else g)
    if not grads:
        return
    size = dist.get_world_size(group)
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for g in grads:
        by_dtype.setdefault(g.dtype, []).append(g)
    for bucket in by_dtype.values():
        flat = torch.cat([g.reshape(-1) for g in bucket])
        dist.all_reduce(flat, group=group)
        flat.div_(size)
        offset = 0
        for g in bucket:
            n = g.numel()
            g.copy_(flat[offset : offset + n].view_as(g))
            offset += n
