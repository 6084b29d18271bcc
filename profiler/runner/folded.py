"""Context and expert parallelism in the plan runner (docs/moe.md, "Folding the degrees").

With tp = 1 (the runner's limit for these degrees) a pipeline stage's D = dp x cp ranks hold
the same dense parameters. Context parallel groups are the mesh's "cp" axis (consecutive
ranks inside a dp replica). Expert groups follow Megatron-Core's expert order (etp = 1, then
ep, then edp, then pp): inside a stage's D ranks, numbered j = dp_rank x cp + cp_rank, the ep
group of j is the ep consecutive j's around it and its edp group the j's with the same j mod
ep. Gradients: `ExpertParallel(dense group = the D ranks, edp group).sync_grads`, which
averages dense gradients over dp x cp (cp folded into data parallel) and sums each expert's
over its edp replicas before dividing by D (profiler/runner/expert.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from planner.plan import Plan
from profiler.runner.context import apply_context_parallel, shard_sequence
from profiler.runner.expert import ExpertParallel, apply_expert_parallel
from profiler.runner.mesh import RunMesh

__all__ = ["Folded", "check_folded", "folded_groups"]


def check_folded(plan: Plan) -> None:
    """The runner's limits for cp and ep (planner/launch/frameworks/meshplan.py says them)."""
    if plan.cp == 1 and plan.ep == 1:
        return
    if plan.tp > 1 or plan.zero_stage > 0 or plan.etp > 1 or plan.cp_comm != "p2p":
        raise ValueError(
            f"cp={plan.cp}, ep={plan.ep}: the runner runs them with tp=1, zero_stage=0, "
            f"etp=1 and cp_comm='p2p' (the plan has tp={plan.tp}, zero_stage="
            f"{plan.zero_stage}, etp={plan.etp}, cp_comm={plan.cp_comm!r})"
        )


@dataclass(frozen=True)
class Folded:
    """This rank's context and expert parallel groups (None where the degree is 1)."""

    plan: Plan
    cp_rank: int
    cp_group: dist.ProcessGroup | None
    ep_group: dist.ProcessGroup | None
    sync: ExpertParallel

    def apply(self, module: nn.Module) -> None:
        """Make a stage module run on this rank's sequence chunks and experts."""
        if self.cp_group is not None:
            apply_context_parallel(module, self.cp_group, seq_length=self.plan.seq_length)
        if self.ep_group is not None:
            apply_expert_parallel(module, self.ep_group)

    def shard(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's tokens of a [b, s] batch."""
        if self.cp_group is None:
            return x
        return shard_sequence(x, cp=self.plan.cp, rank=self.cp_rank)

    def sync_grads(self, modules: list[nn.Module]) -> None:
        self.sync.sync_grads(modules)


def folded_groups(plan: Plan, rm: RunMesh) -> Folded:
    """Every rank calls this (new_group is collective), in the same order."""
    d = plan.dp * plan.cp
    dense = edp = ep_group = None
    for stage in range(plan.pp):
        ranks = [stage * d + j for j in range(d)]
        group = dist.new_group(ranks)
        if rm.rank in ranks:
            dense = group
        for first in range(0, d, plan.ep):
            group = dist.new_group(ranks[first : first + plan.ep])
            if rm.rank in ranks[first : first + plan.ep]:
                ep_group = group
        for offset in range(plan.ep):
            group = dist.new_group(ranks[offset :: plan.ep])
            if rm.rank in ranks[offset :: plan.ep]:
                edp = group
    assert dense is not None and edp is not None and ep_group is not None
    return Folded(
        plan=plan,
        cp_rank=rm.cp_rank,
        cp_group=rm.cp_group if plan.cp > 1 else None,
        ep_group=ep_group if plan.ep > 1 else None,
        sync=ExpertParallel(dense_group=dense, edp_group=edp),
    )
