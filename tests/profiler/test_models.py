"""Reference models: shapes, determinism, recompute equivalence, tp-rank shapes."""

from __future__ import annotations

import math
from typing import Any, cast

import pytest
import torch

from planner.catalog.models import layer_refs
from planner.specs import ModelArch
from profiler.models import (
    TP_PLAN,
    Attention,
    build_model,
    recompute_mode,
    set_recompute,
    tiny_arch,
    unwrap,
)

S = 16


def _block(model: torch.nn.Module, i: int = 0) -> Any:
    """Decoder block i, typed loosely (nn.Module attribute access is untyped)."""
    return cast(Any, model).layers[i]


def _tokens(b: int, vocab: int = 128, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (b, S), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_loss_at_init_is_near_log_vocab(family: str) -> None:
    model = build_model(tiny_arch(family), seq_length=S)  # type: ignore[arg-type]
    tok, labels = _tokens(3), _tokens(3, seed=2)  # labels independent of inputs (tied gpt)
    loss = model(tok, labels)
    # near-uniform predictions at init: cross-entropy ~ ln(V) = 4.85 for V = 128
    assert loss.dim() == 0
    assert abs(loss.item() - math.log(128)) < 0.5


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_layer_list_matches_catalog_order(family: str) -> None:
    arch = tiny_arch(family)  # type: ignore[arg-type]
    model = build_model(arch, seq_length=S)
    refs = layer_refs(arch)
    assert model.layer_names() == [r.name for r in refs]
    layers = model.layer_list()
    assert len(layers) == arch.num_layers + 2
    assert layers[0] is model.embedding and layers[-1] is model.head
    # chaining the layer list reproduces forward()
    tok = _tokens(2)
    x = layers[0](tok)
    assert x.shape == (2, S, arch.hidden_size)
    for layer in layers[1:-1]:
        x = layer(x)
    torch.testing.assert_close(layers[-1](x, tok), model(tok, tok))


def test_same_seed_same_weights_different_seed_different() -> None:
    a = build_model(tiny_arch("llama"), seq_length=S, seed=3)
    b = build_model(tiny_arch("llama"), seq_length=S, seed=3)
    c = build_model(tiny_arch("llama"), seq_length=S, seed=4)
    for (name, pa), pb, pc in zip(
        a.named_parameters(), b.parameters(), c.parameters(), strict=True
    ):
        assert torch.equal(pa, pb), name
        if "norm" not in name and not name.endswith("bias"):
            assert not torch.equal(pa, pc), name


def test_gpt_parameter_count_matches_narayanan() -> None:
    arch = tiny_arch("gpt")
    model = build_model(arch, seq_length=S)
    h, L, V = arch.hidden_size, arch.num_layers, arch.vocab_size
    block = sum(p.numel() for p in model.layers[0].parameters())
    assert block == 12 * h * h + 13 * h  # Narayanan et al. 2021, Eq. 2, per layer
    # embeddings: V*h tokens + S*h positions; head: final LayerNorm 2h + its own V*h copy (tied)
    assert sum(p.numel() for p in model.embedding.parameters()) == V * h + S * h
    assert sum(p.numel() for p in model.head.parameters()) == 2 * h + V * h
    torch.testing.assert_close(model.head.proj.weight, model.embedding.tok.weight)
    assert len(model.layers) == L


def test_llama_gqa_shapes() -> None:
    arch = tiny_arch("llama")  # h=64, 4 heads, 2 kv heads, head_dim 16, ffn 128
    block = _block(build_model(arch, seq_length=S))
    assert block.attn.q_proj.weight.shape == (64, 64)
    assert block.attn.k_proj.weight.shape == (32, 64)
    assert block.attn.v_proj.weight.shape == (32, 64)
    assert block.mlp.gate_proj.weight.shape == (128, 64)
    assert all(p.ndim == 2 or "norm" in n for n, p in block.named_parameters())  # no biases


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_recompute_modes_give_identical_loss_and_grads(family: str) -> None:
    arch = tiny_arch(family)  # type: ignore[arg-type]
    tok = _tokens(2)
    grads = {}
    for mode in ("none", "selective", "full"):
        model = build_model(arch, seq_length=S, seed=7)
        for i, block in enumerate(list(model.layers)):
            model.layers[i] = set_recompute(block, mode)
            assert recompute_mode(model.layers[i]) == mode
        model(tok, tok).backward()
        grads[mode] = {
            n.replace("_checkpoint_wrapped_module.", ""): p.grad.clone()
            for n, p in model.named_parameters()
            if p.grad is not None
        }
    assert grads["none"].keys() == grads["full"].keys() == grads["selective"].keys()
    for name, g in grads["none"].items():
        torch.testing.assert_close(grads["selective"][name], g, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(grads["full"][name], g, rtol=1e-5, atol=1e-6)


def test_set_recompute_round_trip() -> None:
    block = _block(build_model(tiny_arch(), seq_length=S))
    wrapped = set_recompute(block, "full")
    assert unwrap(wrapped) is block
    assert set_recompute(wrapped, "none") is block
    assert recompute_mode(set_recompute(wrapped, "selective")) == "selective"
    assert isinstance(block.attn, Attention) and block.attn.checkpoint_core
    with pytest.raises(ValueError, match="recompute mode"):
        set_recompute(block, "some")  # type: ignore[arg-type]


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_tp_rank_shapes_compose_to_the_full_block(family: str) -> None:
    """Two tp=2 rank blocks holding Megatron's column/row shards of the full block's weights
    add up (row-parallel partial sums) to the full block's output: the -1-heads reshape
    is right, and these are the shapes `parallelize_module` leaves on each rank."""
    arch = tiny_arch(family)  # type: ignore[arg-type]
    full = _block(build_model(arch, seq_length=S, seed=2))
    ranks = [_block(build_model(arch, seq_length=S, tp=2)) for _ in range(2)]
    assert ranks[0].attn.q_proj.weight.shape[0] == full.attn.q_proj.weight.shape[0] // 2
    styles = TP_PLAN[family]
    full_params = dict(full.named_parameters())
    for r, block in enumerate(ranks):
        with torch.no_grad():
            for name, p in block.named_parameters():
                src = full_params[name]
                module = name.rsplit(".", 1)[0]
                style = styles.get(module)
                if style == "colwise":  # output features split (weight rows, bias)
                    n = src.shape[0] // 2
                    p.copy_(src[r * n : (r + 1) * n])
                elif style == "rowwise" and name.endswith("weight"):  # input features split
                    n = src.shape[1] // 2
                    p.copy_(src[:, r * n : (r + 1) * n])
                elif style == "rowwise":  # the bias is added once, after the reduction
                    p.copy_(src if r == 0 else torch.zeros_like(src))
                else:
                    p.copy_(src)
    x = torch.randn(2, S, arch.hidden_size, generator=torch.Generator().manual_seed(5))
    # each sub-layer: y = x + sum_r branch_r(norm(x)); compare attention and MLP branches
    attn_sum = sum(b.attn(b.attn_norm(x)) for b in ranks)
    torch.testing.assert_close(attn_sum, full.attn(full.attn_norm(x)), rtol=1e-4, atol=1e-5)
    mlp_sum = sum(b.mlp(b.mlp_norm(x)) for b in ranks)
    torch.testing.assert_close(mlp_sum, full.mlp(full.mlp_norm(x)), rtol=1e-4, atol=1e-5)


def test_tp_must_divide_heads() -> None:
    arch = ModelArch(
        family="gpt", num_layers=1, hidden_size=48, num_attention_heads=3, vocab_size=64
    )
    with pytest.raises(ValueError, match="tp=2 must divide num_attention_heads=3"):
        build_model(arch, seq_length=8, tp=2)


def test_bf16_build() -> None:
    model = build_model(tiny_arch("llama"), seq_length=S, dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    tok = _tokens(1)
    loss = model(tok, tok)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
