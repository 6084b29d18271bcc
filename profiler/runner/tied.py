"""Tied input and output embeddings across a pipeline (Megatron's embedding group).

The reference GPT keeps the token embedding (`embedding.tok.weight`, first stage) and the output
projection (`head.proj.weight`, last stage) as two parameters initialised equal. Training them as
one weight means both must receive the sum of their gradients after every backward: an
all-reduce between the pipeline ranks holding the first and the last stage (for each dp x cp x tp
coordinate), or a local sum when one rank holds both (pp = 1, or the V of zbv).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from profiler.runner.mesh import RunMesh
from profiler.runner.split import canonical_name

__all__ = ["EMBEDDING", "OUTPUT", "TiedEmbeddings"]

EMBEDDING = "embedding.tok.weight"
OUTPUT = "head.proj.weight"


class TiedEmbeddings:
    """Keeps the gradients of the tied pair equal. Construct on every rank (creates groups)."""

    def __init__(self, rm: RunMesh, *, first_rank: int, last_rank: int) -> None:
        self._group: dist.ProcessGroup | None = None
        self._pp_ranks = {first_rank, last_rank}
        self._active = rm.pp_rank in self._pp_ranks
        if len(self._pp_ranks) == 1:
            return
        for dp_rank in range(rm.dp):
            for cp_rank in range(rm.cp):
                for tp_rank in range(rm.tp):
                    ranks = sorted(
                        ((p * rm.dp + dp_rank) * rm.cp + cp_rank) * rm.tp + tp_rank
                        for p in self._pp_ranks
                    )
                    group = dist.new_group(ranks)
                    mine = (rm.dp_rank, rm.cp_rank, rm.tp_rank) == (dp_rank, cp_rank, tp_rank)
                    if mine and self._active:
                        self._group = group

    def sync(self, modules: list[nn.Module]) -> None:
        """Give both weights the sum of their gradients."""
        if not self._active:
            return
        found: dict[str, torch.Tensor] = {}
        for module in modules:
            for name, p in module.named_parameters():
                key = canonical_name(name)
                if key in (EMBEDDING, OUTPUT) and p.grad is not None:
                    g = p.grad
                    found[key] = g.to_local() if isinstance(g, DTensor) else g
        if self._group is None:
            if len(found) == 2:
                total = found[EMBEDDING] + found[OUTPUT]
                found[EMBEDDING].copy_(total)
                found[OUTPUT].copy_(total)
            return
        if len(found) != 1:
            raise RuntimeError(
                f"tied embeddings: expected one of {EMBEDDING}, {OUTPUT} with a gradient on "
                f"this rank, found {sorted(found)}"
            )
        dist.all_reduce(next(iter(found.values())), group=self._group)
