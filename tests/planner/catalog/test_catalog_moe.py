"""planner.catalog.moe against published parameter counts and hand-computed FLOPs."""

from __future__ import annotations

import pytest

from planner.catalog.models import PRESETS
from planner.catalog.moe import (
    cp_ring_bytes,
    ep_all_to_all_bytes,
    expert_rows,
    layer_activation_bytes,
    layer_flops,
    param_counts,
)
from planner.specs.model import ModelArch

# Published totals and active counts (billions), from each model's card / report:
# Mixtral: Jiang et al. 2024 (46.7B / 12.9B) and mistral.ai "Cheaper, Better, Faster, Stronger"
# (141B / 39B); Qwen3 technical report Table 2 (30.5B / 3.3B, 235B / 22B); DeepSeek-V3 report
# abstract (671B / 37B, the multi-token-prediction module excluded); gpt-oss model card Table 1
# (116.83B / 5.13B, whose active count leaves out the input embedding).
PUBLISHED = {
    "mixtral-8x7b": (46.7, 12.9, True),
    "mixtral-8x22b": (141.0, 39.0, True),
    "qwen3-30b-a3b": (30.5, 3.3, True),
    "qwen3-235b-a22b": (235.0, 22.0, True),
    "deepseek-v3": (671.0, 37.0, True),
    "gpt-oss-120b": (116.83, 5.13, False),
}
# Totals are published to 3-4 digits: 0.5 %. Active counts to 2 digits ("3.3B", "37B"), so
# within 2 %: the rounding alone is up to 1.5 % ("3.3" for 3.35, "37" for 37.5).
TOTAL_RTOL, ACTIVE_RTOL = 0.005, 0.02


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_the_published_totals(name: str) -> None:
    total, active, with_embedding = PUBLISHED[name]
    counts = param_counts(PRESETS[name])
    assert counts.total / 1e9 == pytest.approx(total, rel=TOTAL_RTOL)
    ours = counts.active - (0 if with_embedding else counts.embedding)
    assert ours / 1e9 == pytest.approx(active, rel=ACTIVE_RTOL)


def test_expert_parameters_are_most_of_an_moe_model() -> None:
    counts = param_counts(PRESETS["deepseek-v3"])
    # 58 MoE layers x 256 experts x 3 x 7168 x 2048 (config.json shapes)
    assert counts.expert == 58 * 256 * 3 * 7168 * 2048
    assert counts.expert_active == 58 * 8 * 3 * 7168 * 2048


TINY = ModelArch(
    family="llama",
    num_layers=2,
    hidden_size=16,
    num_attention_heads=2,
    num_kv_heads=1,
    head_dim=4,
    ffn_hidden_size=24,
    vocab_size=50,
    moe={
        "num_experts": 4,
        "experts_per_token": 2,
        "moe_ffn_hidden_size": 8,
        "num_shared_experts": 1,
        "first_dense_layers": 1,
    },
    sliding_window={"window": 3, "full_every": 2},
)


def test_layer_flops_by_hand() -> None:
    # layer 0: dense and sliding (window 3); b=2, s=5: T=10 tokens
    dense = layer_flops(TINY, 0, micro_batch_size=2, seq_length=5)
    # q 16x8, k 16x4, v 16x4, o 8x16 = 384 weights -> 2*10*384
    assert dense.attention_linear == 7680
    # 2 * T * heads * keys * (dq + dv) = 2*10*2*3*8
    assert dense.attention_core == 960
    assert dense.dense_mlp == 2 * 3 * 10 * 16 * 24
    assert dense.router == dense.experts == 0
    moe = layer_flops(TINY, 1, micro_batch_size=2, seq_length=5)
    assert moe.attention_core == 2 * 10 * 2 * 5 * 8  # full layer: all 5 keys
    assert moe.router == 2 * 10 * 16 * 4
    assert moe.experts == 2 * 3 * 10 * 2 * 16 * 8  # T*k rows over the 4 experts
    assert moe.shared_experts == 2 * 3 * 10 * 1 * 16 * 8
    assert moe.dense_mlp == 0
    assert moe.backward == 2 * moe.total


def test_capacity_factor_drops_only_below_one() -> None:
    assert expert_rows(TINY, 10) == 5.0  # 10 * 2 / 4
    capped = TINY.model_copy(
        update={"moe": TINY.moe.model_copy(update={"capacity_factor": 0.5})}  # type: ignore[union-attr]
    )
    assert expert_rows(capped, 10) == 3.0  # ceil(0.5 * 5)
    roomy = TINY.model_copy(
        update={"moe": TINY.moe.model_copy(update={"capacity_factor": 1.25})}  # type: ignore[union-attr]
    )
    assert expert_rows(roomy, 10) == 5.0


def test_forward_flops_per_token_are_twice_the_active_matmul_parameters() -> None:
    """The 6N rule (Kaplan et al. 2020 §2.1), forward share 2N: at sequence length 1 the
    attention core is negligible, so the layers' FLOPs are 2 x the active matrix parameters."""
    arch = PRESETS["mixtral-8x7b"]
    per_token = sum(
        layer_flops(arch, i, micro_batch_size=1, seq_length=1).total for i in range(arch.num_layers)
    )
    counts = param_counts(arch)
    norms = arch.num_layers * 2 * arch.hidden_size
    matrices = counts.dense + counts.expert_active - norms
    core = arch.num_layers * 2 * 32 * 1 * 256  # 2 * heads * keys * (dq + dv), one token
    assert per_token == pytest.approx(2 * matrices + core, rel=1e-12)


def test_activation_bytes_of_an_moe_layer_by_hand() -> None:
    act = layer_activation_bytes(TINY, 1, micro_batch_size=2, seq_length=5, dtype_bytes=2)
    t, h, d = 10, 16, 2
    attn = 2 * t * h * d + t * 2 * 4 * d + t * 1 * 8 * d + t * 2 * 4 * d + 4 * t * 2
    routed = t * 2  # rows
    mlp = 2 * t * h * d + 4 * t * 4 + 2 * routed * h * d + 3 * routed * 8 * d + 3 * t * 8 * d
    assert act.none == act.selective == attn + mlp
    assert act.full == t * h * d


def test_communication_volumes_by_hand() -> None:
    # 10 tokens x top-2 copies x 16 hidden x 2 bytes, half of them leave the rank at ep = 2
    assert ep_all_to_all_bytes(TINY, tokens=10, ep=2, dtype_bytes=2) == 320
    assert ep_all_to_all_bytes(TINY, tokens=10, ep=1, dtype_bytes=2) == 0
    # cp = 4: 3 steps of 8 local tokens x 1 kv head x (4 + 4) x 2 bytes
    assert cp_ring_bytes(TINY, local_tokens=8, cp=4, dtype_bytes=2) == 384
    dsv3 = PRESETS["deepseek-v3"]  # MLA: 128 heads x (192 + 128) decompressed
    assert cp_ring_bytes(dsv3, local_tokens=1, cp=2, dtype_bytes=2) == 128 * 320 * 2
