"""Expert parallelism for the reference MoE block: all-to-all dispatch and combine.

An expert-parallel group of `ep` ranks splits each MoE layer's E experts into ep contiguous
blocks (rank i holds experts i*E/ep ... (i+1)*E/ep - 1, Megatron-Core's layout) and keeps the
rest of the model whole; each rank routes its own tokens. `AllToAllExperts` is the block's
`MoE.exchange`:

1. the per-expert copy counts go to every rank (`all_to_all_single` of E integers), so each
   rank knows how many rows it receives from each source for each of its experts;
2. dispatch: the copies, already sorted by expert, go to the rank holding their expert
   (`torch.distributed.nn.functional.all_to_all_single`, differentiable: its backward is the
   reverse all-to-all);
3. the received rows are regrouped expert-major (they arrive source-major), run through the
   local experts, and put back source-major;
4. combine: the reverse all-to-all returns every copy's output to the rank that sent it, in
   the order it was sent, where `MoE` weights and sums them.

Both all-to-alls run on gloo (CPU) as on NCCL (`all_to_all_single` with uneven splits).

Gradients (Megatron's "MoE parallel folding" with tp = cp = 1): the dense parameters are data
parallel over the ep x edp ranks and averaged over them; an expert's gradient already sums the
contributions of every token of its ep group (the all-to-all's backward brings them), so it is
summed over its edp replicas and divided by ep x edp: the gradient of the mean loss over all
ranks' tokens (`ExpertParallel.sync_grads`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch import nn

from profiler.models import MoE

__all__ = ["AllToAllExperts", "ExpertParallel", "apply_expert_parallel", "is_expert_param"]


class AllToAllExperts:
    """The exchange of one expert-parallel rank: see the module docstring."""

    def __init__(self, group: dist.ProcessGroup, *, num_experts: int) -> None:
        size = dist.get_world_size(group)
        if num_experts % size:
            raise ValueError(f"ep={size} must divide num_experts={num_experts}")
        self.group = group
        self.size = size
        self.local = num_experts // size
        self.first = dist.get_group_rank(group, dist.get_rank()) * self.local

    def __call__(self, moe: MoE, inputs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        p, n = self.size, self.local
        received_counts = torch.empty_like(counts)
        dist.all_to_all_single(received_counts, counts, group=self.group)
        recv = received_counts.view(p, n).tolist()  # recv[source][local expert]
        send_splits = [int(x) for x in counts.view(p, n).sum(dim=1).tolist()]
        recv_splits = [sum(row) for row in recv]
        received = _all_to_all(inputs, sum(recv_splits), recv_splits, send_splits, self.group)
        pieces = torch.split(received, [c for row in recv for c in row])  # source-major
        grouped = torch.cat([pieces[r * n + j] for j in range(n) for r in range(p)])
        per_expert = torch.tensor([sum(recv[r][j] for r in range(p)) for j in range(n)])
        out = moe.local_experts(grouped, per_expert, first=self.first)
        done = torch.split(out, [recv[r][j] for j in range(n) for r in range(p)])  # expert-major
        back = torch.cat([done[j * p + r] for r in range(p) for j in range(n)])
        return _all_to_all(back, inputs.shape[0], send_splits, recv_splits, self.group)


def _all_to_all(
    x: torch.Tensor,
    rows: int,
    out_splits: list[int],
    in_splits: list[int],
    group: dist.ProcessGroup,
) -> torch.Tensor:
    """Differentiable all-to-all of the rows of x [N, h]: `rows` rows come back."""
    out: torch.Tensor = dist_fn.all_to_all_single(  # type: ignore[no-untyped-call]
        x.new_empty(rows, x.shape[-1]), x.contiguous(), out_splits, in_splits, group=group
    )
    return out


def is_expert_param(name: str) -> bool:
    """Whether a parameter (by its module path) is a routed expert's."""
    return ".experts." in f".{name}"


def apply_expert_parallel(module: nn.Module, group: dist.ProcessGroup) -> None:
    """Keep only this rank's experts in every MoE block inside `module`, and exchange tokens
    with the other ranks of `group` for the others."""
    for block in module.modules():
        if not isinstance(block, MoE):
            continue
        exchange = AllToAllExperts(group, num_experts=block.num_experts)
        mine = range(exchange.first, exchange.first + exchange.local)
        for key in list(block.experts.keys()):
            if int(key) not in mine:
                del block.experts[key]
        block.exchange = exchange


@dataclass(frozen=True)
class ExpertParallel:
    """The groups of expert parallelism folded onto data parallelism (tp = cp = 1).

    `dense_group`: every rank that holds a replica of the dense parameters (ep x edp ranks);
    `edp_group`: the replicas of this rank's experts (None when edp = 1)."""

    dense_group: dist.ProcessGroup
    edp_group: dist.ProcessGroup | None = None

    def sync_grads(self, modules: list[nn.Module]) -> None:
        """Dense gradients averaged over the dense group; expert gradients summed over edp and
        divided by the dense group's size (module docstring)."""
        size = dist.get_world_size(self.dense_group)
        for module in modules:
            for name, p in module.named_parameters():
                if p.grad is None:
                    continue
                if is_expert_param(name):
                    if self.edp_group is not None:
                        dist.all_reduce(p.grad, group=self.edp_group)
                else:
                    dist.all_reduce(p.grad, group=self.dense_group)
                p.grad.div_(size)
