"""Exact count of the bytes autograd saves for backward, with `saved_tensors_hooks`.

Every tensor an autograd node saves during a forward passes through the pack hook of
`torch.autograd.graph.saved_tensors_hooks`. We record each one and count the bytes of its
*storage*, once per storage: views (q/k/v heads, the 2-D view a Linear saves of its 3-D input,
a transpose that is later reshaped without a copy) share storage with their base and cost
nothing extra, and a tensor saved by two ops (the LayerNorm output feeding q, k and v) is
counted once. Parameters and buffers (and views of them, e.g. the weight a Linear saves) are
model state, not activations: they are recognised by storage and reported separately.

Activation checkpointing is seen as it happens in memory: torch's non-reentrant checkpoint
saves the inputs of the checkpointed region through the outer hooks (its `_NoopSaveInputs`
node) and replaces the region's own saved tensors by placeholders with its inner hooks, so
`selective` counts q, k, v instead of the attention core's internals and `full` counts the
block input only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

import torch

T = TypeVar("T")

__all__ = ["SavedTensor", "SavedTensors", "count_saved"]


@dataclass(frozen=True)
class SavedTensor:
    """One storage held for backward (the first saved tensor seen on it)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    storage_bytes: int
    times_saved: int = 1


@dataclass(frozen=True)
class SavedTensors:
    """What a forward saved for backward, deduplicated by storage."""

    tensors: tuple[SavedTensor, ...]
    param_bytes: int = 0  # bytes of parameter/buffer storages that were saved (not activations)
    saved_calls: int = 0  # pack-hook calls, before deduplication
    by_shape: dict[tuple[int, ...], int] = field(default_factory=dict)

    @property
    def activation_bytes(self) -> int:
        return sum(t.storage_bytes for t in self.tensors)

    def shapes(self) -> list[tuple[int, ...]]:
        return [t.shape for t in self.tensors]


def _storage_key(t: torch.Tensor) -> tuple[str, int]:
    return (str(t.device), t.untyped_storage().data_ptr())


@dataclass
class _Record:
    tensor: torch.Tensor  # held so that no storage address is reused while counting
    storage_bytes: int
    times_saved: int = 1


def count_saved(
    fn: Callable[[], T], *, exclude: Iterable[torch.Tensor] = ()
) -> tuple[T, SavedTensors]:
    """Run `fn()` and count the tensors autograd saved during it.

    `exclude`: tensors whose storages are model state (parameters, buffers). Keep the result
    of `fn` alive while the count matters: the saved tensors belong to its graph.
    """
    excluded = {_storage_key(t) for t in exclude}
    records: dict[tuple[str, int], _Record] = {}  # insertion order = order saved
    state_bytes: dict[tuple[str, int], int] = {}
    calls = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal calls
        calls += 1
        key = _storage_key(t)
        if key in excluded:
            state_bytes[key] = t.untyped_storage().nbytes()
        elif key in records:
            records[key].times_saved += 1
        else:
            records[key] = _Record(tensor=t, storage_bytes=t.untyped_storage().nbytes())
        return t

    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        result = fn()
    tensors = tuple(
        SavedTensor(
            shape=tuple(r.tensor.shape),
            dtype=r.tensor.dtype,
            storage_bytes=r.storage_bytes,
            times_saved=r.times_saved,
        )
        for r in records.values()
    )
    by_shape: dict[tuple[int, ...], int] = {}
    for t in tensors:
        by_shape[t.shape] = by_shape.get(t.shape, 0) + t.storage_bytes
    return result, SavedTensors(
        tensors=tensors,
        param_bytes=sum(state_bytes.values()),
        saved_calls=calls,
        by_shape=by_shape,
    )
