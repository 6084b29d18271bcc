"""Kernel times from shapes (planner.catalog.kernels) against hand-computed tiles and waves,
the roofline, the catalog's SM arithmetic, and the alpha-beta links (planner.cost.comm)."""

from __future__ import annotations

import math

import pytest

from planner.catalog.efficiency import Efficiency
from planner.catalog.hardware import GpuSpec, lookup_gpu
from planner.catalog.kernels import Gemm, elementwise_s, flash_attention_s, gemm_compute_s, gemm_s
from planner.cost.comm import Link, all_reduce_s

A100 = lookup_gpu("A100")
H100 = lookup_gpu("H100")
assert A100 is not None and H100 is not None
EFF = Efficiency(matmul_fraction=0.8, hbm_fraction=0.9, kernel_overhead_s=2e-6)


def test_catalog_peaks_are_sms_times_tensor_rate_times_clock() -> None:
    # A100 whitepaper: 1024 dense fp16/bf16 FMA per SM per clock; H100: 2048
    assert A100.sm_count == 108 and H100.sm_count == 132
    assert A100.boost_clock_mhz is not None and H100.boost_clock_mhz is not None
    a100 = 108 * 2 * 1024 * A100.boost_clock_mhz * 1e6
    h100 = 132 * 2 * 2048 * H100.boost_clock_mhz * 1e6
    assert a100 == pytest.approx(A100.peak_flops, rel=1e-3)
    assert h100 == pytest.approx(H100.peak_flops, rel=1e-3)


def test_wave_quantization_of_a_91b_qkv_gemm_at_tp8() -> None:
    # [2048, 10240] x [10240, 3840]: 128x128 tiles: 16 x 30 = 480 tiles = 4.44 waves on 108
    # SMs -> 5 waves; 256x128: 8 x 30 = 240 -> 3 waves of twice the work (6 of 128x128)
    per_sm = A100.peak_flops / 108 * EFF.matmul_fraction
    wave_128 = 2 * 128 * 128 * 10240 / per_sm
    assert gemm_compute_s(Gemm(2048, 3840, 10240), A100, EFF) == pytest.approx(5 * wave_128)
    # twice the tokens: 960 tiles = 8.89 -> 9 waves, so the time per FLOP falls by 9/10
    assert gemm_compute_s(Gemm(4096, 3840, 10240), A100, EFF) == pytest.approx(9 * wave_128)
    ideal = Gemm(2048, 3840, 10240).flops / (A100.peak_flops * EFF.matmul_fraction)
    assert 5 * wave_128 / ideal == pytest.approx(5 / (480 / 108))


def test_a_skinny_gemm_is_memory_bound() -> None:
    # 128 tokens x a [8192, 16896] weight on H100: one wave of 132 tiles (2*128*128*8192 FLOPs
    # each, 45 us at 0.8 of 7.5 TFLOP/s per SM) against 283 MB through HBM (94 us at 0.9 of
    # 3.35 TB/s): below the roofline's ridge the HBM time is the GEMM's time
    g = Gemm(128, 16896, 8192)
    memory = (128 * 8192 + 8192 * 16896 + 128 * 16896) * 2 / (H100.hbm_gbps * 1e9 * 0.9)
    assert gemm_compute_s(g, H100, EFF) < memory
    assert gemm_s(g, H100, EFF, element_bytes=2) == pytest.approx(memory + 2e-6)


def test_no_sm_count_means_no_quantization() -> None:
    plain = GpuSpec(
        name="plain",
        peak_bf16_tflops=100,
        memory_gib=80,
        hbm_gbps=1e15,
        nvlink_gbps=600,
        inter_node_gbps=25,
    )
    g = Gemm(100, 300, 700, batch=3)
    assert gemm_compute_s(g, plain, EFF) == pytest.approx(g.flops / (100e12 * 0.8))


