"""The analytic families against published formulas and published parameter counts."""

from __future__ import annotations

import math

import pytest

from planner.catalog.efficiency import Efficiency
from planner.catalog.hardware import GpuSpec, lookup_gpu
from planner.catalog.models import (
    DECODER,
    EMBEDDING,
    HEAD,
    analytic_costs,
    analytic_profile,
    layer_refs,
)
from planner.specs import ClusterSpec, ModelArch, TrainingSpec

A100 = lookup_gpu("A100-SXM-80GB")
assert A100 is not None
# A GPU whose memory-bound work is free and with no SM count (no tile quantization), so with
# no per-kernel cost times are pure matmul FLOPs / (peak * fraction).
NO_HBM = GpuSpec(
    name="no-hbm",
    peak_bf16_tflops=100.0,
    memory_gib=80.0,
    hbm_gbps=1e15,
    nvlink_gbps=600.0,
    inter_node_gbps=25.0,
)

GPT_18B = ModelArch(
    family="gpt", num_layers=40, hidden_size=6144, num_attention_heads=48, vocab_size=51200
)
S = 2048


def costs(arch: ModelArch, *, b: int = 1, t: int = 1, sp: bool = False, gpu: GpuSpec = A100):
    return analytic_costs(
        arch,
        gpu=gpu,
        dtype="bf16",
        seq_length=S,
        micro_batch_size=b,
        tp=t,
        sequence_parallel=sp,
    )


def test_layer_list_is_embedding_decoders_head() -> None:
    refs = layer_refs(GPT_18B)
    assert [r.kind for r in refs] == [EMBEDDING] + [DECODER] * 40 + [HEAD]
    assert len({r.name for r in refs}) == 42


@pytest.mark.parametrize("t", [1, 2, 8])
@pytest.mark.parametrize("b", [1, 4])
def test_gpt_decoder_forward_flops_narayanan(t: int, b: int) -> None:
    # Narayanan et al. 2021: a layer's forward is 24*s*b*h^2 + 4*s^2*b*h, split over t ranks.
    h = GPT_18B.hidden_size
    expected = (24 * S * b * h * h + 4 * S * S * b * h) / t
    assert costs(GPT_18B, b=b, t=t)[DECODER].fw_flops == pytest.approx(expected, rel=1e-12)


def test_gpt_model_flops_match_korthikanti_eq7_and_params_match_eq2() -> None:
    arch = GPT_18B
    c = costs(arch)
    L, h, V = arch.num_layers, arch.hidden_size, arch.vocab_size
    per_seq = c[EMBEDDING].fw_flops + L * c[DECODER].fw_flops + c[HEAD].fw_flops
    eq7 = 72 * 1 * L * S * h * h * (1 + S / (6 * h) + V / (12 * h * L))
    assert 3 * per_seq == pytest.approx(eq7, rel=1e-12)
    # Eq. 2 counts the word embeddings once and no final LayerNorm; our head holds the tied
    # copy (V*h) and the final LayerNorm (2h).
    total = c[EMBEDDING].param_count + L * c[DECODER].param_count + c[HEAD].param_count
    eq2 = 12 * L * h * h * (1 + 13 / (12 * h) + (V + S) / (12 * L * h))
    assert total - V * h - 2 * h == pytest.approx(eq2, rel=1e-12)


@pytest.mark.parametrize(
    ("name", "arch", "published"),
    [
        # Llama 2 7B (Touvron et al. 2023; HF config): 6,738,415,616 parameters.
        (
            "llama-2-7b",
            ModelArch(
                family="llama",
                num_layers=32,
                hidden_size=4096,
                num_attention_heads=32,
                ffn_hidden_size=11008,
                vocab_size=32000,
            ),
            6_738_415_616,
        ),
        # Llama 3 8B (GQA, 8 kv heads): 8,030,261,248 parameters.
        (
            "llama-3-8b",
            ModelArch(
                family="llama",
                num_layers=32,
                hidden_size=4096,
                num_attention_heads=32,
                num_kv_heads=8,
                ffn_hidden_size=14336,
                vocab_size=128256,
            ),
            8_030_261_248,
        ),
    ],
)
def test_llama_parameter_counts_match_published(name: str, arch: ModelArch, published: int) -> None:
    c = costs(arch)
    total = c[EMBEDDING].param_count + arch.num_layers * c[DECODER].param_count
    total += c[HEAD].param_count
    assert total == published, name


def test_llama_swiglu_and_gqa_flops() -> None:
    h, f, a, kv = 4096, 14336, 32, 8
    arch = ModelArch(
        family="llama",
        num_layers=2,
        hidden_size=h,
        num_attention_heads=a,
        num_kv_heads=kv,
        ffn_hidden_size=f,
        vocab_size=1000,
    )
    # q and out-proj h x h each, k and v h x (h*kv/a) each, three h x f matmuls, core 4s^2h.
    expected = 2 * S * (h * h * 2 + 2 * h * h * kv / a + 3 * h * f) + 4 * S * S * h
    assert costs(arch)[DECODER].fw_flops == pytest.approx(expected, rel=1e-12)


def _table2(t: int, sp: bool, mode: str, arch: ModelArch, b: int) -> float:
    """Korthikanti et al. 2022, Table 2, typed in from the paper (bytes per layer)."""
    s, h, a = S, arch.hidden_size, arch.num_attention_heads
    sbh = s * b * h
    if mode == "full":
        return 2 * sbh / (t if sp else 1)
    if sp:
        return sbh * 34 / t + (5 * a * s * s * b / t if mode == "none" else 0)
    return sbh * (10 + 24 / t) + (5 * a * s * s * b / t if mode == "none" else 0)


