"""TrainingSpec: global batch, sequence length, dtypes and optimizer (DESIGN.md, contract 3)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from planner.specs.base import DTYPE_BYTES, Dtype, Frozen
from planner.specs.limits import BOUNDS as B

Optimizer = Literal["adam", "sgd"]

# Bytes of optimizer state per parameter, beyond the 16-bit weights and gradients
# (ZeRO paper, Rajbhandari et al. 2020, §3.1): mixed-precision Adam keeps an fp32 master
# copy, momentum and variance = 12 bytes; SGD with momentum: fp32 master + momentum = 8.
OPTIMIZER_STATE_BYTES: dict[str, int] = {"adam": 12, "sgd": 8}


class TrainingSpec(Frozen):
    global_batch_size: int = Field(
        gt=0, le=B.global_batch_size, description="sequences per optimizer step"
    )
    seq_length: int = Field(gt=0, le=B.seq_length)
    dtype: Dtype = "bf16"
    optimizer: Optimizer = "adam"

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def optimizer_state_bytes(self) -> int:
        """Per parameter; with fp32 training there is no separate master copy (-4)."""
        base = OPTIMIZER_STATE_BYTES[self.optimizer]
        return base - 4 if self.dtype == "fp32" else base

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.seq_length
