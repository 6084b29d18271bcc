"""The cost model's calibrated constants: how FLOPs, bytes and messages become seconds.

Four constants, the only fitted numbers of the analytic cost model (docs/cost-model.md §4).
`bench/calibrate.py` fitted them once on Megatron-LM's Table 1 (Narayanan et al. 2021) by
least squares on log step time (`planner.calibrate`), never per row; a calibration document
(`meshplan calibrate`) replaces them for one GPU type and software stack:

- `matmul_fraction` -- the fraction of an SM's peak dense bf16 FLOP/s that a full wave of
  large GEMM tiles sustains. Tile and wave quantization, the HBM roofline and the per-kernel
  cost come on top of it (planner.catalog.kernels), so it is the GEMM efficiency *without*
  quantization losses. Fitted: 0.655 (+-2 sigma 0.60-0.72).
- `hbm_fraction` -- the achieved fraction of HBM bandwidth of memory-bound kernels (element-wise
  work, the optimizer step, GEMMs below the roofline's ridge). Fitted: at its bound 1.0.
- `kernel_overhead_s` -- the fixed GPU time of one kernel (ramp-up and the tail of its last
  wave; the CPU launch itself overlaps with the previous kernel). Not fitted: Table 1 runs
  every row at micro-batch 1 and does not determine it (the fit refuses it); 1 us is a prior.
- `link_fraction` -- the achieved fraction of a link's bus bandwidth (NCCL's rings; the bus
  bandwidth definitions of NCCL doc/PERFORMANCE.md). Fitted: at its bound 1.0.

Memory-bound time of `num_bytes` is num_bytes / (HBM bandwidth x hbm_fraction) (a roofline,
Williams, Waterman & Patterson 2009); compute-bound time is FLOPs / (peak x matmul_fraction).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from planner.catalog.hardware import GpuSpec

# bench/calibrate.py on ../shared/cases/megatron_table1.json (docs/cost-model.md §4): the first
# three fitted, the kernel overhead a prior (module docstring).
MATMUL_FRACTION = 0.655
HBM_FRACTION = 1.0
KERNEL_OVERHEAD_S = 1e-6
LINK_FRACTION = 1.0

CONSTANT_NAMES: tuple[str, ...] = (
    "matmul_fraction",
    "hbm_fraction",
    "kernel_overhead_s",
    "link_fraction",
)
"""The calibrated constants, in the order calibration reports them."""

_FRACTIONS = ("matmul_fraction", "hbm_fraction", "link_fraction")
MIN_FRACTION = 0.01


@dataclass(frozen=True)
class Efficiency:
    """The calibrated constants (module docstring); override for what-if studies or a new
    calibration. Fractions are in [0.01, 1] (below that no GPU is meant, and times overflow),
    the kernel overhead in [0, 1e-3] seconds."""

    matmul_fraction: float = MATMUL_FRACTION
    hbm_fraction: float = HBM_FRACTION
    kernel_overhead_s: float = KERNEL_OVERHEAD_S
    link_fraction: float = LINK_FRACTION

    def __post_init__(self) -> None:
        for name in _FRACTIONS:
            value = getattr(self, name)
            if not MIN_FRACTION <= value <= 1:
                raise ValueError(f"{name}={value} must be in [{MIN_FRACTION}, 1]")
        if not 0 <= self.kernel_overhead_s <= 1e-3:
            raise ValueError(f"kernel_overhead_s={self.kernel_overhead_s} must be in [0, 1e-3]")

    @classmethod
    def from_dict(cls, values: dict[str, float]) -> Efficiency:
        """From a calibration's constants; names not given keep their defaults."""
        unknown = sorted(set(values) - set(CONSTANT_NAMES))
        if unknown:
            raise ValueError(f"unknown constants {unknown}; known: {list(CONSTANT_NAMES)}")
        return cls(**{k: float(v) for k, v in values.items()})

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def replace(self, **values: float) -> Efficiency:
        current = {f.name: getattr(self, f.name) for f in fields(self)}
        return Efficiency(**(current | values))

    def matmul_s(self, flops: float, gpu: GpuSpec) -> float:
        """Seconds for `flops` of tensor-core work at the sustained rate (no quantization)."""
        return flops / (gpu.peak_flops * self.matmul_fraction)

    def memory_s(self, num_bytes: float, gpu: GpuSpec) -> float:
        """Seconds to stream `num_bytes` through HBM (memory-bound work)."""
        return num_bytes / (gpu.hbm_gbps * 1e9 * self.hbm_fraction)

    def time_s(self, *, flops: float, num_bytes: float, gpu: GpuSpec) -> float:
        """Compute plus memory time without overlap (the optimizer step and bulk estimates)."""
        return self.matmul_s(flops, gpu) + self.memory_s(num_bytes, gpu)


DEFAULT_EFFICIENCY = Efficiency()
