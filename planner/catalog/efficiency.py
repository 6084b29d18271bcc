"""How FLOPs and bytes become seconds on one GPU: the efficiency model of the analytic catalog.

Two constants, calibrated once on Megatron-LM's Table 1 (Narayanan et al. 2021) by
`bench/calibrate.py` and never per row (docs/cost-model.md):

- `MATMUL_FRACTION` -- the achieved fraction of the GPU's peak dense bf16 FLOP/s for the
  matrix multiplications of a layer (the linear layers and the attention-core batched matmuls);
- `HBM_FRACTION` -- the achieved fraction of the GPU's HBM bandwidth for the memory-bound
  element-wise work (norms, softmax, dropout, activation functions, residual adds, the
  optimizer step).

An operation's time is the sum of both parts (a roofline without overlap between them):

    t = matmul_flops / (peak_flops * MATMUL_FRACTION) + memory_bytes / (hbm * HBM_FRACTION)

The memory-bound part is what makes small hidden sizes slower per FLOP: its bytes grow like
s*b*h while the matmul FLOPs grow like s*b*h^2.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.catalog.hardware import GpuSpec

# Calibrated on ../shared/cases/megatron_table1.json with bench/calibrate.py (grid search of
# mean |error| of the predicted TFLOP/s per GPU over the ten rows; see docs/cost-model.md).
MATMUL_FRACTION = 0.64
HBM_FRACTION = 0.80


@dataclass(frozen=True)
class Efficiency:
    """The two calibrated constants; override for what-if studies or a new calibration."""

    matmul_fraction: float = MATMUL_FRACTION
    hbm_fraction: float = HBM_FRACTION

    def __post_init__(self) -> None:
        for name in ("matmul_fraction", "hbm_fraction"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"{name}={value} must be in (0, 1]")

    def matmul_s(self, flops: float, gpu: GpuSpec) -> float:
        """Seconds for `flops` of tensor-core matmul work."""
        return flops / (gpu.peak_flops * self.matmul_fraction)

    def memory_s(self, num_bytes: float, gpu: GpuSpec) -> float:
        """Seconds to stream `num_bytes` through HBM (memory-bound work)."""
        return num_bytes / (gpu.hbm_gbps * 1e9 * self.hbm_fraction)

    def time_s(self, *, flops: float, num_bytes: float, gpu: GpuSpec) -> float:
        return self.matmul_s(flops, gpu) + self.memory_s(num_bytes, gpu)


DEFAULT_EFFICIENCY = Efficiency()
