"""Analytic costs of MoE, MLA, head_dim and sliding-window layers and of context
parallelism, checked against numbers worked out by hand from the shapes."""

from __future__ import annotations

import itertools
import math

import pytest

from planner.catalog.hardware import lookup_gpu
from planner.catalog.models import PRESETS, analytic_costs, layer_refs
from planner.catalog.moe import layer_activation_bytes, layer_flops, param_counts
from planner.catalog.moe_work import RoutingTerms
from planner.specs import ModelArch
from planner.specs.model import LayerCost

GPU = lookup_gpu("H100-SXM-80GB")
assert GPU is not None

# A tiny llama: h 64, 4 heads of 16, 2 kv heads, f 128, V 100; sequence 16.
TINY = ModelArch(
    family="llama",
    num_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    num_kv_heads=2,
    ffn_hidden_size=128,
    vocab_size=100,
)
# The same attention with 4 kv heads, layer 0 dense, layer 1 MoE: 4 experts of 32, top-2,
# one shared expert.
TINY_MOE = ModelArch(
    family="llama",
    num_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    ffn_hidden_size=128,
    vocab_size=100,
    moe={
        "num_experts": 4,
        "experts_per_token": 2,
        "moe_ffn_hidden_size": 32,
        "num_shared_experts": 1,
        "first_dense_layers": 1,
    },
)


def _costs(arch: ModelArch, **kw: object) -> dict[str, LayerCost]:
    args: dict[str, object] = {
        "gpu": GPU,
        "dtype": "bf16",
        "seq_length": 16,
        "micro_batch_size": 1,
        "tp": 1,
        "sequence_parallel": False,
    }
    args.update(kw)
    return analytic_costs(arch, **args)  # type: ignore[arg-type]


def test_cp2_halves_the_rank_tokens_and_the_causal_core() -> None:
    """cp = 2: 8 of the 16 tokens on the rank. By hand (d_h = 16, kv 2): QKV 2*8*64*(64 +
    2*2*16) = 131,072; output 2*8*64*64 = 65,536; SwiGLU 6*8*64*128 = 393,216; the core
    4 * s * T * h = 4*16*8*64 = 32,768 (half of the full sequence's 65,536)."""
    one = _costs(TINY)["decoder"]
    two = _costs(TINY, cp=2)["decoder"]
    assert two.fw_flops == 131_072 + 65_536 + 393_216 + 32_768
    assert 2 * two.fw_flops == one.fw_flops
    # K and V of 8 tokens, 2 heads of 16 each, bf16: 8 * 2 * 32 * 2
    assert two.cp_kv_bytes == 1024
    assert one.cp_kv_bytes == 0
    # saved (llama, none): 4 e d + (2 + 2r) e d + 4 T a + 3 T f d with e = 8*64, r = 1/2
    e = 8 * 64
    assert two.activation_bytes.none == 4 * e * 2 + 3 * e * 2 + 4 * 8 * 4 + 3 * 8 * 128 * 2
    assert two.attention_fw_s > 0 and two.attention_bw_s > two.attention_fw_s
    head1, head2 = _costs(TINY)["head"], _costs(TINY, cp=2)["head"]
    assert head2.fw_flops * 2 == head1.fw_flops
    assert two.param_count == one.param_count


def test_a_tiny_moe_layer_by_hand() -> None:
    """ep = 2 on the tiny MoE's layer 1: T = T_r = 16 tokens. Router 2*16*64*4 = 8,192;
    routed 2*3*(16*2)*64*32 = 393,216; shared 6*16*64*32 = 196,608; attention (kv = 4 heads)
    2*16*(64*(64 + 2*64) + 64*64) = 524,288; core 4*16*16*64 = 65,536."""
    costs = _costs(TINY_MOE, ep=2)
    assert [r.kind for r in layer_refs(TINY_MOE)] == ["embedding", "decoder", "decoder_moe", "head"]
    moe = costs["decoder_moe"]
    expect = 8_192 + 393_216 + 196_608 + 524_288 + 65_536
    assert moe.fw_flops == expect
    single = layer_flops(TINY_MOE, 1, micro_batch_size=1, seq_length=16)
    assert math.isclose(single.total, expect)
    # two local experts of 3*64*32 parameters each
    assert moe.expert_param_count == 2 * 3 * 64 * 32
    # the router (64*4), attention (4*64*64), the shared expert (3*64*32), two RMSNorms
    dense = 64 * 4 + 4 * 64 * 64 + 3 * 64 * 32 + 2 * 64
    assert moe.param_count == dense + 2 * 3 * 64 * 32
    # one all-to-all: 16 tokens x top-2 x 64 x 2 bytes, the busiest rank receiving 1.25 x
    assert moe.ep_dispatch_bytes == 1.25 * 16 * 2 * 64 * 2
    assert moe.etp_gather_bytes == 0
    # etp = 2: each local expert has 16 of its 32 columns and receives the copies of the
    # etp x ep = 4 ranks: 16*2*4/4 = 32 rows, x 1.25 on the busiest rank = 40 rows per
    # local expert (ep = 2: two local experts)
    etp = _costs(TINY_MOE, ep=2, etp=2, routing=RoutingTerms(load_imbalance=1.25))["decoder_moe"]
    assert etp.expert_param_count == 2 * 3 * 64 * 32 / 2
    assert etp.etp_gather_bytes == 40 * 2 * 64 * 2
    assert etp.fw_flops == expect  # model FLOPs: the same wherever the work runs


