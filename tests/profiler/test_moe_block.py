"""The reference MoE block (profiler.models.MoE) on CPU, against a per-token loop."""

from __future__ import annotations

import pytest
import torch

from planner.catalog.moe import param_counts
from profiler.models import MoE, build_model, tiny_moe_arch


def _per_token(moe: MoE, x: torch.Tensor, *, capacity: int | None = None) -> torch.Tensor:
    """out[t] = sum over its k experts of weight * expert(x[t]) + shared(x[t]), written as a
    loop over tokens; with `capacity`, an expert takes only its first `capacity` copies."""
    flat = x.reshape(-1, x.shape[-1])
    logits = moe.router.gate(flat).float()
    taken = [0] * moe.num_experts
    rows = []
    for t in range(flat.shape[0]):
        if moe.router.kind == "softmax":
            p = logits[t].softmax(-1)
            top, idx = p.topk(moe.top_k)
        else:
            p = logits[t].sigmoid()
            idx = (p + moe.router.bias).topk(moe.top_k).indices
            top = p[idx]
        top = top / top.sum()
        acc = torch.zeros_like(flat[t])
        for w, j in zip(top.tolist(), idx.tolist(), strict=True):
            taken[j] += 1
            if capacity is None or taken[j] <= capacity:
                acc = acc + w * moe.experts[str(j)](flat[t : t + 1])[0]
        if moe.shared is not None:
            acc = acc + moe.shared(flat[t : t + 1])[0]
        rows.append(acc)
    return torch.stack(rows).reshape(x.shape)


def _moe(**moe_update: object) -> MoE:
    arch = tiny_moe_arch()
    assert arch.moe is not None
    arch = arch.model_copy(update={"moe": arch.moe.model_copy(update=moe_update)})
    model = build_model(arch, seq_length=8, seed=3)
    block = model.layers[1].mlp
    assert isinstance(block, MoE)
    return block


@pytest.mark.parametrize("router", ["softmax", "sigmoid"])
def test_the_block_equals_a_per_token_loop(router: str) -> None:
    moe = _moe(router=router)
    if router == "sigmoid":
        moe.router.bias.copy_(torch.tensor([0.0, 0.3, -0.2, 0.1]))
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(moe(x), _per_token(moe, x), rtol=1e-5, atol=1e-6)


def test_a_capacity_factor_drops_the_copies_beyond_capacity_in_token_order() -> None:
    moe = _moe(capacity_factor=0.5)  # 16 tokens x 2 / 4 experts x 0.5 = 4 copies per expert
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(2))
    dropped = _per_token(moe, x, capacity=4)
    torch.testing.assert_close(moe(x), dropped, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(dropped, _per_token(moe, x), atol=1e-4)


@pytest.mark.parametrize("family", ["llama", "gpt"])
def test_the_tiny_moe_model_trains_on_cpu_and_has_the_catalog_parameter_count(
    family: str,
) -> None:
    arch = tiny_moe_arch().model_copy(update={"family": family})
    model = build_model(arch, seq_length=16, seed=0)
    # gpt: + learned positions (s x h) + the head's own copy of the tied embedding (Head)
    extra = 16 * 64 + 128 * 64 if family == "gpt" else 0
    assert sum(p.numel() for p in model.parameters()) == param_counts(arch).total + extra
    assert model.layers[0].attn.q_proj.out_features == 4 * 32  # head_dim 32, not 64 / 4
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(128, (2, 16), generator=gen)
    loss = model(tokens, torch.randint(128, (2, 16), generator=gen))
    loss.backward()
    assert torch.isfinite(loss)
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert missing == []
