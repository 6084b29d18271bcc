"""GPU catalog: peak dense bf16 FLOP/s, memory, HBM bandwidth and link bandwidths.

Sources (../shared/REFERENCE.md, "Hardware"):
- A100 SXM 80GB: 312 TFLOP/s bf16 dense, 80 GB, 2.0 TB/s HBM, NVLink 600 GB/s per GPU
  (NVIDIA A100 datasheet); DGX A100: 8 x HDR 200 Gb/s InfiniBand per node = 25 GB/s per GPU.
- H100 SXM 80GB: 989 TFLOP/s, 80 GB, 3.35 TB/s, NVLink 900 GB/s (NVIDIA H100 datasheet);
  NDR 400 Gb/s per GPU = 50 GB/s.
- H200 SXM 141GB: 989 TFLOP/s, 141 GB, 4.8 TB/s, NVLink 900 GB/s (NVIDIA H200 datasheet).

SM counts and the boost clock at which the peak is quoted (the GEMM model quantizes tiles and
waves over the SMs, planner.catalog.kernels): A100 SXM 108 SMs at 1410 MHz, 1024 dense bf16
FMA per SM per clock (NVIDIA A100 Tensor Core GPU Architecture whitepaper, Table 1):
108 x 2048 x 1.41e9 = 311.9 TFLOP/s; H100 SXM5 132 SMs, 2048 FMA per SM per clock (NVIDIA
H100 Tensor Core GPU Architecture whitepaper, Table 3) at 1830 MHz: 132 x 4096 x 1.83e9 =
989.4 TFLOP/s; H200 is the same GH100 die and clocks with more HBM (H200 datasheet).

Bandwidths are GB/s (1e9 bytes/s), "per GPU, one direction" as NVIDIA quotes NVLink
aggregate bandwidth; the cost model's collective formulas use bus bandwidth (NCCL
doc/PERFORMANCE.md), which we take as half the quoted bidirectional NVLink figure.

`flash_attention_fraction` caps the fused attention kernel's utilisation where the GPU's
generation limits FlashAttention-2 (HOPPER_FLASH_ATTENTION_FRACTION below, with its source).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

GB = 1e9
GIB = 1024**3

# FlashAttention-2 reaches about 35 % of an H100's dense bf16 peak (Shah et al. 2024,
# "FlashAttention-3", abstract and §4.1: it does not use Hopper's asynchronous WGMMA and TMA
# units), while on Ampere it reaches GEMM-class utilisation (Dao 2023, §4.1: 50-73 % of the
# A100's peak forward). Hopper parts therefore cap the fused attention kernel at this fraction.
HOPPER_FLASH_ATTENTION_FRACTION = 0.35


class GpuSpec(BaseModel):
    """One GPU model. Every value can be overridden in a ClusterSpec."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    peak_bf16_tflops: float = Field(gt=0, description="peak dense bf16 tensor-core TFLOP/s")
    memory_gib: float = Field(gt=0, description="device memory, GiB")
    hbm_gbps: float = Field(gt=0, description="HBM bandwidth, GB/s")
    nvlink_gbps: float = Field(gt=0, description="NVLink bandwidth per GPU (bidirectional), GB/s")
    inter_node_gbps: float = Field(gt=0, description="default inter-node bandwidth per GPU, GB/s")
    sm_count: int | None = Field(
        default=None, gt=0, description="streaming multiprocessors; None: no tile quantization"
    )
    boost_clock_mhz: float | None = Field(
        default=None, gt=0, description="the clock at which peak_bf16_tflops is quoted"
    )
    flash_attention_fraction: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="the fraction of the bf16 peak a fused FlashAttention-2 kernel reaches at "
        "most on this GPU; None: the calibrated GEMM fraction (planner.catalog.kernels)",
    )

    @property
    def peak_flops(self) -> float:
        return self.peak_bf16_tflops * 1e12

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)


# The "80GB" parts carry 80 GiB (nvidia-smi reports 81920 MiB); the H200 reports
# 143771 MiB (140.4 GiB).
GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec(
            name="A100-SXM-80GB",
            peak_bf16_tflops=312.0,
            memory_gib=80.0,
            hbm_gbps=2039.0,
            nvlink_gbps=600.0,
            inter_node_gbps=25.0,
            sm_count=108,
            boost_clock_mhz=1410.0,
        ),
        GpuSpec(
            name="H100-SXM-80GB",
            peak_bf16_tflops=989.0,
            memory_gib=80.0,
            hbm_gbps=3350.0,
            nvlink_gbps=900.0,
            inter_node_gbps=50.0,
            sm_count=132,
            boost_clock_mhz=1830.0,
            flash_attention_fraction=HOPPER_FLASH_ATTENTION_FRACTION,
        ),
        GpuSpec(
            name="H200-SXM-141GB",
            peak_bf16_tflops=989.0,
            memory_gib=140.4,
            hbm_gbps=4800.0,
            nvlink_gbps=900.0,
            inter_node_gbps=50.0,
            sm_count=132,
            boost_clock_mhz=1830.0,
            flash_attention_fraction=HOPPER_FLASH_ATTENTION_FRACTION,
        ),
        # A stand-in "GPU" for plans of CPU runs (the reference runner with gloo on this
        # machine's cores); numbers are placeholders that measured profiles replace.
        GpuSpec(
            name="CPU",
            peak_bf16_tflops=1.0,
            memory_gib=16.0,
            hbm_gbps=20.0,
            nvlink_gbps=10.0,
            inter_node_gbps=1.0,
        ),
    )
}

ALIASES: dict[str, str] = {
    "A100": "A100-SXM-80GB",
    "A100-80GB": "A100-SXM-80GB",
    "A100 SXM 80GB": "A100-SXM-80GB",
    "H100": "H100-SXM-80GB",
    "H100-80GB": "H100-SXM-80GB",
    "H200": "H200-SXM-141GB",
}


def lookup_gpu(name: str) -> GpuSpec | None:
    """The catalog entry for `name` (or one of its aliases), or None."""
    return GPUS.get(ALIASES.get(name, name))