@pytest.mark.parametrize(("t", "sp"), [(1, False), (4, False), (8, False), (4, True), (8, True)])
@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_gpt_activation_bytes_korthikanti_table2(t: int, sp: bool, mode: str) -> None:
    got = costs(GPT_18B, b=2, t=t, sp=sp)[DECODER].activation_bytes.get(mode)  # type: ignore[arg-type]
    assert got == pytest.approx(_table2(t, sp, mode, GPT_18B, 2), rel=1e-12)


def test_head_and_embedding_bytes() -> None:
    t, b = 8, 1
    c = costs(GPT_18B, b=b, t=t, sp=True)
    h, V = GPT_18B.hidden_size, GPT_18B.vocab_size
    # Korthikanti §4.3: final norm + output projection + fp32 logits 4*s*b*h/t*(1 + V/h).
    assert c[HEAD].activation_bytes.none == pytest.approx(4 * S * b * h / t * (1 + V / h))
    assert c[HEAD].activation_bytes.full == c[HEAD].activation_bytes.none
    assert c[HEAD].recompute_s.full == 0
    # embedding dropout mask s*b*h/t (1 byte per element)
    assert c[EMBEDDING].activation_bytes.none == pytest.approx(S * b * h / t)
    # boundary bytes: b*s*h bf16, divided by t under sequence parallel
    assert c[DECODER].output_bytes == pytest.approx(2 * S * b * h / t)
    assert costs(GPT_18B, t=t)[DECODER].output_bytes == pytest.approx(2 * S * h)


def test_tp_comm_bytes_four_collectives_of_bsh() -> None:
    h = GPT_18B.hidden_size
    assert costs(GPT_18B, b=2, t=4)[DECODER].tp_comm_bytes == 4 * 2 * S * 2 * h
    assert costs(GPT_18B, b=2, t=1)[DECODER].tp_comm_bytes == 0


def test_backward_is_twice_forward_and_split_by_qi_table1() -> None:
    eff = Efficiency(matmul_fraction=0.5, hbm_fraction=1.0, kernel_overhead_s=0.0)
    c = analytic_costs(
        GPT_18B,
        gpu=NO_HBM,
        dtype="bf16",
        seq_length=S,
        micro_batch_size=1,
        tp=1,
        sequence_parallel=False,
        efficiency=eff,
    )[DECODER]
    h = GPT_18B.hidden_size
    rate = NO_HBM.peak_flops * 0.5
    # Qi et al. 2024, Table 1: F = sbh(24h+4s), B = sbh(24h+8s), W = 24sbh^2
    assert c.fw_s == pytest.approx(S * h * (24 * h + 4 * S) / rate, rel=1e-6)
    assert c.bw_input_s == pytest.approx(S * h * (24 * h + 8 * S) / rate, rel=1e-6)
    assert c.bw_weight_s == pytest.approx(24 * S * h * h / rate, rel=1e-6)
    assert c.recompute_s.full == c.fw_s
    assert c.recompute_s.selective == pytest.approx(4 * S * S * h / rate, rel=1e-6)


def test_memory_bound_work_costs_more_per_flop_for_small_hidden() -> None:
    small = ModelArch(
        family="gpt", num_layers=2, hidden_size=1024, num_attention_heads=16, vocab_size=51200
    )
    big = ModelArch(
        family="gpt", num_layers=2, hidden_size=16384, num_attention_heads=128, vocab_size=51200
    )

    def flop_rate(arch: ModelArch) -> float:
        c = costs(arch)[DECODER]
        return c.fw_flops / c.fw_s

    assert flop_rate(small) < 0.85 * flop_rate(big)
    assert flop_rate(big) < A100.peak_flops


def test_tp_must_divide_heads() -> None:
    with pytest.raises(ValueError, match="tp=5"):
        costs(GPT_18B, t=5)
    llama = ModelArch(
        family="llama",
        num_layers=2,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=4,
        ffn_hidden_size=11008,
        vocab_size=32000,
    )
    with pytest.raises(ValueError, match="num_kv_heads=4"):
        costs(llama, t=8)


def test_efficiency_bounds() -> None:
    with pytest.raises(ValueError, match=r"matmul_fraction=1\.5"):
        Efficiency(matmul_fraction=1.5)
    with pytest.raises(ValueError, match="hbm_fraction=0"):
        Efficiency(hbm_fraction=0)


def test_analytic_profile_round_trips_and_interpolates_exactly_at_points() -> None:
    cluster = ClusterSpec(gpu="H100-SXM-80GB", num_gpus=8)
    training = TrainingSpec(global_batch_size=64, seq_length=S)
    points = [(1, 1, False), (2, 1, False), (1, 8, True)]
    prof = analytic_profile(GPT_18B, cluster, training, points)
    assert prof.source == "analytic"
    assert prof.arch == GPT_18B
    assert len(prof.layers) == 42
    assert type(prof).model_validate_json(prof.model_dump_json()) == prof
    h100 = lookup_gpu("H100-SXM-80GB")
    assert h100 is not None
    direct = costs(GPT_18B, b=1, t=8, sp=True, gpu=h100)[DECODER]
    assert prof.cost(DECODER, micro_batch_size=1, tp=8, sequence_parallel=True) == direct
    # beyond the measured micro-batch sizes: linear in b through the two points
    one, two = (costs(GPT_18B, b=b, gpu=h100)[DECODER].fw_s for b in (1, 2))
    mid = prof.cost(DECODER, micro_batch_size=3, tp=1)
    assert mid.fw_s == pytest.approx(one + 2 * (two - one), rel=1e-9)
    # the analytic model's own time at b = 3 is near that line (GEMM waves make it not affine)
    assert mid.fw_s == pytest.approx(costs(GPT_18B, b=3, gpu=h100)[DECODER].fw_s, rel=0.03)
    assert math.isfinite(mid.fw_s)
