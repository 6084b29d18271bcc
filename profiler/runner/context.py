"""Context parallelism for the reference models: load-balanced causal chunks, ring attention.

The sequence of s tokens is cut into 2 * cp chunks of s / (2 cp); rank r of the cp group holds
chunks r and 2cp - 1 - r (`chunk_positions`), so every rank has the same causal work (Megatron's
load-balanced split; Liu et al. 2023, Ring Attention, and Megatron-Core's context parallel
docs). Everything but attention is token-wise and runs on the local tokens; rotary (and gpt's
learned positions) take the tokens' global positions.

Attention (`RingAttention`, set as every `Attention.exchange`): the K/V of the local chunks go
round the ring (each step sends to rank r + 1 and receives from r - 1 over p2p, cp - 1 steps;
`_ring_pass` is differentiable: its backward sends the gradient the other way). For each local
query chunk i and each key/value chunk j seen: j < i attends fully, j = i causally, j > i not at
all. The partial results merge by their log-sum-exp (the online softmax of flash attention:
out = sum_j exp(lse_j - lse) out_j, lse = log sum_j exp(lse_j)), so the result equals causal
attention over the whole sequence. The scores are materialised per chunk pair in the model's
dtype: a reference for gradients, not a fast kernel.

Gradients: the cp ranks hold the same parameters and each sees s / cp of every sequence; cp
folds into the data-parallel group (Megatron): the gradients are averaged over it (`sync_grads`),
which with equal local token counts is the gradient of the mean loss over all tokens.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from profiler.models import Attention, Embedding

__all__ = [
    "RingAttention",
    "apply_context_parallel",
    "chunk_positions",
    "shard_sequence",
    "sync_grads",
]


def chunk_positions(seq_length: int, *, cp: int, rank: int) -> torch.Tensor:
    """Global positions held by cp rank `rank`: chunks rank and 2cp - 1 - rank, in order."""
    if seq_length % (2 * cp):
        raise ValueError(
            f"seq_length={seq_length} must be a multiple of 2 * cp = {2 * cp} (2 chunks a rank)"
        )
    c = seq_length // (2 * cp)
    first, second = rank, 2 * cp - 1 - rank
    return torch.cat(
        (torch.arange(first * c, (first + 1) * c), torch.arange(second * c, (second + 1) * c))
    )


def shard_sequence(x: torch.Tensor, *, cp: int, rank: int) -> torch.Tensor:
    """This rank's tokens of a [b, s, ...] batch (dim 1 is the sequence)."""
    return x[:, chunk_positions(x.shape[1], cp=cp, rank=rank)]


class _RingPass(torch.autograd.Function):
    """Send x to the next rank of the ring, receive the previous rank's; backward reversed."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.group = group
        return _exchange(x.contiguous(), group, step=1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _exchange(grad.contiguous(), ctx.group, step=-1), None


def _exchange(x: torch.Tensor, group: dist.ProcessGroup, *, step: int) -> torch.Tensor:
    size = dist.get_world_size(group)
    me = dist.get_group_rank(group, dist.get_rank())
    to = dist.get_global_rank(group, (me + step) % size)
    source = dist.get_global_rank(group, (me - step) % size)
    out = torch.empty_like(x)
    ops = [dist.P2POp(dist.isend, x, to, group), dist.P2POp(dist.irecv, out, source, group)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return out


def _ring_pass(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    out: torch.Tensor = _RingPass.apply(x, group)  # type: ignore[no-untyped-call]
    return out


def _partial(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of q [b, a, c, d] over k, v [b, g, c, d] (grouped heads shared)."""
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        c = q.shape[-2]
        mask = torch.ones(c, c, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.exp(scores - lse.unsqueeze(-1)) @ v, lse


class RingAttention:
    """Causal attention of the local chunks over the whole sequence (module docstring)."""

    def __init__(self, group: dist.ProcessGroup) -> None:
        self.group = group
        self.cp = dist.get_world_size(group)
        self.rank = dist.get_group_rank(group, dist.get_rank())

    def _chunks(self, rank: int) -> tuple[int, int]:
        return rank, 2 * self.cp - 1 - rank

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        kv = torch.stack((k, v))
        seen = [(self.rank, kv)]
        for step in range(1, self.cp):
            kv = _ring_pass(kv, self.group)
            seen.append(((self.rank - step) % self.cp, kv))
        q_chunks = q.chunk(2, dim=-2)
        outs = []
        for qi, q_chunk in zip(self._chunks(self.rank), q_chunks, strict=True):
            parts = []
            for src, block in seen:
                for kj, k_chunk, v_chunk in zip(
                    self._chunks(src),
                    block[0].chunk(2, dim=-2),
                    block[1].chunk(2, dim=-2),
                    strict=True,
                ):
                    if kj <= qi:
                        parts.append(_partial(q_chunk, k_chunk, v_chunk, causal=kj == qi))
            lse = torch.logsumexp(torch.stack([p[1] for p in parts]), dim=0)
            out = sum(torch.exp(p[1] - lse).unsqueeze(-1) * p[0] for p in parts)
            assert isinstance(out, torch.Tensor)
            outs.append(out)
        return torch.cat(outs, dim=-2)


def apply_context_parallel(module: nn.Module, group: dist.ProcessGroup, *, seq_length: int) -> None:
    """Make every attention (and gpt position embedding) inside `module` run on this rank's
    chunks of a `seq_length` sequence split over `group`."""
    cp = dist.get_world_size(group)
    rank = dist.get_group_rank(group, dist.get_rank())
    positions = chunk_positions(seq_length, cp=cp, rank=rank)
    ring = RingAttention(group)
    for sub in module.modules():
        if isinstance(sub, Attention):
            sub.positions = positions
            sub.exchange = ring
        elif isinstance(sub, Embedding):
            sub.positions = positions


def sync_grads(modules: list[nn.Module], group: dist.ProcessGroup) -> None:
    """Average every gradient over the cp group (cp folded into data parallel)."""
    size = dist.get_world_size(group)
    for module in modules:
        for p in module.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad, group=group)
                p.grad.div_(size)
