"""The plan's stages as modules, and which of them this pipeline rank runs.

Stage `i` of a plan holds the half-open range `stages[i].layers` of the profile's layer list
`[embedding, decoder.0, ..., decoder.{L-1}, head]` (index 0 is the embedding, L + 1 the head).
A `StageModule` calls its layers in order; the stage holding the head also computes the loss,
so its output is the micro-batch's mean loss and the schedule's `loss_fn` is the identity
(`stage_loss`). Labels reach every stage as the keyword argument `labels` (torch's pipelining
passes keyword arguments to every stage); only the last stage uses them.

Parameter names inside a StageModule are the reference model's own (`embedding.tok.weight`,
`layers.3.attn.q_proj.weight`, `head.proj.weight`): decoder blocks sit in a ModuleDict keyed
by their index in `ReferenceModel.layers`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from planner.plan import Plan
from planner.schedules import stage_to_rank
from planner.specs.base import RecomputeMode

__all__ = [
    "StageLayout",
    "StageModule",
    "canonical_name",
    "local_stages",
    "stage_layout",
    "stage_loss",
]

Transform = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class StageLayout:
    """What one stage holds: whether the embedding and head are in it, and its decoder blocks
    (indices into `ReferenceModel.layers`) with the recompute mode of each layer."""

    index: int
    rank: int
    has_embedding: bool
    has_head: bool
    blocks: tuple[int, ...]
    recompute: dict[int, RecomputeMode]  # profile layer index -> mode, for every layer held


def stage_layout(plan: Plan, *, num_blocks: int | None = None) -> list[StageLayout]:
    """Every stage of the plan, checked to cover the layer list contiguously.

    `num_blocks`: decoder blocks of the model run (default: the plan's `arch.num_layers`).
    """
    if num_blocks is None:
        if plan.arch is None:
            raise ValueError("the plan carries no model shapes (plan.arch is null)")
        num_blocks = plan.arch.num_layers
    num_layers = num_blocks + 2
    expected = plan.pp * plan.vpp
    if len(plan.stages) != expected:
        raise ValueError(
            f"plan has {len(plan.stages)} stages, expected pp({plan.pp}) * vpp({plan.vpp}) "
            f"= {expected}"
        )
    out: list[StageLayout] = []
    cursor = 0
    for i, spec in enumerate(plan.stages):
        first, end = spec.layers
        if first != cursor:
            raise ValueError(
                f"stages[{i}].layers=[{first}, {end}) does not start where stage {i - 1} "
                f"ended ({cursor})"
            )
        cursor = end
        modes = spec.recompute or (plan.predominant_recompute,) * (end - first)
        out.append(
            StageLayout(
                index=i,
                rank=stage_to_rank(i, pp=plan.pp, schedule=plan.schedule),
                has_embedding=first == 0,
                has_head=end == num_layers,
                blocks=tuple(j - 1 for j in range(max(first, 1), min(end, num_layers - 1))),
                recompute={first + k: m for k, m in enumerate(modes)},
            )
        )
    if cursor != num_layers:
        raise ValueError(
            f"stages end at layer {cursor} but the model has {num_layers} layers "
            f"(embedding, {num_blocks} decoder blocks, head)"
        )
    return out


def local_stages(plan: Plan, pp_rank: int, *, num_blocks: int | None = None) -> list[StageLayout]:
    """The stages pipeline rank `pp_rank` runs, in stage order (looped, or a V for zbv)."""
    return [s for s in stage_layout(plan, num_blocks=num_blocks) if s.rank == pp_rank]


class StageModule(nn.Module):
    """embedding? -> blocks -> head? ; the last stage returns the mean loss.

    `scatter` runs after the embedding and `gather` before the head (sequence parallel:
    split the sequence over tp ranks, and gather it back)."""

    def __init__(
        self,
        *,
        embedding: nn.Module | None,
        blocks: dict[int, nn.Module],
        head: nn.Module | None,
        scatter: Transform | None = None,
        gather: Transform | None = None,
    ) -> None:
        super().__init__()
        self.embedding = embedding
        self.layers = nn.ModuleDict({str(i): b for i, b in blocks.items()})
        self.head = head
        self._scatter = scatter
        self._gather = gather

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x)
            if self._scatter is not None:
                x = self._scatter(x)
        for block in self.layers.values():
            x = block(x)
        if self.head is not None:
            if labels is None:
                raise ValueError("the last stage needs the keyword argument 'labels'")
            if self._gather is not None:
                x = self._gather(x)
            loss: torch.Tensor = self.head(x, labels)
            return loss
        return x


def stage_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The schedule's loss_fn: the last stage already returns the micro-batch's mean loss."""
    del target
    return output


def canonical_name(name: str) -> str:
    """A parameter name without the wrappers' prefixes (DDP `module.`, checkpoint wrapper)."""
    parts = [p for p in name.split(".") if p not in ("module", "_checkpoint_wrapped_module")]
    return ".".join(parts)
