"""What a run measures on each rank: busy time, saved-activation bytes and memory.

Busy time: each PipelineStage's compute entry points (`forward_one_chunk`,
`backward_one_chunk`, `backward_weight_one_chunk`) are wrapped with a timer. Communication
waits happen outside them (the schedules wait for receives before calling them), so the sum is
the rank's compute time per step: what the simulator calls `busy_s`. On CUDA the timer records
CUDA events around each call and sums their elapsed times after the step (no synchronisation
inside the step); on CPU it uses `time.perf_counter`, and also sums the calling thread's CPU time
(`time.thread_time`): busy wall time over busy CPU time is how much other processes slowed the
rank's compute down (with OMP_NUM_THREADS=1 the compute runs on the calling thread). DDP's
gradient all-reduce runs inside the last backward call and so counts as busy.

Saved-activation bytes: each stage's forward runs under `torch.autograd.graph.saved_tensors_hooks`
whose pack hook records every tensor autograd saves for backward, except parameters and buffers
(model state; `profiler.saved_tensors` counts the same way). A tensor's bytes are counted once
per storage however many times it is saved, and released when autograd frees the last saved
reference (after the backward, or the weight-gradient step of a split backward). The meter
keeps the running sum per stage and per rank, and their peaks. Full recompute saves only the
block's input; selective saves all but the attention core's internals. The meter's pack hook is
Python run per saved tensor (measured: 5 % of a block's fw + bw on CPU), so the runner turns it
off (`active = False`) in the timed steps and measures activations in the untimed ones.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

__all__ = ["BusyTimer", "SavedBytesMeter", "static_bytes"]


class _Packed:
    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


class SavedBytesMeter:
    """Live and peak bytes of tensors saved for backward, per stage and for the whole rank."""

    def __init__(self, state: list[torch.Tensor]) -> None:
        """`state`: parameters and buffers; tensors on their storages are not activations."""
        self._param_storages = {_storage_key(t) for t in state}
        self._refs: dict[tuple[int, int], int] = {}  # (stage, storage) -> saved references
        self.live_bytes: dict[int, int] = {}
        self.peak_bytes: dict[int, int] = {}
        self.rank_live_bytes = 0
        self.rank_peak_bytes = 0
        self.active = True  # records only while active (the runner's untimed steps)

    def reset_peaks(self) -> None:
        self.peak_bytes = dict(self.live_bytes)
        self.rank_peak_bytes = self.rank_live_bytes

    @contextmanager
    def recording(self, stage: int) -> Iterator[None]:
        """Count what is saved for backward inside, as stage `stage` (nothing while not
        `active`)."""
        if not self.active:
            yield
            return
        self.live_bytes.setdefault(stage, 0)
        self.peak_bytes.setdefault(stage, 0)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: self._pack(stage, t), _unpack):
            yield

    def _pack(self, stage: int, t: torch.Tensor) -> Any:
        if isinstance(t, nn.Parameter) or t.untyped_storage().nbytes() == 0:
            return t
        storage = _storage_key(t)
        if storage in self._param_storages:
            return t  # a view of a parameter (e.g. the transposed weight of a matmul)
        key = (stage, storage)
        count = self._refs.get(key, 0)
        if count == 0:
            self._add(stage, t.untyped_storage().nbytes())
        self._refs[key] = count + 1
        # detached: a saved output must not hold its own grad_fn (an uncollectable cycle once
        # a graph is retained, as the split backward of the zero-bubble schedules does)
        packed = _Packed(t.detach())
        weakref.finalize(packed, self._release, key, t.untyped_storage().nbytes())
        return packed

    def _release(self, key: tuple[int, int], nbytes: int) -> None:
        count = self._refs[key] - 1
        if count:
            self._refs[key] = count
            return
        del self._refs[key]
        self._add(key[0], -nbytes)

    def _add(self, stage: int, nbytes: int) -> None:
        live = self.live_bytes[stage] + nbytes
        self.live_bytes[stage] = live
        self.peak_bytes[stage] = max(self.peak_bytes[stage], live)
        self.rank_live_bytes += nbytes
        self.rank_peak_bytes = max(self.rank_peak_bytes, self.rank_live_bytes)


def _unpack(packed: Any) -> torch.Tensor:
    if isinstance(packed, _Packed):
        return packed.tensor
    tensor: torch.Tensor = packed
    return tensor


def _storage_key(t: torch.Tensor) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    ptr: int = local.untyped_storage().data_ptr()
    return ptr


def _event() -> Any:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


class BusyTimer:
    """Sums the time spent inside wrapped compute calls, per stage."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._host_s: dict[int, float] = {}
        self.cpu_s = 0.0  # CPU only: this thread's CPU time inside the calls (all stages)
        self._events: list[tuple[int, Any, Any]] = []

    def wrap(self, stage: int, fn: Callable[..., Any]) -> Callable[..., Any]:
        self._host_s.setdefault(stage, 0.0)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._cuda:
                start = _event()
                end = _event()
                start.record()
                out = fn(*args, **kwargs)
                end.record()
                self._events.append((stage, start, end))
                return out
            t0, c0 = time.perf_counter(), time.thread_time()
            out = fn(*args, **kwargs)
            self._host_s[stage] += time.perf_counter() - t0
            self.cpu_s += time.thread_time() - c0
            return out

        return timed

    def take(self) -> dict[int, float]:
        """Busy seconds per stage since the last call (CUDA: synchronises first)."""
        if self._cuda:
            torch.cuda.synchronize()
            for stage, start, end in self._events:
                self._host_s[stage] += start.elapsed_time(end) / 1000.0
            self._events.clear()
        out = dict(self._host_s)
        for k in self._host_s:
            self._host_s[k] = 0.0
        self.cpu_s = 0.0
        return out


def static_bytes(
    params: list[nn.Parameter], optimizer: torch.optim.Optimizer
) -> tuple[int, int, int]:
    """(parameter, gradient, optimizer-state) bytes held by this rank (local shards)."""

    def nbytes(t: torch.Tensor) -> int:
        local = t.to_local() if hasattr(t, "to_local") else t
        return int(local.numel() * local.element_size())

    p = sum(nbytes(x) for x in params)
    g = sum(nbytes(x.grad) for x in params if x.grad is not None)
    o = 0
    for state in optimizer.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                o += nbytes(v)
    return p, g, o