def test_load_imbalance_slows_the_experts_not_the_model_flops() -> None:
    even = _costs(TINY_MOE, ep=2, routing=RoutingTerms(load_imbalance=1.0))["decoder_moe"]
    skew = _costs(TINY_MOE, ep=2, routing=RoutingTerms(load_imbalance=2.0))["decoder_moe"]
    assert skew.fw_flops == even.fw_flops
    assert skew.fw_s > even.fw_s
    assert skew.activation_bytes.none > even.activation_bytes.none
    with pytest.raises(ValueError, match=r"load_imbalance=0\.5"):
        RoutingTerms(load_imbalance=0.5)


def test_a_sliding_layer_attends_its_window() -> None:
    arch = ModelArch.model_validate(
        {**TINY.model_dump(), "sliding_window": {"window": 4, "full_every": 2}}
    )
    costs = _costs(arch)
    kinds = [r.kind for r in layer_refs(arch)]
    assert kinds == ["embedding", "decoder_sliding", "decoder", "head"]
    full, sliding = costs["decoder"], costs["decoder_sliding"]
    # core 2 * T * a * keys * (dq + dv): keys 16 vs 4
    core_full = 2 * 16 * 4 * 16 * 32
    core_sliding = 2 * 16 * 4 * 4 * 32
    assert full.fw_flops - sliding.fw_flops == core_full - core_sliding


PRESET_POINTS = [
    (tp, cp, ep, etp)
    for tp, cp, ep, etp in itertools.product((1, 2, 4), (1, 2, 4), (1, 2, 8), (1, 2))
    if ep * etp <= tp * cp * 8
]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_costs_at_several_degrees(name: str) -> None:
    arch = PRESETS[name]
    kinds = {r.kind for r in layer_refs(arch)}
    for tp, cp, ep, etp in PRESET_POINTS:
        costs = _costs(
            arch, seq_length=4096, tp=tp, sequence_parallel=tp > 1, cp=cp, ep=ep, etp=etp
        )
        assert kinds <= costs.keys()
        for kind, c in costs.items():
            assert c.fw_s > 0 and c.bw_s > 0, (name, kind, tp, cp, ep, etp)
            assert c.param_count > 0
            assert c.expert_param_count <= c.param_count
    moe_kinds = {k for k in kinds if "_moe" in k}
    assert moe_kinds, name


def _first_of_each_kind(arch: ModelArch) -> dict[str, int]:
    firsts: dict[str, int] = {}
    for i, ref in enumerate(layer_refs(arch)[1:-1]):
        firsts.setdefault(ref.kind, i)
    return firsts


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_the_rank_costs_add_up_to_the_single_device_formulas(name: str) -> None:
    """planner.catalog.moe's one-device numbers (FLOPs, parameters, saved bytes) are the
    sum over the ranks that share the work: forward FLOPs x tp x cp at any degrees; at
    tp = cp = ep = 1 the parameters add up to param_counts' total, and an MoE layer's saved
    bytes under balanced routing equal layer_activation_bytes."""
    arch = PRESETS[name]
    seq = 4096
    even = RoutingTerms(load_imbalance=1.0)
    for tp, cp, ep in ((1, 1, 1), (2, 2, 8), (4, 1, 2)):
        costs = _costs(
            arch, seq_length=seq, tp=tp, sequence_parallel=tp > 1, cp=cp, ep=ep, routing=even
        )
        for kind, i in _first_of_each_kind(arch).items():
            single = layer_flops(arch, i, micro_batch_size=1, seq_length=seq).total
            assert math.isclose(costs[kind].fw_flops * tp * cp, single, rel_tol=1e-12), kind
    costs = _costs(arch, seq_length=seq, routing=even)
    total = sum(costs[ref.kind].param_count for ref in layer_refs(arch))
    assert total == param_counts(arch).total
    for kind, i in _first_of_each_kind(arch).items():
        if "_moe" not in kind:
            continue
        saved = layer_activation_bytes(arch, i, micro_batch_size=1, seq_length=seq, dtype_bytes=2)
        assert math.isclose(costs[kind].activation_bytes.none, saved.none, rel_tol=1e-12)
        assert costs[kind].activation_bytes.full == saved.full
