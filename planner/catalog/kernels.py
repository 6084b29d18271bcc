"""Kernel times from shapes: GEMMs with tile and wave quantization, memory-bound kernels.

A GEMM C[M, N] = A[M, K] B[K, N] (times `batch` for batched matmuls) on a GPU with `sm_count`
SMs runs as output tiles of Tm x Tn, one tile per SM at a time, in waves (NVIDIA, "Matrix
Multiplication Background User's Guide", DU-09799-001, §3.1 "Tile Quantization" and §3.2
"Wave Quantization"):

    tiles   = batch * ceil(M / Tm) * ceil(N / Tn)
    waves   = ceil(tiles / sm_count)
    compute = waves * 2 * Tm * Tn * K / (peak_flops / sm_count * matmul_fraction)
    memory  = (M*K + K*N + M*N) * batch * bytes_per_element / (HBM * hbm_fraction)
    time    = max(compute, memory) + kernel_overhead_s       (the roofline, Williams et al. 2009)

The tile is the best of cuBLAS's large tiles 256x128, 128x256 and 128x128 (the guide's §2.3,
"Typical Tile Dimensions In cuBLAS And Performance", ranks the larger tiles as the more
efficient; smaller tiles trade data reuse for less quantization, which is not modelled). A
grid of less than one wave leaves SMs idle (cuBLAS's split-K is not modelled either).
A GPU without an SM count (the CPU stand-in, what-if GPUs) gets no quantization: compute is
2*M*N*K*batch / (peak * matmul_fraction).

Memory-bound kernels (norms, softmax, dropout, activations, residual adds, the loss) take
bytes / (HBM * hbm_fraction) + kernel_overhead_s each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.catalog.efficiency import Efficiency
from planner.catalog.hardware import GpuSpec

TILES: tuple[tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128))


@dataclass(frozen=True)
class Gemm:
    """One (batched) matmul as one tp rank runs it: C[M, N] = A[M, K] B[K, N], `batch` times."""

    m: int
    n: int
    k: int
    batch: int = 1

    def __post_init__(self) -> None:
        for name in ("m", "n", "k", "batch"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Gemm {name}={getattr(self, name)} must be > 0")

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch

    def bytes_moved(self, element_bytes: int) -> float:
        """Least HBM traffic: read A and B, write C once."""
        return (
            float(self.m * self.k + self.k * self.n + self.m * self.n) * self.batch * element_bytes
        )

    @property
    def dgrad(self) -> Gemm:
        """The input gradient dA[M, K] = dC[M, N] B^T[N, K]."""
        return Gemm(self.m, self.k, self.n, self.batch)

    @property
    def wgrad(self) -> Gemm:
        """The weight gradient dB[K, N] = A^T[K, M] dC[M, N]."""
        return Gemm(self.k, self.n, self.m, self.batch)


def gemm_compute_s(g: Gemm, gpu: GpuSpec, eff: Efficiency) -> float:
    """Compute time of `g` with tile and wave quantization over the SMs (module docstring)."""
    if gpu.sm_count is None:
        return g.flops / (gpu.peak_flops * eff.matmul_fraction)
    sms = gpu.sm_count
    per_sm = gpu.peak_flops / sms * eff.matmul_fraction
    best = math.inf
    for tm, tn in TILES:
        tiles = g.batch * math.ceil(g.m / tm) * math.ceil(g.n / tn)
        waves = math.ceil(tiles / sms)
        best = min(best, waves * 2.0 * tm * tn * g.k / per_sm)
    return best


def gemm_s(g: Gemm, gpu: GpuSpec, eff: Efficiency, *, element_bytes: int) -> float:
    """Seconds of one GEMM kernel: max(compute, memory) + the fixed per-kernel cost."""
    memory = eff.memory_s(g.bytes_moved(element_bytes), gpu)
    return max(gemm_compute_s(g, gpu, eff), memory) + eff.kernel_overhead_s


def elementwise_s(num_bytes: float, gpu: GpuSpec, eff: Efficiency, *, kernels: int) -> float:
    """Seconds of `kernels` memory-bound kernels moving `num_bytes` in all."""
    return eff.memory_s(num_bytes, gpu) + kernels * eff.kernel_overhead_s


# FlashAttention-2's tiles for head size 128 on sm80 / sm90 (flash_fwd_launch_template.h,
# run_mha_fwd_hdim128: Flash_fwd_kernel_traits<128, kBlockM 128, kBlockN 64>;
# flash_bwd_launch_template.h, run_mha_bwd_hdim128 with >= 144 KB of shared memory:
# Flash_bwd_kernel_traits<128, kBlockM 64, kBlockN 128>). The forward's thread blocks each own
# FLASH_BLOCK query rows and loop over the keys FLASH_INNER_BLOCK at a time; the backward's own
# FLASH_BLOCK keys and loop over the queries FLASH_INNER_BLOCK at a time (Dao 2023 §3.2: the
# backward is parallel over the key blocks). A partial tile costs a whole one.
FLASH_BLOCK = 128
FLASH_INNER_BLOCK = 64
FLASH_BACKWARD_RATIO = 2.5  # backward matmul work / forward: 5 matmuls vs 2 (Dao 2023, §3.1)


def flash_attention_s(
    *,
    seq: int,
    head_dim: int,
    batch_heads: int,
    causal: bool,
    backward: bool,
    gpu: GpuSpec,
    eff: Efficiency,
    element_bytes: int,
    queries: int | None = None,
    value_dim: int | None = None,
    kernels: int = 1,
    band: bool = False,
) -> float:
    """One fused attention kernel (FlashAttention-2, Dao 2023) over `batch_heads` heads.

    `seq` is the keys each query attends; `queries` (default `seq`) the query rows, so a
    context-parallel rank's s / cp queries over all s keys are `queries=s/cp, seq=s`;
    `value_dim` (default `head_dim`) the value head size (MLA: 128 against 192), a block
    then doing 2 * FLASH_BLOCK * n * (head_dim + value_dim) FLOPs; `kernels` the launches the
    work is split into, each paying kernel_overhead_s; `band`: each query attends its own
    `seq` keys (a sliding window), so the backward has as many key blocks as the forward has
    query blocks, each over `seq` queries.

    The kernel sustains the calibrated GEMM fraction of the peak, at most the GPU's
    `flash_attention_fraction` (planner.catalog.hardware: FlashAttention-2 on Hopper).
    Forward: parallel over batch x heads x query blocks of FLASH_BLOCK rows, each doing
    4 * FLASH_BLOCK * n * head_dim FLOPs (Q K^T and P V) over the n keys rounded up to
    FLASH_INNER_BLOCK; backward: parallel over key blocks of FLASH_BLOCK, each over the
    queries rounded up to FLASH_INNER_BLOCK, 2.5 x the work; half of it with a causal mask
    (blocks above the diagonal are skipped). Waves and the HBM roofline as for a GEMM; Q, K,
    V and O (and their gradients backward) cross HBM once.
    """
    rows = seq if queries is None else queries
    outer, inner = (seq, rows) if backward and not band else (rows, seq)
    blocks = batch_heads * math.ceil(outer / FLASH_BLOCK)
    n = math.ceil(inner / FLASH_INNER_BLOCK) * FLASH_INNER_BLOCK
    half = 0.5 if causal else 1.0
    if value_dim is None:
        per_block = 4.0 * FLASH_BLOCK * n * head_dim * half
    else:
        per_block = 2.0 * FLASH_BLOCK * n * (head_dim + value_dim) * half
    factor = FLASH_BACKWARD_RATIO if backward else 1.0
    fraction = eff.matmul_fraction
    if gpu.flash_attention_fraction is not None:
        fraction = min(fraction, gpu.flash_attention_fraction)
    if gpu.sm_count is None:
        compute = blocks * per_block * factor / (gpu.peak_flops * fraction)
    else:
        per_sm = gpu.peak_flops / gpu.sm_count * fraction
        compute = math.ceil(blocks / gpu.sm_count) * per_block * factor / per_sm
    tensors = 8.0 if backward else 4.0
    if queries is None and value_dim is None:
        moved = tensors * seq * head_dim * batch_heads * element_bytes
    else:  # Q and O over the queries, K and V over the keys (and their gradients backward)
        vd = head_dim if value_dim is None else value_dim
        moved = tensors / 4.0 * (rows + seq) * (head_dim + vd) * batch_heads * element_bytes
    memory = eff.memory_s(moved, gpu)
    return max(compute, memory) + kernels * eff.kernel_overhead_s
