"""ClusterSpec: how many GPUs of which model, and the links between them (DESIGN.md, contract 2)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from planner.catalog.hardware import GpuSpec, lookup_gpu
from planner.specs.base import Frozen
from planner.specs.gpu_names import canonical_gpu
from planner.specs.limits import BOUNDS as B
from planner.specs.limits import TEXT


class ClusterSpec(Frozen):
    """GPUs and links. Link figures left out come from the GPU's catalog entry.

    Bandwidths are GB/s per GPU; latencies seconds per message. `gpu` is stored as the
    catalog's name (`gpu_names.canonical_gpu`: `A100` -> `A100-SXM-80GB`). Numbers are
    bounded by `limits.PhysicalBounds`.
    """

    gpu: str = Field(
        min_length=1, max_length=TEXT.name_chars, description="catalog name, e.g. A100-SXM-80GB"
    )
    num_gpus: int = Field(gt=0, le=B.num_gpus)
    gpus_per_node: int = Field(default=8, gt=0, le=B.gpus_per_node)
    intra_node_gbps: float | None = Field(default=None, ge=B.link_gbps_min, le=B.link_gbps)
    inter_node_gbps: float | None = Field(default=None, ge=B.link_gbps_min, le=B.link_gbps)
    intra_node_latency_s: float = Field(default=5e-6, ge=0, le=B.latency_s)
    inter_node_latency_s: float = Field(default=1e-5, ge=0, le=B.latency_s)
    peak_tflops: float | None = Field(
        default=None, ge=B.peak_tflops_min, le=B.peak_tflops, description="override the catalog"
    )
    memory_gib: float | None = Field(
        default=None, gt=0, le=B.memory_gib, description="override the catalog"
    )

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, v: str) -> str:
        return canonical_gpu(v)

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        n, g = self.num_gpus, self.gpus_per_node
        if n > g and n % g:
            raise ValueError(
                f"num_gpus={n} must be a multiple of gpus_per_node={g} when it spans nodes"
            )
        return self

    @property
    def device(self) -> GpuSpec:
        """The GPU's catalog entry with this spec's overrides applied."""
        base = lookup_gpu(self.gpu)
        assert base is not None  # checked on construction
        update: dict[str, float] = {}
        if self.peak_tflops is not None:
            update["peak_bf16_tflops"] = self.peak_tflops
        if self.memory_gib is not None:
            update["memory_gib"] = self.memory_gib
        if self.intra_node_gbps is not None:
            update["nvlink_gbps"] = self.intra_node_gbps
        if self.inter_node_gbps is not None:
            update["inter_node_gbps"] = self.inter_node_gbps
        return base.model_copy(update=update) if update else base

    @property
    def num_nodes(self) -> int:
        return max(1, -(-self.num_gpus // self.gpus_per_node))

    @property
    def intra_bw_bytes_per_s(self) -> float:
        return self.device.nvlink_gbps * 1e9

    @property
    def inter_bw_bytes_per_s(self) -> float:
        return self.device.inter_node_gbps * 1e9