def test_gemm_gradients_have_the_transposed_shapes() -> None:
    g = Gemm(2048, 3072, 1024)
    assert (g.dgrad.m, g.dgrad.n, g.dgrad.k) == (2048, 1024, 3072)
    assert (g.wgrad.m, g.wgrad.n, g.wgrad.k) == (1024, 3072, 2048)
    assert g.flops == g.dgrad.flops == g.wgrad.flops
    with pytest.raises(ValueError, match="k=0"):
        Gemm(1, 1, 0)


def test_elementwise_pays_the_kernel_cost_per_kernel() -> None:
    one = elementwise_s(1e9, A100, EFF, kernels=1)
    five = elementwise_s(1e9, A100, EFF, kernels=5)
    assert five - one == pytest.approx(4 * 2e-6)
    assert one == pytest.approx(1e9 / (A100.hbm_gbps * 1e9 * 0.9) + 2e-6)


def test_causal_flash_attention_does_half_the_work() -> None:
    no_overhead = EFF.replace(kernel_overhead_s=0.0)
    args = {"seq": 8192, "head_dim": 128, "batch_heads": 32, "gpu": H100, "eff": no_overhead}
    full = flash_attention_s(**args, causal=False, backward=False, element_bytes=2)
    causal = flash_attention_s(**args, causal=True, backward=False, element_bytes=2)
    back = flash_attention_s(**args, causal=True, backward=True, element_bytes=2)
    assert causal == pytest.approx(full / 2)
    assert back == pytest.approx(2.5 * causal)  # Dao 2023: 5 matmuls backward vs 2 forward
    # 32 heads x 64 query blocks = 2048 blocks = 15.5 waves on 132 SMs -> 16, each SM at 35 %
    # of its share of the peak (FlashAttention-2 on Hopper, Shah et al. 2024)
    per_sm = H100.peak_flops / 132 * 0.35
    assert full == pytest.approx(16 * 4 * 128 * 8192 * 128 / per_sm)


def test_flash_attention_on_ampere_runs_at_the_gemm_fraction() -> None:
    """FlashAttention-2 reaches GEMM-class utilisation on an A100 (Dao 2023 §4.1), so no cap
    applies there; the same kernel on an H100 is capped at 35 % of the peak, which only a
    GEMM fraction above 0.35 can reach."""
    args = {"seq": 4096, "head_dim": 128, "batch_heads": 108, "causal": False, "backward": False}
    no_overhead = EFF.replace(kernel_overhead_s=0.0)
    a100 = flash_attention_s(**args, gpu=A100, eff=no_overhead, element_bytes=2)
    # 108 heads x 32 query blocks = 3456 blocks = 32 waves on 108 SMs
    assert a100 == pytest.approx(
        32 * 4 * 128 * 4096 * 128 / (A100.peak_flops / 108 * no_overhead.matmul_fraction)
    )
    low = no_overhead.replace(matmul_fraction=0.3)
    h100_low = flash_attention_s(**args, gpu=H100, eff=low, element_bytes=2)
    h100 = flash_attention_s(**args, gpu=H100, eff=no_overhead, element_bytes=2)
    assert h100 / h100_low == pytest.approx(0.3 / 0.35)


def test_alpha_beta_achieved_bandwidth_falls_at_small_messages() -> None:
    link = Link("intra-node", 240e9, 5e-6)
    k = 8

    def achieved(num_bytes: float) -> float:
        moved = 2 * (k - 1) / k * num_bytes  # ring all-reduce bytes per GPU
        return moved / all_reduce_s(num_bytes, group=k, link=link)

    half_at = link.latency_s * link.bytes_per_s / (2 * (k - 1) / k)  # moved = alpha * beta
    assert achieved(half_at) == pytest.approx(link.bytes_per_s / 2)
    assert achieved(1e10) > 0.99 * link.bytes_per_s
    assert achieved(1e4) < 0.02 * link.bytes_per_s  # 10 kB: latency-bound
    assert math.isclose(link.achieved(0.5).bytes_per_s, 120e9)
